"""A client that goes away aborts its vLLM request: the engine's running count falls."""

from __future__ import annotations

import http.client
import json
import time

from tests.integration.support import GrpcStream, metric, wait_until

LONG = {"max_tokens": 400, "ignore_eos": True, "temperature": 0}


def _engine_running(server) -> float:
    return metric(server, "llm_engine_requests", state="running")


def test_cancelled_grpc_stream_aborts_the_engine_request(served):
    stream = GrpcStream(served)
    stream.submit("Write a long poem", LONG)
    try:
        assert wait_until(lambda: len(stream.result.texts) >= 3, 60)
        assert wait_until(lambda: _engine_running(served) == 1, 10)
    finally:
        stream.close(cancel=True)
    assert wait_until(lambda: _engine_running(served) == 0, 15)
    assert wait_until(lambda: metric(served, "llm_inflight_requests") == 0, 15)
    assert stream.result.num_output_tokens < LONG["max_tokens"]


def test_dropped_http_stream_aborts_the_engine_request(served):
    host, port = served.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    body = json.dumps({"text_input": "Write a long poem", "stream": True, "parameters": LONG})
    connection.request("POST", "/v2/models/smollm2/generate_stream", body=body,
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    received = b""
    deadline = time.monotonic() + 60
    while received.count(b"data:") < 3 and time.monotonic() < deadline:
        received += response.read1(4096)
    assert received.count(b"data:") >= 3, received
    assert wait_until(lambda: _engine_running(served) == 1, 10)
    connection.sock.close()
    connection.close()
    assert wait_until(lambda: _engine_running(served) == 0, 15)
    assert wait_until(lambda: metric(served, "llm_inflight_requests") == 0, 15)
