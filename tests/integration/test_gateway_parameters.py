"""The request parameters the inference gateway sends: chat input rendered by the model's own
template, prompts too long refused from their size, and tenants trusted only with the gateway's
secret and counted on /metrics."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid

import pytest
from transformers import AutoTokenizer

from control_plane.demo_model import MODEL_DIR
from tests.integration.support import GATEWAY_SECRET, GrpcStream, http_generate, metric, wait_until

QUESTION = "What is the capital of France?"
MESSAGES = [{"role": "user", "content": QUESTION}]
GREEDY = {"temperature": 0, "max_tokens": 24}
ELAPSED_LIMIT_S = 0.8


def chat(messages: object = MESSAGES, **parameters: object) -> dict:
    return {"text_input": json.dumps(messages), "return_num_input_tokens": True,
            "parameters": {"input_format": "chat", **GREEDY, **parameters}}


def test_chat_input_is_rendered_with_the_models_template(served):
    status, body = http_generate(served, chat())
    assert status == 200, body
    # Not the answer's content: a 135M model's greedy answer moves with the CPU's arithmetic
    # (seen: "Paris" on one machine, French prose on another). The prompt is checked exactly.
    assert body["text_output"].strip(), body
    # The JSON is not echoed, and the prompt is exactly what the model's template makes of it.
    assert not body["text_output"].startswith("[")
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    rendered = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert body["num_input_tokens"] == len(tokenizer.encode(rendered, add_special_tokens=False))

    status, raw = http_generate(served, {"text_input": json.dumps(MESSAGES),
                                         "exclude_input_in_output": True,
                                         "parameters": {"input_format": "text", **GREEDY}})
    assert status == 200, raw
    assert raw["text_output"] != body["text_output"]


def test_chat_input_can_echo_the_rendered_prompt(served):
    status, body = http_generate(served, {**chat(), "exclude_input_in_output": False})
    assert status == 200, body
    assert body["text_output"].startswith("<|im_start|>system\n")
    assert f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n" in body["text_output"]


def test_chat_input_over_grpc_with_text_parts(served):
    messages = [{"role": "system", "content": "You answer in one word."},
                {"role": "user", "content": [{"type": "text", "text": QUESTION}]}]
    stream = GrpcStream(served)
    try:
        stream.submit(json.dumps(messages), GREEDY, parameters={"input_format": "chat"})
        result = stream.wait(timeout=60)
    finally:
        stream.close()
    assert result.error is None, result.error
    assert "Paris" in result.text


@pytest.mark.parametrize(("body", "field", "fragment"), [
    (chat("not a list"), "text_input", "non-empty JSON array of messages"),
    ({**chat(), "text_input": "What is the capital of France?"}, "text_input",
     "is not valid JSON"),
    (chat([]), "text_input", "got an empty array"),
    (chat([{"role": "user"}]), "text_input[0]", "has no 'content'"),
    (chat([{"role": "tool", "content": "x"}]), "text_input[0].role", "must be one of"),
    (chat(input_format="markdown"), "input_format", "must be one of 'text', 'chat'"),
])
def test_bad_chat_input_is_refused_with_the_field_named(served, body, field, fragment):
    status, error = http_generate(served, body)
    assert status == 400, error
    assert error["error"].startswith(f"{field}: "), error
    assert fragment in error["error"]


def test_a_1_mb_chat_prompt_is_refused_from_its_size_without_tokenizing(served):
    # The size checked is the rendered prompt's: the message, plus what the template adds.
    content = "word " * 200_000
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                             add_generation_prompt=True, tokenize=False)
    size = len(rendered.encode())
    started = time.monotonic()
    status, error = http_generate(served, chat([{"role": "user", "content": content}]))
    elapsed = time.monotonic() - started
    assert status == 400, error
    assert error["error"].startswith(
        f"text_input: prompt is {size} bytes, so at least {-(-size // 81)} tokens"), error
    assert "(max_model_len) is 2048 tokens" in error["error"]
    # Tokenizing 1 MB took ~0.9 s here; the refusal itself takes milliseconds, plus moving the
    # body through Triton.
    assert elapsed < ELAPSED_LIMIT_S, elapsed


def tenant_body(tenant: str, secret: str | None, max_tokens: int = 3) -> dict:
    parameters: dict[str, object] = {"max_tokens": max_tokens, "ignore_eos": True,
                                     "tenant": tenant}
    if secret is not None:
        parameters["gateway_secret"] = secret
    return {"text_input": "Hello", "parameters": parameters}


@pytest.mark.parametrize(("body", "field", "fragment"), [
    (tenant_body("acme", "not-the-secret"), "tenant",
     "'gateway_secret' does not match this node's LLM_GATEWAY_SECRET"),
    (tenant_body("acme", None), "tenant", "it comes with 'gateway_secret'"),
    ({"text_input": "Hi", "parameters": {"gateway_secret": GATEWAY_SECRET}}, "gateway_secret",
     "only accepted together with 'tenant'"),
])
def test_a_tenant_without_the_gateways_secret_is_refused(served, body, field, fragment):
    status, error = http_generate(served, body)
    assert status == 400, error
    assert error["error"].startswith(f"{field}: "), error
    assert fragment in error["error"]
    assert GATEWAY_SECRET not in error["error"]
    if field == "tenant":
        assert "parameter 'tenant' may only be set by the gateway" in error["error"]


def test_a_tenant_with_a_wrong_secret_is_refused_over_grpc(served):
    stream = GrpcStream(served)
    try:
        stream.submit("Hello", {"max_tokens": 2},
                      parameters={"tenant": "acme", "gateway_secret": "guess"})
        result = stream.wait(timeout=30)
    finally:
        stream.close()
    assert result.error is not None and "may only be set by the gateway" in result.error
    assert not result.texts


def tenant_counts(served, tenant: str) -> tuple[float, float]:
    try:
        return (metric(served, "llm_tenant_requests_total", tenant=tenant),
                metric(served, "llm_tenant_generation_tokens_total", tenant=tenant))
    except KeyError:
        return 0.0, 0.0


def test_a_tenant_vouched_for_by_the_gateway_is_counted(served):
    tenant = f"tenant-{uuid.uuid4().hex[:8]}"
    status, body = http_generate(served, tenant_body(tenant, GATEWAY_SECRET, max_tokens=5))
    assert status == 200, body
    stream = GrpcStream(served)
    try:
        stream.submit("Hello", {"max_tokens": 4, "ignore_eos": True},
                      parameters={"tenant": tenant, "gateway_secret": GATEWAY_SECRET})
        result = stream.wait(timeout=60)
    finally:
        stream.close()
    assert result.error is None, result.error
    # Counted as each request ends, just after its final response went out.
    assert wait_until(lambda: tenant_counts(served, tenant) == (2, 9), 10), \
        tenant_counts(served, tenant)
    assert metric(served, "llm_tenant_requests_total", model="smollm2", version="1",
                  tenant=tenant) == 2


def test_requests_without_a_tenant_are_not_counted_per_tenant(served):
    status, _ = http_generate(served, {"text_input": "Hello", "parameters": {"max_tokens": 2}})
    assert status == 200
    with urllib.request.urlopen(served.metrics_url, timeout=5) as resp:
        samples = [line for line in resp.read().decode().splitlines()
                   if line.startswith(("llm_tenant_requests_total{",
                                       "llm_tenant_generation_tokens_total{"))]
    assert all('tenant="' in line and 'tenant=""' not in line for line in samples), samples


def test_the_secret_is_never_logged(served):
    assert served.log_path.read_bytes().count(GATEWAY_SECRET.encode()) == 0
