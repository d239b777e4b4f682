"""Priority levels order the work under overload; queue policies answer instead of hanging.

The test model runs max_num_seqs=3: two shared engine slots and one reserved for level 1, so two
long generations saturate it for everyone else. The blockers generate far longer than any test
runs (ignore_eos, 1500 tokens) and are cancelled by the test, so what a test observes depends on
the order of events, never on how fast a loaded machine generates.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import pytest

from tests.integration.support import GrpcStream, metric, wait_until

LONG = {"max_tokens": 1500, "ignore_eos": True, "temperature": 0}
SHORT = {"max_tokens": 4, "temperature": 0}


def _submit(server, sampling, level=None, timeout_us=None, prompt="Tell me a story") -> GrpcStream:
    """A gRPC stream at ``level``: Triton's priority field for its queue, and the
    ``priority_level`` parameter, which is what the backend and vLLM can see."""
    stream = GrpcStream(server)
    stream.submit(prompt, sampling, priority=level or 0, timeout_us=timeout_us,
                  parameters={"priority_level": level} if level else None)
    return stream


def _close_all(server, streams, settle: bool = True) -> None:
    for stream in streams:
        stream.close(cancel=True)
    if not settle:
        return
    assert wait_until(lambda: metric(server, "llm_inflight_requests") == 0, 30)
    assert wait_until(lambda: metric(server, "llm_waiting_requests") == 0, 30)


@pytest.fixture
def saturated(served) -> Iterator[list[GrpcStream]]:
    """Two long generations fill the shared slots; a third waits in the backend's queue."""
    streams = [_submit(served, LONG, level=3) for _ in range(3)]
    assert wait_until(lambda: sum(s.result.first_token_at is not None for s in streams) == 2, 60)
    assert wait_until(lambda: metric(served, "llm_waiting_requests", priority="3") == 1, 10)
    yield streams
    _close_all(served, streams)


def _blocked(server) -> list[GrpcStream]:
    """Two endless level-3 generations holding both shared slots until the test cancels them."""
    blockers = [_submit(server, LONG, level=3) for _ in range(2)]
    assert wait_until(lambda: all(b.result.first_token_at for b in blockers), 120)
    return blockers


def test_urgent_request_submitted_last_runs_before_queued_ones(served):
    blockers = _blocked(served)
    queued = [_submit(served, LONG, level=3) for _ in range(4)]
    urgent = None
    try:
        assert wait_until(lambda: metric(served, "llm_waiting_requests", priority="3") == 4, 60)
        urgent = _submit(served, SHORT, level=1)
        result = urgent.wait(timeout=120)
        assert result.error is None and result.final, result
        assert not any(q.result.first_token_at for q in queued), (
            "the urgent request takes the reserved slot; queued ones wait for a shared one")
        assert not any(b.result.done_at for b in blockers), "no running generation had to end"
    finally:
        _close_all(served, [*blockers, *queued, *([urgent] if urgent else [])])


def test_higher_level_waiting_request_goes_before_lower_level_ones(served):
    blockers = _blocked(served)
    queued = [_submit(served, LONG, level=3) for _ in range(3)]
    elevated = None
    try:
        assert wait_until(lambda: metric(served, "llm_waiting_requests", priority="3") == 3, 60)
        elevated = _submit(served, SHORT, level=2)
        assert wait_until(lambda: metric(served, "llm_waiting_requests", priority="2") == 1, 60)
        # Level 2 may not take the reserved slot: it waits, like the level-3 requests before it,
        # until a shared slot frees. Free one.
        blockers[0].close(cancel=True)
        result = elevated.wait(timeout=120)
        assert result.error is None and result.final, result
        assert not any(
            q.result.first_token_at and q.result.first_token_at < result.first_token_at
            for q in queued
        ), "a level-2 request starts before every level-3 request that queued before it"
    finally:
        _close_all(served, [*blockers[1:], *queued, *([elevated] if elevated else [])])


def test_request_that_times_out_in_the_queue_gets_a_timeout_error(saturated, served):
    waiting = _submit(served, SHORT, level=2, timeout_us=200_000)
    try:
        result = waiting.wait(timeout=15)
        assert result.done_at is not None, "a queue timeout must answer, not hang"
        assert result.error is not None and "timed out" in result.error, result
        assert "queue" in result.error
        assert not result.texts
    finally:
        waiting.close(cancel=True)


def test_full_priority_queue_refuses_with_queue_size_error(saturated, served):
    running_urgent = _submit(served, LONG, level=1)
    assert wait_until(lambda: running_urgent.result.first_token_at is not None, 30)
    # The test config allows 2 waiting requests at level 1.
    urgent = [_submit(served, SHORT, level=1) for _ in range(3)]
    try:
        assert wait_until(lambda: any(u.result.error for u in urgent), 15)
        errors = [u.result.error for u in urgent if u.result.error]
        assert len(errors) == 1 and "queue is full" in errors[0], errors
        assert "max_queue_size" in errors[0]
        assert wait_until(lambda: metric(served, "llm_waiting_requests", priority="1") == 2, 10)
    finally:
        _close_all(served, [running_urgent, *urgent], settle=False)


def test_http_priority_parameter_reaches_the_backend(served):
    """HTTP generate passes parameters.priority through as a request parameter: the backend
    queues and runs the request at that level and hands it to vLLM's scheduler."""
    host, port = served.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    # "stream": true, so the first event comes with the first tokens, not after all 1500 (which
    # took over the 60 s timeout on a slow machine).
    body = json.dumps({"text_input": "Count to fifty:", "stream": True,
                       "parameters": {"priority": 1, **LONG}})
    try:
        connection.request("POST", "/v2/models/smollm2/generate_stream", body=body,
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        assert b"data:" in response.read1(4096)
        assert wait_until(lambda: metric(served, "llm_inflight_requests", priority="1") == 1, 30)
        assert metric(served, "llm_inflight_requests", priority="3") == 0
    finally:
        connection.close()
    assert wait_until(lambda: metric(served, "llm_inflight_requests") == 0, 30)


def test_grpc_priority_field_alone_is_not_visible_to_the_backend(served):
    """Triton r24.10 gives a Python backend no way to read gRPC's priority field: without the
    priority_level parameter the backend runs the request at the default level."""
    stream = GrpcStream(served)
    stream.submit("Tell me a story", LONG, priority=1)
    try:
        assert wait_until(lambda: metric(served, "llm_inflight_requests", priority="3") == 1, 30)
        assert metric(served, "llm_inflight_requests", priority="1") == 0
    finally:
        _close_all(served, [stream])
