"""Tenant limits through real gateway processes in front of the session's nodes (real backend and
model), counted in a real Redis of this module's own: each limit refused at the right point in
every protocol with when to retry, two gateways enforcing one limit together, a cancelled stream
settling to what it used, the backend's counts on the gateway's metrics, and Redis stopped under
a fail-open and a fail-closed gateway."""

from __future__ import annotations

import json
import queue
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import tritonclient.grpc as grpcclient

from control_plane.serve import GatewayPorts, GatewayProcess
from control_plane.triton.runtime import CACHE_DIR
from control_plane.triton.server import free_port
from tests.integration.gateway.conftest import MODEL, Stack
from tests.integration.gateway.test_gateway_protocols import grpc_inputs
from tests.redis_server import RedisServer
from tests.utc_day import within_one_utc_day

pytestmark = pytest.mark.integration
PROMPT = "The capital of France is"
# 1630 bytes, 361 tokens for SmolLM2: English runs ~4.5 bytes per token.
LONG_PROMPT = ("The history of Paris spans more than two thousand years, from a small "
               "settlement of the Parisii on an island in the Seine to one of the great cities "
               "of the world. ") * 10
FLUSH_S = 1.0


@dataclass
class Gateways:
    redis: RedisServer
    first: GatewayProcess  # fail open
    second: GatewayProcess  # fail open, the same Redis
    closed: GatewayProcess  # fail closed, the same Redis


def _gateway(stack: Stack, redis: RedisServer, name: str, mode: str) -> GatewayProcess:
    token = stack.control_plane.cli("tokens", "create", "--name", f"limits-{name}", "--scope",
                                    "report").strip().splitlines()[-1]
    process = GatewayProcess(
        GatewayPorts("127.0.0.1", free_port(), free_port()), stack.control_plane.url, token,
        stack.secret, log_path=CACHE_DIR / "logs" / f"test-gateway-limits-{name}.log",
        settings={"LLMGW_REDIS_URL": redis.url, "LLMGW_LIMITS_FAILURE_MODE": mode,
                  "LLMGW_ROUTING_WAIT_SECONDS": "2", "LLMGW_NODE_POLL_INTERVAL_SECONDS": "0.5",
                  "LLMGW_USAGE_FLUSH_SECONDS": str(FLUSH_S)})
    process.start()
    return process


@pytest.fixture(scope="module")
def gateways(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateways]:
    redis = RedisServer(tmp_path_factory.mktemp("limits-redis"))
    redis.start()
    started = []
    try:
        for name, mode in (("first", "open"), ("second", "open"), ("closed", "closed")):
            started.append(_gateway(stack, redis, name, mode))
        for process in started:
            process.wait_serving(MODEL, stack.keys["acme"])
        yield Gateways(redis, *started)
    finally:
        for process in started:
            process.stop()
        redis.stop()


def tenant(stack: Stack, gateways: Gateways, **limits: int) -> str:
    """A new tenant with ``limits`` and a key, once every gateway serves it; its key."""
    name = f"lim-{uuid.uuid4().hex[:8]}"
    created = stack.admin.post("/api/v1/tenants", json={"name": name, "allowed_models": [MODEL],
                                                        "limits": limits})
    assert created.status_code == 201, created.text
    key: str = stack.admin.post(f"/api/v1/tenants/{name}/keys", json={"name": "k"}).json()["key"]
    for process in (gateways.first, gateways.second, gateways.closed):
        process.wait_serving(MODEL, key)
    return key


def generate(gateway: GatewayProcess, key: str, max_tokens: int = 4, **body: Any
             ) -> httpx.Response:
    document = {"text_input": PROMPT, "parameters": {"max_tokens": max_tokens,
                                                     "temperature": 0}, **body}
    return httpx.post(f"http://{gateway.http_address}/v2/models/{MODEL}/generate",
                      headers={"Authorization": f"Bearer {key}"}, timeout=120, json=document)


def retry_after(response: httpx.Response) -> int:
    return int(response.headers["Retry-After"])


def test_requests_per_minute_across_two_gateways_in_every_protocol(
        stack: Stack, gateways: Gateways) -> None:
    key = tenant(stack, gateways, requests_per_minute=4)
    assert generate(gateways.first, key).status_code == 200
    assert generate(gateways.second, key).status_code == 200
    openai = httpx.post(f"http://{gateways.second.http_address}/v1/completions",
                        headers={"Authorization": f"Bearer {key}"}, timeout=120,
                        json={"model": MODEL, "prompt": PROMPT, "max_tokens": 2})
    assert openai.status_code == 200, openai.text
    assert generate(gateways.first, key).status_code == 200  # 4 of 4, across both gateways

    refused = generate(gateways.second, key)
    assert refused.status_code == 429
    assert 1 <= retry_after(refused) <= 60
    assert "has made 4 request(s) this minute, its limit (requests_per_minute)" in \
        refused.json()["error"]
    over = httpx.post(f"http://{gateways.first.http_address}/v1/chat/completions",
                      headers={"Authorization": f"Bearer {key}"}, timeout=30,
                      json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    assert over.status_code == 429 and 1 <= retry_after(over) <= 60
    assert over.json()["error"]["code"] == "rate_limit_exceeded"
    assert over.json()["error"]["type"] == "requests"

    client = grpcclient.InferenceServerClient(gateways.first.grpc_address)
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)),
                        headers={"authorization": f"Bearer {key}"})
    try:
        client.async_stream_infer(MODEL, grpc_inputs(PROMPT, {"max_tokens": 2}),
                                  request_id="over")
        result, error = results.get(timeout=30)
        assert result is None and error is not None
        assert "RESOURCE_EXHAUSTED" in str(error) and "requests_per_minute" in str(error)
    finally:
        client.stop_stream()
        client.close()
    metrics = httpx.get(f"http://{gateways.first.http_address}/metrics").text
    assert re.search(rf'llmgw_limit_refusals_total{{limit="requests_per_minute",'
                     rf'tenant="{_tenant_of(stack, key)}"}} [1-9]', metrics), metrics


def _tenant_of(stack: Stack, key: str) -> str:
    import hashlib
    digest = hashlib.sha256(key.encode()).hexdigest()
    table = stack.admin.get("/api/v1/routing").json()
    (found,) = [t["name"] for t in table["tenants"] if digest in t["key_hashes"]]
    return str(found)


def settled(process: GatewayProcess, name: str) -> dict[str, float]:
    """The tokens a gateway settled for tenant ``name``, by kind (prompt, output)."""
    text = httpx.get(f"http://{process.http_address}/metrics").text
    found = {kind: float(value) for kind, value in re.findall(
        rf'llmgw_tenant_tokens_total{{kind="(\w+)",tenant="{name}"}} ([0-9.]+)', text)}
    return {"prompt": found.get("prompt", 0.0), "output": found.get("output", 0.0)}


def test_tokens_settle_to_the_backends_count_and_only_asked_counts_reach_the_client(
        stack: Stack, gateways: Gateways) -> None:
    key = tenant(stack, gateways, tokens_per_minute=700)
    name = _tenant_of(stack, key)
    asked = generate(gateways.second, key, return_num_input_tokens=True,
                     return_num_output_tokens=True, parameters={"max_tokens": 8,
                                                                "ignore_eos": True})
    assert asked.status_code == 200, asked.text
    # Shape-[1] tensors come as scalars in Triton's generate JSON.
    prompt = int(asked.json()["num_input_tokens"])
    assert asked.json()["num_output_tokens"] == 8
    plain = generate(gateways.first, key, parameters={"max_tokens": 8, "ignore_eos": True})
    assert plain.status_code == 200, plain.text
    assert "num_output_tokens" not in plain.json() and "num_input_tokens" not in plain.json()

    # A stream dropped after its first events pays for what it used, not the 480 reserved
    # (Triton notices a dropped HTTP client on a "stream": true request).
    with httpx.stream("POST", f"http://{gateways.first.http_address}/v2/models/{MODEL}/"
                      "generate_stream", headers={"Authorization": f"Bearer {key}"}, timeout=120,
                      json={"text_input": PROMPT, "stream": True, "parameters": {
                          "max_tokens": 480, "ignore_eos": True}}) as stream:
        assert stream.status_code == 200
        events = 0
        for line in stream.iter_lines():
            if line.startswith("data: "):
                assert "num_output_tokens" not in json.loads(line[len("data: "):])
                events += 1
                if events == 3:
                    break
    deadline = time.monotonic() + 15
    while settled(gateways.first, name)["prompt"] < 2 * prompt:
        assert time.monotonic() < deadline, "the dropped stream was not settled"
        time.sleep(0.2)
    streamed = settled(gateways.first, name)["output"] - 8
    assert 3 <= streamed < 300, streamed
    # The next request asks for up to what the minute has left (a few tokens spare, 480 at
    # most): more than it would have left had the dropped stream kept its reservation (prompt +
    # 480). On a loaded machine Triton notices the dropped client late, and the stream settles
    # hundreds of tokens: a fixed 480 then went over 700 for a reason the test is not about.
    used = 3 * prompt + 8 + 8 + int(streamed)
    asked_for = min(480, 700 - used - prompt - 5)
    assert asked_for > 700 - (3 * prompt + 8 + 8 + 480) - prompt, (streamed, asked_for)
    again = generate(gateways.second, key, return_num_output_tokens=True,
                     parameters={"max_tokens": asked_for})
    assert again.status_code == 200, again.text
    # What both gateways settled is what the backend counted.
    totals = [settled(g, name) for g in (gateways.first, gateways.second)]
    assert sum(t["prompt"] for t in totals) == 4 * prompt
    assert sum(t["output"] for t in totals) == 8 + 8 + streamed + again.json()["num_output_tokens"]
    over = generate(gateways.first, key, max_tokens=700)
    assert over.status_code == 400 and "tokens_per_minute of 700 allows at all" in \
        over.json()["error"]


def test_prompts_are_reserved_at_the_backends_own_token_count(
        stack: Stack, gateways: Gateways) -> None:
    """Counted with the model's tokenizer (fetched from the control plane), a long English
    prompt fits what is left of the minute, where its byte length (capped at the window) would
    not; the reservation a refusal names is the backend's num_input_tokens + max_tokens."""
    limit = 700
    key = tenant(stack, gateways, tokens_per_minute=limit)
    headers = {"Authorization": f"Bearer {key}"}
    url = f"http://{gateways.first.http_address}"
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "What is the capital "
                                                                    "of France?"}]}
    first = httpx.post(f"{url}/v1/chat/completions", headers=headers, timeout=120,
                       json={**chat, "max_tokens": 1})
    assert first.status_code == 200, first.text
    usage = first.json()["usage"]
    chat_prompt, used = usage["prompt_tokens"], usage["total_tokens"]
    size = len(LONG_PROMPT.encode())
    assert min(size, limit - 2) + 2 > limit - used, "the byte bound would refuse the next one"
    second = generate(gateways.first, key, text_input=LONG_PROMPT, return_num_input_tokens=True,
                      return_num_output_tokens=True,
                      parameters={"max_tokens": 2, "ignore_eos": True})
    assert second.status_code == 200, second.text
    prompt = int(second.json()["num_input_tokens"])
    assert prompt < size / 4
    used += prompt + int(second.json()["num_output_tokens"])

    refused = generate(gateways.first, key, max_tokens=1, text_input=LONG_PROMPT)
    assert refused.status_code == 429, refused.text
    assert f"would go over its tokens_per_minute of {limit} this minute with this request's " \
           f"{prompt + 1} token(s)" in refused.json()["error"]
    max_tokens = max(1, limit - used - chat_prompt + 1)
    over = httpx.post(f"{url}/v1/chat/completions", headers=headers, timeout=30,
                      json={**chat, "max_tokens": max_tokens})
    assert over.status_code == 429, over.text
    assert f"with this request's {chat_prompt + max_tokens} token(s)" in \
        over.json()["error"]["message"]
    metrics = httpx.get(f"{url}/metrics").text
    assert "llmgw_prompt_token_fallbacks_total{" not in metrics, metrics


def test_concurrent_requests_and_the_daily_budget(stack: Stack, gateways: Gateways) -> None:
    # A 200-token stream on a loaded CPU node, then two requests: well inside 5 minutes.
    within_one_utc_day(300)
    key = tenant(stack, gateways, concurrent_requests=1, daily_tokens=500)
    with httpx.stream("POST", f"http://{gateways.first.http_address}/v2/models/{MODEL}/"
                      "generate_stream", headers={"Authorization": f"Bearer {key}"}, timeout=120,
                      json={"text_input": PROMPT, "stream": True, "parameters": {
                          "max_tokens": 200, "ignore_eos": True}}) as stream:
        lines = stream.iter_lines()
        next(line for line in lines if line.startswith("data: "))
        busy = generate(gateways.second, key, max_tokens=2)  # the other gateway sees the slot
        assert busy.status_code == 429 and retry_after(busy) == 1
        assert "1 request(s) in flight, its limit (concurrent_requests)" in busy.json()["error"]
        for _ in lines:
            pass
    time.sleep(0.5)
    assert generate(gateways.second, key, max_tokens=2).status_code == 200
    # 500 a day, ~220 used: what is left cannot hold 300 more output tokens.
    refused = generate(gateways.first, key, max_tokens=300)
    assert refused.status_code == 429, refused.text
    assert "daily_tokens of 500 today (UTC)" in refused.json()["error"]
    now = time.time()
    midnight = (now // 86400 + 1) * 86400
    assert abs(retry_after(refused) - (midnight - now)) <= 5


def test_redis_stopped_fails_open_on_one_gateway_and_closed_on_the_other(
        stack: Stack, gateways: Gateways) -> None:
    key = tenant(stack, gateways, requests_per_minute=1000)
    unlimited = stack.keys["acme"]
    gateways.redis.stop()
    try:
        # Fail open: served, counted in the gateway's memory, the store reported down.
        assert generate(gateways.first, key).status_code == 200
        metrics = httpx.get(f"http://{gateways.first.http_address}/metrics").text
        assert "llmgw_limit_store_up 0.0" in metrics
        # Fail closed: a limited tenant gets 503 saying why; an unlimited one is served.
        closed = generate(gateways.closed, key)
        assert closed.status_code == 503 and retry_after(closed) >= 1
        assert "LLMGW_LIMITS_FAILURE_MODE=closed" in closed.json()["error"]
        assert generate(gateways.closed, unlimited).status_code == 200
    finally:
        gateways.redis.start()
    deadline = time.monotonic() + 10
    while generate(gateways.closed, key).status_code != 200:
        assert time.monotonic() < deadline, "the fail-closed gateway did not take Redis back"
        time.sleep(0.5)
    assert generate(gateways.first, key).status_code == 200
    assert "llmgw_limit_store_up 1.0" in httpx.get(
        f"http://{gateways.first.http_address}/metrics").text


def reported(stack: Stack, name: str) -> dict[str, Any]:
    answer = stack.admin.get(f"/api/v1/tenants/{name}/usage")
    assert answer.status_code == 200, answer.text
    totals: dict[str, Any] = answer.json()["totals"]
    return totals


def test_usage_is_reported_per_tenant_and_a_killed_gateway_loses_at_most_one_flush(
        stack: Stack, gateways: Gateways) -> None:
    key = tenant(stack, gateways, requests_per_minute=4)
    name = _tenant_of(stack, key)
    for process in (gateways.first, gateways.second):
        assert generate(process, key, parameters={"max_tokens": 4, "ignore_eos": True}
                        ).status_code == 200
    assert generate(gateways.first, key, max_tokens=2,
                    return_num_input_tokens=True).status_code == 200
    prompt = int(generate(gateways.second, key, max_tokens=1,
                          return_num_input_tokens=True).json()["num_input_tokens"])
    refused = [generate(gateways.first, key) for _ in range(2)]
    assert [r.status_code for r in refused] == [429, 429]

    def all_in() -> dict[str, Any] | None:
        # The two refusals may reach the database in two flushes: wait for both (too many
        # would still fail the equality below).
        totals = reported(stack, name)
        refusals = sum(totals["refusals"].values()) if totals["refusals"] else 0
        return totals if totals["requests"] == 4 and refusals >= 2 else None

    deadline = time.monotonic() + 10 * FLUSH_S
    while (totals := all_in()) is None:
        assert time.monotonic() < deadline, reported(stack, name)
        time.sleep(0.2)
    assert totals["prompt_tokens"] == 4 * prompt
    assert totals["output_tokens"] == 4 + 4 + 2 + 1
    assert totals["refusals"] == {"requests_per_minute": 2}

    # A gateway killed with SIGKILL: what it reported stays, counted once; what it had not
    # reported (less than one flush interval's worth) is lost.
    doomed = _gateway(stack, gateways.redis, "doomed", "open")
    try:
        doomed.wait_serving(MODEL, stack.keys["acme"])
        other = tenant(stack, gateways, daily_tokens=10**9)
        # tenant() waits for the session's gateways only; this one learns the key from its own
        # next routing table (a loaded machine once answered 401 before it had).
        doomed.wait_serving(MODEL, other)
        other_name = _tenant_of(stack, other)
        for _ in range(3):
            assert generate(doomed, other, max_tokens=1).status_code == 200
        time.sleep(3 * FLUSH_S)  # reported
        for _ in range(3):
            assert generate(doomed, other, max_tokens=1).status_code == 200
        assert doomed.process is not None
        doomed.process.kill()  # at once: the last three are not reported yet
        doomed.process.wait(10)
    finally:
        doomed.stop()
    time.sleep(3 * FLUSH_S)
    kept = reported(stack, other_name)["requests"]
    assert 3 <= kept <= 6, kept
    print(f"[usage] killed gateway: {kept} of 6 requests reported (flush every {FLUSH_S} s)")
