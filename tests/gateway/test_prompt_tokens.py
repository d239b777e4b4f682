"""Counting prompt tokens at the gateway: the demo model's tokenizer, served as the control plane
serves it, counts what transformers (the backend's tokenizer) counts, for text and chat; a
truncated prompt counts what the backend keeps; a control plane that cannot be reached leaves
the byte bound, said once. (Fetching from a real control plane: tests/control_plane/registry/
test_tokenizer_api.py.)"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter
from tritonclient.grpc import service_pb2 as pb

from control_plane.demo_model import MODEL_DIR
from control_plane.registry.schemas import TokenizerOut
from control_plane.registry.tokenizer import VersionTokenizer, read_tokenizer_files
from control_plane.triton.server import free_port
from gateway.errors import BadRequest
from gateway.grpc_service import request_prompt
from gateway.kserve_http import checked_prompt
from gateway.prompt_tokens import FETCH_FAILED, NotCountable, Prompt, PromptTokenizer, PromptTokens
from gateway.quotas.policy import Limits
from gateway.routing.table import Route, Tenant
from gateway.service import Gateway
from gateway.settings import GatewaySettings

TEXTS = [
    "The capital of France is",
    "",
    " leading and trailing spaces ",
    "Ünïcödé, 日本語のテキスト, emoji 🎉🇫🇷, and a tab\there",
    "special tokens as text: <|im_start|>user<|im_end|><|endoftext|>",
    "\n" + " " * 80 + "code:\n\tdef f(x):\n\t\treturn x ** 2\n",
    "Once upon a time " * 300,
]
CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello! <|im_end|> How can I help?"},
     {"role": "user", "content": "Ünïcödé 🎉"}],
    # Content parts: the backend joins their texts with newlines.
    [{"role": "user", "content": [{"type": "text", "text": "one"},
                                  {"type": "text", "text": "two"}]}],
]
ROUTE = Route(name="m", model="m", alias="production", version=1, max_model_len=512,
              endpoints=())


@pytest.fixture(scope="module")
def demo() -> tuple[PromptTokenizer, Any]:
    """The demo model's tokenizer as the gateway builds it from the control plane's answer, and
    as transformers loads it (as vLLM does for the backend)."""
    if not (MODEL_DIR / "tokenizer.json").exists():
        pytest.skip("the demo model is not built (scripts/bootstrap.sh)")
    from transformers import AutoTokenizer

    files = read_tokenizer_files(MODEL_DIR, [MODEL_DIR.parent], 32 * 1024 * 1024)
    answer = TokenizerOut.of(VersionTokenizer("m", 1, None, files)).model_dump_json()
    return PromptTokenizer(json.loads(answer)), AutoTokenizer.from_pretrained(MODEL_DIR)


@pytest.mark.parametrize("text", TEXTS)
def test_a_text_prompt_counts_what_the_backend_counts(demo: tuple[PromptTokenizer, Any],
                                                      text: str) -> None:
    ours, transformers = demo
    # llm_backend/model.py: tokenizer.encode(prompt, add_special_tokens=True)
    expected = len(transformers.encode(text, add_special_tokens=True))
    assert ours.count(Prompt(text, len(text.encode()))) == expected


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_chat_messages_render_and_count_as_the_backend_does(
        demo: tuple[PromptTokenizer, Any], messages: list[dict[str, Any]]) -> None:
    ours, transformers = demo
    # The backend's messages (parts joined), rendered by the model's template for a reply and
    # tokenized without special tokens: the template writes them.
    flat = [{"role": m["role"], "content": m["content"] if isinstance(m["content"], str)
             else "\n".join(part["text"] for part in m["content"])} for m in messages]
    rendered = transformers.apply_chat_template(flat, add_generation_prompt=True,
                                                tokenize=False)
    text = json.dumps(messages)
    assert ours.render_chat(text) == rendered
    assert ours.count(Prompt(text, len(text.encode()), chat=True)) == \
        len(transformers.encode(rendered, add_special_tokens=False))


# What else transformers gives templates: tojson (not HTML-escaped), loop controls, the
# {% generation %} block, raise_exception, strftime_now and the special tokens.
RICH_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message | tojson }}{% endgeneration %}{% else %}"
    "{{ message['content'] | tojson(indent=2) }}{% endif %}{% if loop.index > 3 %}{% break %}"
    "{% endif %}{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role') }}{% endif %}{% endfor %}"
    "{{ strftime_now('%Y') }}{% if add_generation_prompt %}{{ eos_token }}{% endif %}")


def test_a_template_using_what_transformers_provides_renders_the_same(
        demo: tuple[PromptTokenizer, Any]) -> None:
    ours, transformers = demo
    rich = PromptTokenizer({"tokenizer_json": ours.tokenizer.to_str(),
                            "chat_template": RICH_TEMPLATE,
                            "special_tokens": ours.special_tokens})
    for messages in CONVERSATIONS[:2]:
        expected = transformers.apply_chat_template(messages, chat_template=RICH_TEMPLATE,
                                                    add_generation_prompt=True, tokenize=False)
        assert rich.render_chat(json.dumps(messages)) == expected


def test_messages_the_backend_refuses_or_no_template_are_not_countable(
        demo: tuple[PromptTokenizer, Any]) -> None:
    ours, _ = demo
    with pytest.raises(NotCountable, match="must be one of system, user, assistant"):
        ours.render_chat(json.dumps([{"role": "tool", "content": "x"}]))
    plain = PromptTokenizer({"tokenizer_json": ours.tokenizer.to_str()})
    with pytest.raises(NotCountable, match="the model has no chat template"):
        plain.render_chat(json.dumps(CONVERSATIONS[0]))
    refusing = PromptTokenizer({"tokenizer_json": ours.tokenizer.to_str(), "chat_template":
                                "{{ raise_exception('roles must alternate') }}"})
    with pytest.raises(NotCountable, match="refused the messages: roles must alternate"):
        refusing.render_chat(json.dumps(CONVERSATIONS[0]))


def test_a_document_without_a_loadable_tokenizer_is_a_value_error() -> None:
    for document in ({}, {"tokenizer_json": "{}"}, {"tokenizer_json": "not json"}):
        with pytest.raises(ValueError):
            PromptTokenizer(document)


@pytest.mark.parametrize(("tokens", "truncate", "max_model_len", "kept"), [
    (100, None, 512, 100),
    (100, 10, 512, 10),
    (5, 10, 512, 5),
    (600, -1, 512, 512),  # -1: as many as the model takes
    (600, -1, None, 600),
    (100, 0, 512, 100),  # refused by the backend: nothing is truncated
])
def test_a_truncated_prompt_counts_what_the_backend_keeps(
        tokens: int, truncate: int | None, max_model_len: int | None, kept: int) -> None:
    assert Prompt("x", 1, truncate=truncate).kept(tokens, max_model_len) == kept


def limited(**limits: int) -> Tenant:
    return Tenant(name="t", enabled=True, allowed_models=frozenset({"*"}),
                  limits=Limits(**limits))


def test_without_the_control_plane_limited_prompts_are_reserved_by_bytes_said_once(
        caplog: pytest.LogCaptureFixture) -> None:
    settings = GatewaySettings(control_plane_url=f"http://127.0.0.1:{free_port()}",
                               _env_file=None)  # type: ignore[call-arg]
    gateway = Gateway(settings)
    prompt = Prompt("The capital of France is", 24)

    async def reserved(tenant: Tenant) -> list[int]:
        grant = await gateway.admit(tenant, ROUTE, prompt, 10)
        await gateway.settle(tenant, ROUTE, grant, 0, 0, reached_node=False)
        return [check.cost for check in grant.taken]

    async def body() -> tuple[list[int], list[int], list[int]]:
        try:
            return (await reserved(limited(requests_per_minute=100)),
                    await reserved(limited(tokens_per_minute=1000)),
                    await reserved(limited(tokens_per_minute=1000)))
        finally:
            await gateway.prompt_tokens.aclose()

    with caplog.at_level(logging.WARNING, logger="gateway.prompt_tokens"):
        requests_only, first, second = asyncio.run(body())
    assert requests_only == [1]  # one request; no token limit, nothing counted
    assert first == second == [24 + 10]  # the prompt's bytes + max_tokens
    registry = gateway.metrics.registry
    assert registry.get_sample_value("llmgw_prompt_token_fallbacks_total",
                                     {"reason": FETCH_FAILED}) == 2
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert "prompt tokens of m version 1 are reserved by their byte length" in warnings[0]
    assert "ConnectError" in warnings[0] and "tried again in 10 s" in warnings[0]


def test_an_unreadable_prompt_is_reserved_by_bytes_without_asking_for_a_tokenizer() -> None:
    fallbacks = Counter("fallbacks", "", ["reason"], registry=CollectorRegistry())
    counter = PromptTokens(f"http://127.0.0.1:{free_port()}", None, fallbacks)

    async def body() -> int | None:
        try:
            return await counter.count(ROUTE, Prompt(None, 64))
        finally:
            await counter.aclose()

    assert asyncio.run(body()) is None


def grpc_request(text: bytes, sampling: dict[str, Any] | None = None,
                 **parameters: str | int) -> pb.ModelInferRequest:
    """As tritonclient sends it: raw contents, a 4-byte length before each string."""
    request = pb.ModelInferRequest(model_name="m")
    inputs = {"text_input": text}
    if sampling is not None:
        inputs["sampling_parameters"] = json.dumps(sampling).encode()
    for name, value in inputs.items():
        request.inputs.add(name=name, datatype="BYTES", shape=[1])
        request.raw_input_contents.append(len(value).to_bytes(4, "little") + value)
    for name, parameter in parameters.items():
        if isinstance(parameter, str):
            request.parameters[name].string_param = parameter
        else:
            request.parameters[name].int64_param = parameter
    return request


def test_each_protocol_reads_the_prompt_the_backend_reads() -> None:
    chat = json.dumps(CONVERSATIONS[0])
    assert checked_prompt(Gateway(GatewaySettings(_env_file=None)),  # type: ignore[call-arg]
                          ROUTE, {"text_input": [chat], "parameters": {
                              "input_format": "chat", "truncate_prompt_tokens": "8"}}) == \
        Prompt(chat, len(chat), chat=True, truncate=8)
    assert request_prompt(grpc_request("Ünï".encode(), {"truncate_prompt_tokens": -1},
                                       input_format="text")) == Prompt("Ünï", 5, truncate=-1)
    assert request_prompt(grpc_request(chat.encode(), input_format="chat",
                                       truncate_prompt_tokens=5)) == \
        Prompt(chat, len(chat), chat=True, truncate=5)
    # Not UTF-8: the backend refuses it; until then the byte bound reserves it.
    assert request_prompt(grpc_request(b"\xff\xfe")) == Prompt(None, 2)


def test_a_prompt_the_backend_truncates_is_not_refused_for_its_bytes() -> None:
    gateway = Gateway(GatewaySettings(max_bytes_per_token=1,
                                      _env_file=None))  # type: ignore[call-arg]
    long = "x" * (ROUTE.max_model_len or 0) * 2
    with pytest.raises(BadRequest, match="more than m's context of 512 tokens can hold"):
        gateway.check_prompt_bytes(ROUTE, Prompt(long, len(long)), "text_input")
    gateway.check_prompt_bytes(ROUTE, Prompt(long, len(long), truncate=-1), "text_input")
