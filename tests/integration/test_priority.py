"""Priority levels order the work under overload; queue policies answer instead of hanging.

The test model runs max_num_seqs=2, so two long generations fill the engine; the backend then
blocks in execute() with one more, and everything else waits in Triton's priority queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from tests.integration.support import GrpcStream, http_generate, metric, wait_until

LONG = {"max_tokens": 400, "ignore_eos": True, "temperature": 0}
MEDIUM = {"max_tokens": 48, "ignore_eos": True, "temperature": 0}
SHORT = {"max_tokens": 4, "temperature": 0}


def _submit(server, sampling, priority=0, timeout_us=None, prompt="Tell me a story") -> GrpcStream:
    stream = GrpcStream(server)
    stream.submit(prompt, sampling, priority=priority, timeout_us=timeout_us)
    return stream


@pytest.fixture
def saturated(served) -> Iterator[list[GrpcStream]]:
    """Two long generations running and one held by the backend: the engine is full."""
    streams = [_submit(served, LONG, priority=3) for _ in range(3)]
    assert wait_until(lambda: sum(s.result.first_token_at is not None for s in streams) == 2, 60)
    time.sleep(0.3)
    yield streams
    for stream in streams:
        stream.close(cancel=True)
    assert wait_until(lambda: metric(served, "llm_inflight_requests") == 0, 30)


def test_high_priority_request_submitted_last_overtakes_queued_low_priority_ones(served):
    blockers = [_submit(served, MEDIUM, priority=3) for _ in range(2)]
    assert wait_until(lambda: all(b.result.first_token_at for b in blockers), 60)
    queued = []
    for _ in range(4):
        queued.append(_submit(served, MEDIUM, priority=3))
        time.sleep(0.2)
    urgent = _submit(served, SHORT, priority=1)
    try:
        result = urgent.wait(timeout=120)
        assert result.error is None and result.final, result
        started_before_urgent_finished = [
            q for q in queued
            if q.result.first_token_at is not None and q.result.first_token_at < result.done_at
        ]
        # One low-priority request may already be held by the backend when the urgent one
        # arrives; every other one waits in Triton's queue behind it.
        assert len(started_before_urgent_finished) <= 1
        assert all(q.result.done_at is None or q.result.done_at > result.done_at for q in queued[1:])
    finally:
        for stream in [*blockers, *queued, urgent]:
            stream.close(cancel=True)
        assert wait_until(lambda: metric(served, "llm_inflight_requests") == 0, 30)


def test_request_that_times_out_in_the_queue_gets_a_timeout_error(saturated, served):
    waiting = _submit(served, SHORT, priority=2, timeout_us=200_000)
    try:
        result = waiting.wait(timeout=15)
        assert result.done_at is not None, "a queue timeout must answer, not hang"
        assert result.error is not None and "timeout" in result.error.lower(), result
        assert not result.texts
    finally:
        waiting.close(cancel=True)


def test_full_priority_queue_refuses_with_queue_size_error(saturated, served):
    # The test config allows 2 queued requests at level 1.
    urgent = [_submit(served, SHORT, priority=1) for _ in range(4)]
    try:
        assert wait_until(lambda: sum(bool(u.result.error) for u in urgent) >= 2, 15)
        time.sleep(0.5)
        errors = [u.result.error for u in urgent if u.result.error]
        assert errors and all("maximum queue size" in e for e in errors), errors
        assert len(errors) == 2
    finally:
        for stream in urgent:
            stream.close(cancel=True)


def test_http_priority_parameter_reaches_the_backend_and_vllm(served):
    """HTTP generate passes parameters.priority through as a request parameter: the backend
    validates it and hands the level to vLLM's scheduler (Triton's queue does not see it)."""
    results: list[tuple[int, object]] = []
    body = {"text_input": "Count to fifty:", "parameters": {"priority": 1, **MEDIUM}}
    worker = threading.Thread(target=lambda: results.append(http_generate(served, body, stream=True)))
    worker.start()
    try:
        assert wait_until(lambda: metric(served, "llm_inflight_requests", priority="1") == 1, 30)
    finally:
        worker.join(timeout=60)
    assert results and results[0][0] == 200


def test_grpc_priority_is_not_visible_to_the_backend(served):
    """gRPC's priority orders Triton's queue (test above), but Triton r24.10 gives a Python
    backend no way to read it: the backend counts the request at the default level."""
    stream = _submit(served, MEDIUM, priority=1)
    try:
        assert wait_until(lambda: metric(served, "llm_inflight_requests", priority="3") == 1, 30)
        assert metric(served, "llm_inflight_requests", priority="1") == 0
    finally:
        stream.close(cancel=True)
        assert wait_until(lambda: metric(served, "llm_inflight_requests") == 0, 30)
