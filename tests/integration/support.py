"""Helpers for the integration tests: load the model with test settings, drive it over gRPC and
HTTP, read Triton's /metrics."""

from __future__ import annotations

import json
import queue
import re
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from control_plane.triton.model_config import (
    model_json_bytes,
    read_model_json,
    read_pbtxt,
    set_parameter,
    to_load_json,
)
from control_plane.triton.runtime import PROJECT_ROOT
from control_plane.triton.server import TritonServer

MODEL = "smollm2"
MODEL_DIR = PROJECT_ROOT / "model_repository" / MODEL
# Small enough that a handful of long generations saturate the engine on a CPU.
TEST_MAX_NUM_SEQS = 2
TEST_URGENT_QUEUE_SIZE = 2


def test_model_config() -> tuple[str, dict[str, bytes]]:
    """The shipped config with cheap-to-saturate settings; everything else as shipped."""
    config = read_pbtxt(MODEL_DIR / "config.pbtxt")
    config.dynamic_batching.priority_queue_policy[1].max_queue_size = TEST_URGENT_QUEUE_SIZE
    set_parameter(config, "drain_timeout_seconds", "20")
    engine_args = read_model_json(MODEL_DIR)
    engine_args["max_num_seqs"] = TEST_MAX_NUM_SEQS
    return to_load_json(config), {"file:1/model.json": model_json_bytes(engine_args)}


def load_model(server: TritonServer, name: str = MODEL) -> None:
    config, files = test_model_config()
    with httpclient.InferenceServerClient(server.http_url, network_timeout=600) as client:
        client.load_model(name, config=config, files=files)
        if not client.is_model_ready(name):
            raise RuntimeError(f"{name} loaded but is not ready")


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def metric(server: TritonServer, name: str, **labels: str) -> float:
    """Sum of a metric's samples whose labels include ``labels``."""
    with urllib.request.urlopen(server.metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    total, found = 0.0, False
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+(\S+)$", line)
        if not match:
            continue
        sample_labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(sample_labels.get(k) == v for k, v in labels.items()):
            total += float(match.group(2))
            found = True
    if not found:
        raise KeyError(f"{name}{labels} not in /metrics")
    return total


def server_processes(server: TritonServer) -> list[psutil.Process]:
    assert server.process is not None
    return psutil.Process(server.process.pid).children(recursive=True)


def engine_processes(server: TritonServer) -> list[psutil.Process]:
    return [p for p in server_processes(server) if "EngineCore" in " ".join(p.cmdline()) or
            p.name().startswith("VLLM")]


def stock_inputs(prompt: str, sampling: dict[str, Any] | None = None, stream: bool = True,
                 exclude_input: bool | None = None, returns: bool = True,
                 module: Any = grpcclient) -> list[Any]:
    """Inputs as a client of Triton's stock vLLM backend builds them (shape [1] each)."""
    def tensor(name: str, value: Any, dtype: str) -> Any:
        t = module.InferInput(name, [1], dtype)
        t.set_data_from_numpy(np.array([value], dtype=np.object_ if dtype == "BYTES" else bool))
        return t

    inputs = [tensor("text_input", prompt.encode(), "BYTES"), tensor("stream", stream, "BOOL")]
    if sampling is not None:
        inputs.append(tensor("sampling_parameters", json.dumps(sampling).encode(), "BYTES"))
    if exclude_input is not None:
        inputs.append(tensor("exclude_input_in_output", exclude_input, "BOOL"))
    if returns:
        for name in ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens"):
            inputs.append(tensor(name, True, "BOOL"))
    return inputs


@dataclass
class StreamResult:
    texts: list[str] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    num_input_tokens: int | None = None
    num_output_tokens: int = 0
    error: str | None = None
    error_status: str | None = None
    final: bool = False
    submitted_at: float = 0.0
    first_token_at: float | None = None
    done_at: float | None = None

    @property
    def text(self) -> str:
        return "".join(self.texts)


class GrpcStream:
    """One gRPC stream (one client each, as tritonclient allows one stream per client)."""

    def __init__(self, server: TritonServer, model: str = MODEL) -> None:
        self.model = model
        self.client = grpcclient.InferenceServerClient(server.grpc_url)
        self._events: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self._events.put((result, error)))
        self.result = StreamResult()
        self._reader: threading.Thread | None = None

    def submit(self, prompt: str, sampling: dict[str, Any], priority: int = 0,
               timeout_us: int | None = None, stream: bool = True) -> None:
        self.result.submitted_at = time.monotonic()
        kwargs: dict[str, Any] = {"priority": priority}
        if timeout_us is not None:
            kwargs["timeout"] = timeout_us
        self.client.async_stream_infer(
            self.model, stock_inputs(prompt, sampling, stream=stream),
            enable_empty_final_response=True, **kwargs,
        )
        self.start_reader()

    def start_reader(self) -> None:
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        result = self.result
        while True:
            item, error = self._events.get()
            if error is not None:
                result.error = str(error)
                result.error_status = getattr(error, "status", lambda: None)()
                result.done_at = time.monotonic()
                return
            response = item.get_response()
            text = item.as_numpy("text_output")
            if text is not None and text.size:
                if result.first_token_at is None:
                    result.first_token_at = time.monotonic()
                result.texts.append(b"".join(text.tolist()).decode())
                reasons = item.as_numpy("finish_reason")
                if reasons is not None:
                    result.finish_reasons.extend(r.decode() for r in reasons.tolist())
                counts = item.as_numpy("num_input_tokens")
                if counts is not None:
                    result.num_input_tokens = int(counts[0])
                out_counts = item.as_numpy("num_output_tokens")
                if out_counts is not None:
                    result.num_output_tokens += int(out_counts.sum())
            if response.parameters["triton_final_response"].bool_param:
                result.final = True
                result.done_at = time.monotonic()
                return

    def wait(self, timeout: float) -> StreamResult:
        assert self._reader is not None
        self._reader.join(timeout)
        return self.result

    def close(self, cancel: bool = False) -> None:
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def http_generate(server: TritonServer, body: dict[str, Any], stream: bool = False,
                  timeout: float = 120) -> tuple[int, Any]:
    """POST to generate (JSON) or generate_stream (list of SSE events)."""
    endpoint = "generate_stream" if stream else "generate"
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/models/{MODEL}/{endpoint}",
        data=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            payload = resp.read().decode()
            status = resp.status
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read().decode())
    if not stream:
        return status, json.loads(payload)
    events = [json.loads(line[len("data: "):]) for line in payload.splitlines()
              if line.startswith("data: ")]
    return status, events


def model_path() -> Path:
    return MODEL_DIR
