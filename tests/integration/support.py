"""Helpers for the integration tests: load the model with test settings, drive it over gRPC and
HTTP, read Triton's /metrics."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import psutil
import tritonclient.http as httpclient

from control_plane.triton import llm_client
from control_plane.triton.llm_client import StreamResult, stock_inputs
from control_plane.triton.model_config import (
    model_json_bytes,
    read_model_json,
    read_pbtxt,
    set_parameter,
    to_load_json,
)
from control_plane.triton.runtime import PROJECT_ROOT
from control_plane.triton.server import TritonServer
from llm_backend.queue_config import level_policy_key

MODEL = "smollm2"
MODEL_DIR = PROJECT_ROOT / "model_repository" / MODEL
# Small enough that a handful of long generations saturate the engine on a CPU: two shared
# slots, and the one reserved for urgent requests.
TEST_MAX_NUM_SEQS = 3
TEST_URGENT_QUEUE_SIZE = 2
TEST_DRAIN_TIMEOUT_S = 20
# The session tritonserver's LLM_GATEWAY_SECRET (conftest.py): what the gateway would send.
GATEWAY_SECRET = "integration-tests-gateway-secret"


def test_model_config(version: int | None = None) -> tuple[str, dict[str, bytes]]:
    """The shipped config with cheap-to-saturate settings; everything else as shipped. With
    ``version``, as that Triton version alone (as the control plane loads a registry version)."""
    config = read_pbtxt(MODEL_DIR / "config.pbtxt")
    if version is not None:
        config.version_policy.specific.versions[:] = [version]
    set_parameter(config, level_policy_key(1), json.dumps(
        {"max_queue_size": TEST_URGENT_QUEUE_SIZE, "default_timeout_microseconds": 30_000_000,
         "allow_timeout_override": True}))
    set_parameter(config, "drain_timeout_seconds", str(TEST_DRAIN_TIMEOUT_S))
    # Level 3 waits as long as a burst of hundreds of streams takes on a slow 2-core machine (the
    # shipped 120 s is less than some such machines need), so only a hang times out there.
    policy = json.loads(config.parameters["default_queue_policy"].string_value)
    set_parameter(config, "default_queue_policy", json.dumps(
        {**policy, "default_timeout_microseconds": 400_000_000}))
    engine_args = read_model_json(MODEL_DIR)
    engine_args["max_num_seqs"] = TEST_MAX_NUM_SEQS
    return to_load_json(config), {f"file:{version or 1}/model.json": model_json_bytes(engine_args)}


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
    """vLLM's engine processes under the server, leaving out those that have already exited
    (zombies until their parent stub reaps them)."""
    found = []
    for process in server_processes(server):
        try:
            if "EngineCore" in " ".join(process.cmdline()) or process.name().startswith("VLLM"):
                found.append(process)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue
    return found


class GrpcStream(llm_client.GrpcStream):
    """A stream to the session's test model."""

    def __init__(self, server: TritonServer, model: str = MODEL) -> None:
        super().__init__(server.grpc_url, model)


__all__ = ["GrpcStream", "StreamResult", "stock_inputs"]


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
