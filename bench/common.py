"""Shared pieces of the benchmarks: a server with model variants, timing, tables, JSON results."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import tritonclient.http as httpclient

from control_plane.triton import restricted_api
from control_plane.triton.llm_client import GrpcStream, StreamResult
from control_plane.triton.model_config import (
    model_json_bytes,
    read_model_json,
    read_pbtxt,
    set_parameter,
    to_load_json,
)
from control_plane.triton.runtime import CACHE_DIR, PROJECT_ROOT
from control_plane.triton.server import ENGINE_ENVIRONMENT, TritonServer, free_port

RESULTS_DIR = PROJECT_ROOT / "bench" / "results"
CONTROL_PLANE_CLI = Path(sys.executable).with_name("llm-control-plane")
MODEL_DIR = PROJECT_ROOT / "model_repository" / "smollm2"
PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a refrigerator works.",
    "List some facts about the Moon.",
    "Describe a walk through a forest in autumn.",
    "What makes a good cup of coffee?",
    "Tell me about the history of trains.",
    "Write a poem about the sea.",
    "How do birds find their way when migrating?",
]


def engine_environment() -> None:
    """The same vLLM environment the Triton launcher gives the backend, for in-process engines."""
    for key, value in ENGINE_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("LLM_MODELS_DIR", str(CACHE_DIR / "models"))


def shipped_engine_args() -> dict[str, Any]:
    engine_environment()
    return {key: os.path.expandvars(value) if isinstance(value, str) else value
            for key, value in read_model_json(MODEL_DIR).items()}


@dataclass
class Variant:
    """A model loaded from the shipped config with some settings changed."""

    name: str
    parameters: dict[str, str]
    engine_overrides: dict[str, Any]


def load_variant(server: TritonServer, variant: Variant) -> float:
    """Load ``variant`` through Triton's repository API; returns Triton's load time in seconds."""
    config = read_pbtxt(MODEL_DIR / "config.pbtxt")
    config.name = variant.name
    for key, value in variant.parameters.items():
        set_parameter(config, key, value)
    engine_args = {**read_model_json(MODEL_DIR), **variant.engine_overrides}
    started = time.monotonic()
    with httpclient.InferenceServerClient(server.http_url, network_timeout=900) as client:
        client.load_model(variant.name, config=to_load_json(config),
                          files={"file:1/model.json": model_json_bytes(engine_args)},
                          headers=(restricted_api.http_headers(server.repository_key)
                                   if server.repository_key else None))
    return time.monotonic() - started


def start_server(tag: str, repository_key: str | None = None) -> TritonServer:
    server = TritonServer(PROJECT_ROOT / "model_repository",
                          log_path=CACHE_DIR / "logs" / f"bench-{tag}-tritonserver.log",
                          repository_key=repository_key)
    server.start()
    return server


def stream_once(server: TritonServer, model: str, prompt: str, sampling: dict[str, Any],
                level: int | None = None, timeout: float = 600) -> StreamResult:
    stream = GrpcStream(server.grpc_url, model)
    try:
        stream.submit(prompt, sampling, priority=level or 0,
                      parameters={"priority_level": level} if level else None)
        result = stream.wait(timeout)
    finally:
        stream.close(cancel=True)
    if result.error:
        raise RuntimeError(f"{model}: {result.error}")
    return result


def run_concurrently(calls: list[Callable[[], Any]]) -> list[Any]:
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        results[index] = calls[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def machine() -> dict[str, Any]:
    return {
        "cpu": platform.processor() or platform.machine(),
        "cores": psutil.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def print_table(title: str, headers: list[str], rows: list[list[Any]]) -> None:
    cells = [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


def write_results(name: str, data: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    payload = {"benchmark": name, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "machine": machine(), **data}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"\nwrote {path}")
    return path


def control_plane_cli(env: dict[str, str], *args: str) -> str:
    """Run ``llm-control-plane <args>`` as an operator would; its stdout, or an error with stderr."""
    done = subprocess.run([str(CONTROL_PLANE_CLI), *args], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"llm-control-plane {' '.join(args)} exited {done.returncode}: "
                           f"{done.stderr.strip()[-2000:]}")
    return done.stdout



def wait_control_plane_ready(process: subprocess.Popen[bytes], base_url: str, log_path: Path,
                             timeout_s: float = 60) -> None:
    """Until ``/readyz`` answers 200; raises if the process exits or the time runs out."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=base_url, trust_env=False, timeout=5) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the control plane exited {process.returncode} at start; "
                                   f"see {log_path}")
            try:
                if client.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
    raise RuntimeError(f"the control plane was not ready within {timeout_s:.0f} s; see {log_path}")


__all__ = ["control_plane_cli", "free_port", "wait_control_plane_ready"]
