"""Clients of every protocol through the gateway: tritonclient over HTTP and gRPC (unchanged code
with a key in its headers), plain HTTP generate, the official openai client; who may call what,
at which priority; admin APIs refused."""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from typing import Any

import grpc
import httpx
import numpy as np
import openai
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.integration.gateway.conftest import MODEL, Stack
from tests.integration.support import metric, wait_until

PROMPT = "The capital of France is"


def grpc_inputs(prompt: str, sampling: dict[str, Any]) -> list[grpcclient.InferInput]:
    """The stock vLLM backend's tensors."""
    def tensor(name: str, value: object, dtype: str) -> grpcclient.InferInput:
        data = np.array([value], dtype=np.object_ if dtype == "BYTES" else bool)
        return grpcclient.InferInput(name, [1], dtype).set_data_from_numpy(data)
    return [tensor("text_input", prompt.encode(), "BYTES"), tensor("stream", True, "BOOL"),
            tensor("sampling_parameters", json.dumps(sampling).encode(), "BYTES")]


class GrpcStreams:
    """tritonclient's streaming API through the gateway, as a client of the stock backend uses it."""

    def __init__(self, stack: Stack, tenant: str = "acme") -> None:
        self.client = grpcclient.InferenceServerClient(stack.grpc)
        self.responses: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.responses.put((result, error)),
                                 headers={"authorization": f"Bearer {stack.keys[tenant]}"})

    def send(self, request_id: str, sampling: dict[str, Any], priority: int = 0) -> None:
        self.client.async_stream_infer(MODEL, grpc_inputs(PROMPT, sampling),
                                       request_id=request_id, priority=priority)

    def collect(self, request_id: str, timeout: float = 120) -> tuple[str, str | None]:
        """(text, error) of one request, reading until its final response or error."""
        text = ""
        while True:
            result, error = self.responses.get(timeout=timeout)
            if error is not None:
                return text, str(error)
            response = result.get_response()
            assert response.id == request_id, "one request at a time in this helper"
            output = result.as_numpy("text_output")
            text += "".join(item.decode() for item in output) if output is not None else ""
            if response.parameters["triton_final_response"].bool_param:
                return text, None

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


def test_tritonclient_http_health_metadata_and_generate(stack: Stack) -> None:
    headers = stack.bearer()
    with httpclient.InferenceServerClient(stack.http.removeprefix("http://")) as client:
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready(MODEL, headers=headers)
        metadata = client.get_model_metadata(MODEL, headers=headers)
        assert metadata["name"] == MODEL
        assert {i["name"] for i in metadata["inputs"]} >= {"text_input", "sampling_parameters"}
        with pytest.raises(InferenceServerException, match="API key is required"):
            client.get_model_metadata(MODEL)
    with stack.client() as http:
        once = http.post(f"/v2/models/{MODEL}/generate", json={
            "text_input": PROMPT, "parameters": {"max_tokens": 8, "temperature": 0}})
        assert once.status_code == 200, once.text
        assert "Paris" in once.json()["text_output"]
        with http.stream("POST", f"/v2/models/{MODEL}/generate_stream", json={
                "text_input": PROMPT, "stream": True,
                "parameters": {"max_tokens": 8, "temperature": 0}}) as streamed:
            assert streamed.headers["content-type"].startswith("text/event-stream")
            events = [json.loads(line[6:]) for line in streamed.iter_lines()
                      if line.startswith("data: ")]
    # 8 tokens in at most 8 events: one event may carry several (vLLM's deltas hold what the
    # engine made since the last one, seen as 6 events for 8 tokens on a busy machine); the same
    # greedy text as the answer in one piece.
    streamed_text = "".join(e["text_output"] for e in events)
    assert 1 <= len(events) <= 8, events
    assert "Paris" in streamed_text and once.json()["text_output"].endswith(streamed_text), \
        (streamed_text, once.json()["text_output"])


def test_tritonclient_grpc_streaming_with_priority_reaching_the_backend(stack: Stack) -> None:
    with grpcclient.InferenceServerClient(stack.grpc) as client:
        assert client.is_server_live() and client.is_server_ready()
        headers = {"authorization": f"Bearer {stack.keys['acme']}"}
        assert client.is_model_ready(MODEL, headers=headers)
        assert client.get_model_metadata(MODEL, headers=headers).name == MODEL
        assert client.get_model_config(MODEL, headers=headers).config.name == MODEL
    streams = GrpcStreams(stack)
    try:
        streams.send("quick", {"max_tokens": 8, "temperature": 0})
        text, error = streams.collect("quick")
        assert error is None and "Paris" in text
        # gRPC's own priority field (which Triton r24.10 keeps from a Python backend) arrives
        # at the backend as its level: the node counts a running level-1 request.
        streams.send("urgent", {"max_tokens": 300, "ignore_eos": True, "temperature": 0},
                     priority=1)

        def level_one_running() -> bool:
            return any(metric(node, "llm_inflight_requests", model=MODEL, priority="1") == 1
                       for node in stack.nodes.values())

        assert wait_until(level_one_running, 60)
        text, error = streams.collect("urgent")
        assert error is None and text
    finally:
        streams.close()


def test_the_tenant_reaches_the_backend_only_through_the_gateway(stack: Stack) -> None:
    def counted() -> float:
        total = 0.0
        for node in stack.nodes.values():
            try:
                total += metric(node, "llm_tenant_requests_total", tenant="lowered")
            except KeyError:
                pass
        return total

    before = counted()
    with stack.client("lowered") as http:
        answer = http.post(f"/v2/models/{MODEL}/generate",
                           json={"text_input": PROMPT, "parameters": {"max_tokens": 2}})
        assert answer.status_code == 200, answer.text
        forged = http.post(f"/v2/models/{MODEL}/generate", json={
            "text_input": PROMPT, "parameters": {"max_tokens": 2, "tenant": "acme"}})
    assert forged.status_code == 400 and "set by the gateway" in forged.json()["error"]
    assert wait_until(lambda: counted() == before + 1, 10)


def test_openai_client_completions_and_chat_streaming_and_not(stack: Stack) -> None:
    client = openai.OpenAI(base_url=f"{stack.http}/v1", api_key=stack.keys["acme"])
    assert [m.id for m in client.models.list()] == [MODEL]

    completion = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8,
                                           temperature=0)
    assert "Paris" in completion.choices[0].text
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 8
    assert completion.usage.prompt_tokens > 0

    several = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=6,
                                        n=2, temperature=1.0, seed=3)
    assert [c.index for c in several.choices] == [0, 1]
    assert several.usage is not None and several.usage.completion_tokens == 12

    chunks = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert "Paris" in "".join(c.choices[0].text for c in chunks if c.choices)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8

    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=16, temperature=0, stop=["\n\n"])
    assert chat.choices[0].message.role == "assistant" and chat.choices[0].message.content
    # The chat template wraps the message in the model's own turn markers.
    assert chat.usage is not None and chat.usage.prompt_tokens > 10

    streamed = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello"}], max_tokens=8,
        temperature=0, stream=True, extra_body={"priority": 2}))
    assert streamed[0].choices[0].delta.role == "assistant"
    assert streamed[-1].choices[0].finish_reason == "length"
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)


def test_openai_logprobs_and_structured_outputs(stack: Stack) -> None:
    client = openai.OpenAI(base_url=f"{stack.http}/v1", api_key=stack.keys["acme"])
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Name a colour."}], max_tokens=6,
        temperature=0, logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens
    assert "".join(token.token for token in content) == chat.choices[0].message.content
    assert all(len(token.top_logprobs) == 2 and token.logprob <= 0 for token in content)
    # Greedy: the sampled token is the most likely one.
    assert all(token.top_logprobs[0].token == token.token for token in content)

    streamed = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=5,
                                              temperature=0, logprobs=1, stream=True))
    tokens = [t for c in streamed if c.choices and c.choices[0].logprobs
              for t in c.choices[0].logprobs.tokens]
    assert "".join(tokens) == "".join(c.choices[0].text for c in streamed if c.choices)
    assert len(tokens) == 5

    schema = {"type": "object", "properties": {"colour": {"type": "string", "maxLength": 12}},
              "required": ["colour"], "additionalProperties": False}
    shaped = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "A colour, as JSON."}],
        max_tokens=40, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}})
    assert set(json.loads(shaped.choices[0].message.content)) == {"colour"}


def test_openai_errors_come_in_openais_shape(stack: Stack) -> None:
    client = openai.OpenAI(base_url=f"{stack.http}/v1", api_key=stack.keys["acme"])
    with pytest.raises(openai.BadRequestError, match="echo=true is not supported"):
        client.completions.create(model=MODEL, prompt=PROMPT, echo=True)
    # A schema vLLM's structured-output backend cannot compile: the backend's refusal, named.
    with pytest.raises(openai.BadRequestError, match="structured_outputs"):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "x", "schema": {"type": "nonsense"}}})
    with pytest.raises(openai.NotFoundError, match="did you mean m"):
        client.completions.create(model="mm", prompt=PROMPT)
    with pytest.raises(openai.BadRequestError, match="max_model_len"):
        client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=100_000)
    with pytest.raises(openai.AuthenticationError, match="not valid"):
        openai.OpenAI(base_url=f"{stack.http}/v1", api_key="llmgw_wrong").models.list()
    raw = httpx.post(f"{stack.http}/v1/completions", headers=stack.bearer(),
                     json={"model": MODEL, "prompt": PROMPT, "temprature": 0})
    assert raw.status_code == 400
    assert raw.json()["error"]["type"] == "invalid_request_error"
    assert "temprature" in raw.json()["error"]["message"]


@pytest.mark.parametrize(("tenant", "headers", "status", "message"), [
    (None, {}, 401, "API key is required"),
    (None, {"Authorization": "Bearer llmgw_not-a-key"}, 401, "not valid"),
    (None, {"Authorization": "Basic abc"}, 401, "Bearer <API key>"),
    ("off", None, 403, "disabled"),
    ("elsewhere", None, 403, "may not use model 'm'"),
])
def test_keys_that_open_nothing(stack: Stack, tenant: str | None,
                                headers: dict[str, str] | None, status: int,
                                message: str) -> None:
    sent = stack.bearer(tenant) if tenant else headers
    answer = httpx.post(f"{stack.http}/v2/models/{MODEL}/generate", headers=sent,
                        json={"text_input": PROMPT}, timeout=30)
    assert answer.status_code == status and message in answer.json()["error"]


@pytest.mark.parametrize(("tenant", "code", "message"), [
    (None, grpc.StatusCode.UNAUTHENTICATED, "API key is required"),
    ("wrong", grpc.StatusCode.UNAUTHENTICATED, "not valid"),
    ("off", grpc.StatusCode.PERMISSION_DENIED, "disabled"),
])
def test_grpc_keys_that_open_nothing(stack: Stack, tenant: str | None,
                                     code: grpc.StatusCode, message: str) -> None:
    key = stack.keys.get(tenant or "", "llmgw_wrong") if tenant else None
    headers = {"authorization": f"Bearer {key}"} if key else None
    errors: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(stack.grpc) as client:
        client.start_stream(callback=lambda result, error: errors.put(error), headers=headers)
        # The gateway refuses the stream as it opens, so the error may reach the callback before
        # the request is sent; tritonclient then refuses to send on the failed stream.
        with contextlib.suppress(InferenceServerException):
            client.async_stream_infer(MODEL, grpc_inputs(PROMPT, {"max_tokens": 2}))
        error = errors.get(timeout=30)
        client.stop_stream()
    assert error is not None and code.name in str(error) and message in str(error)


def test_priority_more_urgent_than_the_tenant_may_use(stack: Stack) -> None:
    def generate(tenant: str, priority: int) -> httpx.Response:
        return httpx.post(f"{stack.http}/v2/models/{MODEL}/generate", headers=stack.bearer(tenant),
                          json={"text_input": PROMPT,
                                "parameters": {"max_tokens": 2, "priority": priority}},
                          timeout=60)

    refused = generate("limited", 1)
    assert refused.status_code == 403
    assert "priority levels 2 and above" in refused.json()["error"]
    assert generate("limited", 2).status_code == 200
    assert generate("lowered", 1).status_code == 200, "lowered to level 2, not refused"

    streams = GrpcStreams(stack, "limited")
    try:
        streams.send("too-urgent", {"max_tokens": 2}, priority=1)
        _, error = streams.collect("too-urgent")
    finally:
        streams.close()
    assert error is not None and "priority levels 2 and above" in error


def test_urls_not_served_name_what_is(stack: Stack) -> None:
    # An OpenAI client whose base URL lacks /v1 posts to /chat/completions.
    client = openai.OpenAI(base_url=stack.http, api_key=stack.keys["acme"])
    with pytest.raises(openai.NotFoundError, match="base URL ends in /v1"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    # An endpoint of OpenAI's this gateway has not got: OpenAI's error shape, what is served.
    with pytest.raises(openai.NotFoundError, match="POST /v1/chat/completions, POST /v1/"):
        openai.OpenAI(base_url=f"{stack.http}/v1", api_key=stack.keys["acme"]).embeddings.create(
            model=MODEL, input="hi")
    # A served URL with the wrong method: 405, the method to use, in each protocol's shape.
    for path, message in (("/v1/chat/completions", lambda body: body["error"]["message"]),
                          (f"/v2/models/{MODEL}/generate", lambda body: body["error"])):
        answer = httpx.get(f"{stack.http}{path}", headers=stack.bearer(), timeout=10)
        assert answer.status_code == 405, (path, answer.text)
        assert answer.headers["allow"] == "POST"
        assert message(answer.json()) == f"GET {path} is not served; use POST {path}"


def test_admin_apis_are_not_served(stack: Stack) -> None:
    headers = {"authorization": f"Bearer {stack.keys['acme']}"}
    with grpcclient.InferenceServerClient(stack.grpc) as client:
        for call in (lambda: client.get_model_repository_index(headers=headers),
                     lambda: client.load_model(MODEL, headers=headers),
                     lambda: client.unload_model(MODEL, headers=headers),
                     lambda: client.get_system_shared_memory_status(headers=headers),
                     lambda: client.get_log_settings(headers=headers)):
            with pytest.raises(InferenceServerException, match="UNIMPLEMENTED"):
                call()
    for method, path in (("POST", "/v2/repository/index"),
                         ("POST", f"/v2/repository/models/{MODEL}/unload"),
                         ("GET", "/v2/systemsharedmemory/status"), ("GET", "/v2/logging"),
                         ("GET", f"/v2/models/{MODEL}/stats")):
        answer = httpx.request(method, f"{stack.http}{path}", headers=stack.bearer(), timeout=10)
        assert answer.status_code == 403, (path, answer.text)
        assert "not served by the inference gateway" in answer.json()["error"]
    # Still served, by both nodes.
    assert all(node.is_live() for node in stack.nodes.values())


def test_concurrent_streams_from_both_protocols_all_finish(stack: Stack) -> None:
    failures: list[str] = []

    def http_stream() -> None:
        with stack.client() as http:
            answer = http.post(f"/v2/models/{MODEL}/generate_stream", json={
                "text_input": PROMPT, "stream": True, "parameters": {"max_tokens": 16}})
            if answer.status_code != 200 or '"error"' in answer.text:
                failures.append(answer.text)

    def grpc_stream(index: int) -> None:
        streams = GrpcStreams(stack)
        try:
            streams.send(f"c{index}", {"max_tokens": 16})
            _, error = streams.collect(f"c{index}")
            if error:
                failures.append(error)
        finally:
            streams.close()

    threads = [threading.Thread(target=http_stream) for _ in range(6)]
    threads += [threading.Thread(target=grpc_stream, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not failures
