"""Unload drains and frees everything; a dead engine or a killed server leaves no orphans."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import psutil
import pytest
import tritonclient.http as httpclient

from control_plane.triton.runtime import CACHE_DIR, PROJECT_ROOT
from control_plane.triton.server import TritonServer
from tests.integration import support
from tests.integration.support import (
    MODEL,
    TEST_DRAIN_TIMEOUT_S,
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


def test_swap_stops_the_replaced_engine_while_a_stream_opened_on_it_stays_open(served):
    """Triton r24.10 keeps the version that a gRPC stream's first request went to until the
    stream closes, so its finalize waits for the client (llm_backend/serving_watch.py); the
    backend stops the engine of a replaced version within its drain timeout all the same."""
    old_engines = engine_processes(served)
    assert old_engines
    stream = GrpcStream(served)
    try:
        stream.submit("Hello", {"max_tokens": 2, "temperature": 0})
        first = stream.wait(timeout=60)
        assert first.error is None and first.final, first
        # What a swap loads under the same name. Imported by module: pytest would collect a
        # bare test_model_config as a test.
        config, files = support.test_model_config(version=2)
        with httpclient.InferenceServerClient(served.http_url, network_timeout=600) as client:
            client.load_model(MODEL, config=config, files=files)
            assert client.is_model_ready(MODEL, "2") and not client.is_model_ready(MODEL, "1")
        swapped = time.monotonic()
        stopped = wait_until(lambda: _all_gone(old_engines), TEST_DRAIN_TIMEOUT_S + 30)
        assert stopped, (f"version 1's engine still runs {time.monotonic() - swapped:.0f} s "
                         "after version 2 replaced it, with a stream opened on it still open")
        # The stream itself goes on, now served by version 2.
        stream.submit("Hello", {"max_tokens": 2, "temperature": 0})
        after = stream.wait(timeout=60)
        assert after.error is None and after.final, after
    finally:
        stream.close()
        # Version 2 goes; the session's own config comes back for the next test that needs it.
        engines = engine_processes(served)
        with httpclient.InferenceServerClient(served.http_url) as client:
            client.unload_model(MODEL)
        wait_until(lambda: _all_gone(engines), 60)


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
