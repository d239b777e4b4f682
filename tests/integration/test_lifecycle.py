"""Unload drains and frees everything; a dead engine or a killed server leaves no orphans."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import psutil
import pytest
import tritonclient.http as httpclient

from control_plane.triton.runtime import CACHE_DIR, PROJECT_ROOT
from control_plane.triton.server import TritonServer
from tests.integration.support import (
    MODEL,
    GrpcStream,
    engine_processes,
    http_generate,
    load_model,
    server_processes,
    wait_until,
)

GOOD = {"text_input": "Hello", "parameters": {"max_tokens": 3, "temperature": 0}}


def _all_gone(processes: list[psutil.Process]) -> bool:
    return not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in processes)


def _ready(server: TritonServer) -> bool:
    with httpclient.InferenceServerClient(server.http_url) as client:
        return bool(client.is_model_ready(MODEL))


def test_unload_drains_in_flight_streams_then_frees_the_processes(served):
    processes = server_processes(served)
    assert engine_processes(served), "the engine runs in processes of its own"
    stream = GrpcStream(served)
    stream.submit("Count slowly:", {"max_tokens": 40, "ignore_eos": True, "temperature": 0})
    try:
        assert wait_until(lambda: stream.result.first_token_at is not None, 30)
        with httpclient.InferenceServerClient(served.http_url) as client:
            client.unload_model(MODEL)
        result = stream.wait(timeout=60)
    finally:
        stream.close()
    assert result.error is None and result.final, "finalize lets in-flight streams finish"
    assert result.num_output_tokens == 40
    assert wait_until(lambda: _all_gone(processes), 60), "stub and engine exit after unload"
    assert not _ready(served)

    load_model(served)
    status, body = http_generate(served, GOOD)
    assert status == 200 and body["text_output"]


@pytest.fixture(scope="module")
def spare() -> Iterator[TritonServer]:
    """A server of its own, for tests that kill parts of it."""
    server = TritonServer(PROJECT_ROOT / "model_repository",
                          log_path=CACHE_DIR / "logs" / "test-spare-tritonserver.log")
    server.start()
    try:
        yield server
    finally:
        server.kill()


def test_dead_engine_fails_requests_as_unavailable_and_model_reports_not_ready(spare):
    load_model(spare)
    stream = GrpcStream(spare)
    stream.submit("Tell a story", {"max_tokens": 400, "ignore_eos": True, "temperature": 0})
    try:
        assert wait_until(lambda: stream.result.first_token_at is not None, 30)
        for process in engine_processes(spare):
            process.send_signal(signal.SIGKILL)
        result = stream.wait(timeout=60)
    finally:
        stream.close()
    assert result.done_at is not None, "a stream on a dead engine ends, it does not hang"
    assert result.error is not None and "engine died" in result.error, result
    assert wait_until(lambda: not _ready(spare), 60)


def test_killed_tritonserver_leaves_no_engine_process(spare):
    load_model(spare)
    processes = server_processes(spare)
    engines = engine_processes(spare)
    assert engines
    os.kill(spare.process.pid, signal.SIGKILL)
    spare.process.wait(timeout=10)
    assert wait_until(lambda: _all_gone(processes), 30), [
        (p.pid, p.name()) for p in processes if p.is_running()
    ]
