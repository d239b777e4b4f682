"""Bytes that must never reach a node: oversized bodies (declared, chunked, over gRPC), prompts
that cannot fit the context, clients that send their body too slowly. After each, every node is
up and the gateway serves everyone else."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.gateway.conftest import BODY_TIMEOUT_S, MODEL, Stack

MiB = 1024 * 1024


def still_serving(stack: Stack) -> None:
    assert all(node.is_live() for node in stack.nodes.values()), "a node went down"
    answer = httpx.post(f"{stack.http}/v2/models/{MODEL}/generate", headers=stack.bearer(),
                        json={"text_input": "Hello", "parameters": {"max_tokens": 2}},
                        timeout=60)
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("size", [8 * MiB, 64 * MiB])
def test_oversized_bodies_are_refused_before_any_node_sees_them(stack: Stack, size: int) -> None:
    body = json.dumps({"text_input": "x" * size}).encode()
    started = time.monotonic()
    answer = httpx.post(f"{stack.http}/v2/models/{MODEL}/generate", headers=stack.bearer(),
                        content=body, timeout=60)
    assert answer.status_code == 413, answer.text
    assert "LLMGW_MAX_BODY_BYTES" in answer.json()["error"]
    print(f"[gateway] {size // MiB} MiB refused in {time.monotonic() - started:.2f} s")
    still_serving(stack)


def test_a_chunked_body_is_cut_off_once_it_passes_the_limit(stack: Stack) -> None:
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        yield b'{"text_input": "'
        for _ in range(64):
            sent += MiB
            yield b"x" * MiB
        yield b'"}'

    try:
        answer = httpx.post(f"{stack.http}/v2/models/{MODEL}/generate", headers=stack.bearer(),
                            content=chunks(), timeout=60)
        assert answer.status_code == 413 and "sent chunked" in answer.json()["error"]
    except httpx.TransportError:
        # The gateway may close the connection before the client has read the answer; what
        # matters is that it stopped reading long before the 64 MiB were sent.
        pass
    assert sent < 64 * MiB, "the gateway read the whole chunked body"
    still_serving(stack)


def test_an_oversized_grpc_message_is_resource_exhausted(stack: Stack) -> None:
    data = np.array([b"x" * (8 * MiB)], dtype=np.object_)
    text = grpcclient.InferInput("text_input", [1], "BYTES").set_data_from_numpy(data)
    errors: list[object] = []
    with grpcclient.InferenceServerClient(stack.grpc) as client:
        client.start_stream(callback=lambda result, error: errors.append(error),
                            headers={"authorization": f"Bearer {stack.keys['acme']}"})
        client.async_stream_infer(MODEL, [text])
        deadline = time.monotonic() + 30
        while not errors and time.monotonic() < deadline:
            time.sleep(0.05)
        client.stop_stream()
    assert errors and "RESOURCE_EXHAUSTED" in str(errors[0])
    with grpcclient.InferenceServerClient(stack.grpc) as client, pytest.raises(
            InferenceServerException, match="RESOURCE_EXHAUSTED"):
        client.get_model_metadata("x" * (3 * MiB))
    still_serving(stack)


def test_a_prompt_that_cannot_fit_the_context_is_refused_without_tokenizing(stack: Stack) -> None:
    # Within the body limit, but 512 tokens (the test model's context) cannot hold 1 MiB.
    started = time.monotonic()
    answer = httpx.post(f"{stack.http}/v2/models/{MODEL}/generate", headers=stack.bearer(),
                        json={"text_input": "x" * MiB}, timeout=60)
    took = time.monotonic() - started
    assert answer.status_code == 400, answer.text
    assert "context of 512 tokens" in answer.json()["error"]
    print(f"[gateway] 1 MiB prompt refused in {took * 1000:.0f} ms")
    chat = httpx.post(f"{stack.http}/v1/chat/completions", headers=stack.bearer(), json={
        "model": MODEL, "messages": [{"role": "user", "content": "y" * MiB}]}, timeout=60)
    assert chat.status_code == 400 and "messages is" in chat.json()["error"]["message"]


def test_a_slow_body_is_timed_out_and_others_are_served_meanwhile(stack: Stack) -> None:
    host, port = stack.http.removeprefix("http://").split(":")
    body = json.dumps({"text_input": "Hello", "parameters": {"max_tokens": 2}}).encode()
    answers: list[bytes] = []

    def slow_client() -> None:
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            sock.sendall((f"POST /v2/models/{MODEL}/generate HTTP/1.1\r\nHost: {host}\r\n"
                          f"Authorization: Bearer {stack.keys['acme']}\r\n"
                          f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                          "\r\n").encode())
            try:
                for byte in body:
                    sock.sendall(bytes([byte]))
                    time.sleep(0.5)
            except OSError:
                pass  # the gateway closed the connection: what the test expects
            answers.append(sock.recv(65536))

    started = time.monotonic()
    thread = threading.Thread(target=slow_client)
    thread.start()
    time.sleep(0.5)
    still_serving(stack)  # while the slow client trickles
    thread.join(timeout=BODY_TIMEOUT_S + 30)
    assert not thread.is_alive()
    assert answers and answers[0].startswith(b"HTTP/1.1 408"), answers
    assert b"did not arrive within" in answers[0]
    assert time.monotonic() - started < BODY_TIMEOUT_S + 10
    still_serving(stack)


def test_malformed_bodies_name_what_is_wrong(stack: Stack) -> None:
    def post(content: bytes) -> httpx.Response:
        return httpx.post(f"{stack.http}/v2/models/{MODEL}/generate", headers=stack.bearer(),
                          content=content, timeout=30)

    assert "not valid JSON" in post(b"{nope").json()["error"]
    assert "JSON object" in post(b"[1, 2]").json()["error"]
    assert "text_input is required" in post(b"{}").json()["error"]
    backend = post(json.dumps({"text_input": "x", "parameters": {"max_tokens": "many"}}).encode())
    assert backend.status_code == 400 and "max_tokens" in backend.json()["error"]
    still_serving(stack)
