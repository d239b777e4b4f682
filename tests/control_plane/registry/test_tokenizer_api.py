"""A version's tokenizer files through the REST API, and a gateway counting prompts with them."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Counter
from tokenizers import Tokenizer, models, pre_tokenizers

from gateway.errors import BadRequest
from gateway.prompt_tokens import NO_TOKENIZER, Prompt, PromptTokens
from gateway.quotas.policy import Limits
from gateway.routing.table import Route, Tenant
from gateway.service import Gateway
from gateway.settings import GatewaySettings

VERSIONS = "/api/v1/models/m/versions"
TEMPLATE = ("{% for message in messages %}{{ bos_token + message['role'] + ' ' + "
            "message['content'] + eos_token }}{% endfor %}"
            "{% if add_generation_prompt %}{{ bos_token + 'assistant' }}{% endif %}")
VOCABULARY = {"[UNK]": 0, "<s>": 1, "</s>": 2, "hello": 3, "world": 4, "user": 5,
              "assistant": 6}


def tokenizer_json() -> str:
    """A real (tiny) tokenizer: words of VOCABULARY, <s> and </s> as special tokens."""
    tokenizer = Tokenizer(models.WordLevel(VOCABULARY, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(["<s>", "</s>"])
    return tokenizer.to_str()


def model_dir(root: Path, *, tokenizer: bool = True, config: dict[str, Any] | None = None,
              template_file: str | None = None) -> Path:
    """A directory of weights and, as asked, tokenizer files, new for each call."""
    directory = root / f"tok-{uuid.uuid4().hex[:8]}"
    directory.mkdir()
    (directory / "model.safetensors").write_bytes(b"weights")
    if tokenizer:
        (directory / "tokenizer.json").write_text(tokenizer_json())
    if config is not None:
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
    if template_file is not None:
        (directory / "chat_template.jinja").write_text(template_file)
    return directory


@pytest.fixture
def model(client: TestClient, writer: dict[str, str]) -> str:
    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    return "m"


def register(client: TestClient, writer: dict[str, str], source: str,
             engine_args: dict[str, Any] | None = None) -> dict[str, Any]:
    created = client.post(VERSIONS, headers=writer, json={"source": source,
                                                          "engine_args": engine_args or {}})
    assert created.status_code == 201, created.text
    version: dict[str, Any] = created.json()
    return version


def serve_versions(live_url: str, writer: dict[str, str], *sources: str) -> None:
    """Model 'm' with a version of each source, through the served API."""
    # The session's first registration reads vLLM's engine arguments: seconds.
    with httpx.Client(base_url=live_url, headers=writer, timeout=120) as http:
        assert http.post("/api/v1/models", json={"name": "m"}).status_code == 201
        for source in sources:
            created = http.post(VERSIONS, json={"source": source})
            assert created.status_code == 201, created.text


def route(version: int = 1) -> Route:
    return Route(name="m", model="m", alias="production", version=version, max_model_len=None,
                 endpoints=())


def test_a_local_versions_tokenizer_comes_with_its_template_and_special_tokens(
        client: TestClient, writer: dict[str, str], reader: dict[str, str], model: str,
        source_root: Path) -> None:
    directory = model_dir(source_root, config={
        "chat_template": TEMPLATE, "eos_token": "</s>",
        # transformers saves a special token as an AddedToken object too.
        "bos_token": {"__type": "AddedToken", "content": "<s>", "special": True},
        "tokenizer_class": "PreTrainedTokenizerFast"})
    version = register(client, writer, str(directory))
    answer = client.get(f"{VERSIONS}/1/tokenizer", headers=reader)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "model": "m", "version": 1, "checksum": version["checksum"],
        "tokenizer_json": (directory / "tokenizer.json").read_text(), "chat_template": TEMPLATE,
        "special_tokens": {"bos_token": "<s>", "eos_token": "</s>"}}


def test_the_template_file_wins_and_of_named_templates_the_default_is_served(
        client: TestClient, writer: dict[str, str], reader: dict[str, str], model: str,
        source_root: Path) -> None:
    register(client, writer, str(model_dir(source_root, config={"chat_template": "old"},
                                           template_file="{{ 'from the file' }}")))
    register(client, writer, str(model_dir(source_root, config={"chat_template": [
        {"name": "tool_use", "template": "tools"}, {"name": "default", "template": "chat"}]})))
    register(client, writer, str(model_dir(source_root)))
    templates = [client.get(f"{VERSIONS}/{n}/tokenizer", headers=reader).json()["chat_template"]
                 for n in (1, 2, 3)]
    assert templates == ["{{ 'from the file' }}", "chat", None]


def test_engine_args_tokenizer_names_the_directory_it_is_read_from(
        client: TestClient, writer: dict[str, str], reader: dict[str, str], model: str,
        source_root: Path) -> None:
    tokenizer_dir = model_dir(source_root, config={"eos_token": "</s>"})
    register(client, writer, str(model_dir(source_root, tokenizer=False)),
             {"tokenizer": str(tokenizer_dir)})
    answer = client.get(f"{VERSIONS}/1/tokenizer", headers=reader)
    assert answer.status_code == 200, answer.text
    assert answer.json()["special_tokens"] == {"eos_token": "</s>"}


def test_a_version_without_a_tokenizer_to_serve_is_a_404_saying_why(
        client: TestClient, writer: dict[str, str], reader: dict[str, str], model: str,
        source_root: Path) -> None:
    local = str(model_dir(source_root))
    cases = [
        ("hf://org/m", {}, "its source hf://org/m is remote"),
        (str(model_dir(source_root, tokenizer=False)), {}, "has no tokenizer.json"),
        (local, {"tokenizer": "HuggingFaceTB/SmolLM2-135M"}, "is not a local directory"),
        (local, {"tokenizer": "/nowhere/tokenizer"}, "does not exist or cannot be read"),
        (local, {"tokenizer_mode": "mistral"}, "tokenizer_mode is 'mistral'"),
    ]
    for number, (source, engine_args, why) in enumerate(cases, start=1):
        register(client, writer, source, engine_args)
        answer = client.get(f"{VERSIONS}/{number}/tokenizer", headers=reader)
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"] == "TokenizerUnavailable"
        detail = answer.json()["detail"]
        assert detail.startswith(f"version {number} of model 'm' has no tokenizer the control "
                                 "plane can serve: "), detail
        assert why in detail
        assert detail.endswith("gateways count its prompts by their byte length (an upper "
                               "bound) instead"), detail
    missing = client.get(f"{VERSIONS}/99/tokenizer", headers=reader)
    assert (missing.status_code, missing.json()["error"]) == (404, "VersionNotFound")


def test_a_file_over_the_limit_or_linked_outside_the_roots_is_not_served(
        app: FastAPI, client: TestClient, writer: dict[str, str], reader: dict[str, str],
        model: str, source_root: Path, tmp_path: Path) -> None:
    large_file = model_dir(source_root, tokenizer=False)
    (large_file / "tokenizer.json").write_text(tokenizer_json() + " " * 1024)
    register(client, writer, str(large_file))
    linked = model_dir(source_root, tokenizer=False)
    outside = tmp_path / "tokenizer.json"
    outside.write_text(tokenizer_json())
    (linked / "tokenizer.json").symlink_to(outside)
    register(client, writer, str(linked))
    app.state.settings = app.state.settings.model_copy(update={"tokenizer_max_bytes": 1024})
    large = client.get(f"{VERSIONS}/1/tokenizer", headers=reader)
    assert large.status_code == 404
    assert "tokenizer.json is larger than the 1024 bytes the control plane serves (setting " \
           "LLMCP_TOKENIZER_MAX_BYTES)" in large.json()["detail"]
    app.state.settings = app.state.settings.model_copy(update={"tokenizer_max_bytes": 1 << 20})
    escaped = client.get(f"{VERSIONS}/2/tokenizer", headers=reader)
    assert escaped.status_code == 404
    assert "is outside the allowed roots" in escaped.json()["detail"]


def test_a_gateway_counts_prompts_with_the_fetched_tokenizer_or_falls_back_to_bytes(
        writer: dict[str, str], reader: dict[str, str], source_root: Path,
        live_url: str) -> None:
    serve_versions(live_url, writer, str(model_dir(source_root, config={
        "chat_template": TEMPLATE, "bos_token": "<s>", "eos_token": "</s>"})), "hf://org/m")
    registry = CollectorRegistry()
    fallbacks = Counter("fallbacks", "", ["reason"], registry=registry)
    counter = PromptTokens(live_url, reader["Authorization"].removeprefix("Bearer "), fallbacks)
    chat = json.dumps([{"role": "user", "content": "hello world"}])

    async def counts() -> list[int | None]:
        try:
            return [await counter.count(route(1), Prompt("hello world", 11)),
                    # <s> user hello world </s> <s> assistant
                    await counter.count(route(1), Prompt(chat, len(chat), chat=True)),
                    await counter.count(route(1), Prompt("hello world hello", 17, truncate=2)),
                    await counter.count(route(2), Prompt("hello", 5))]
        finally:
            await counter.aclose()

    assert asyncio.run(counts()) == [2, 7, 2, None]
    assert registry.get_sample_value("fallbacks_total", {"reason": NO_TOKENIZER}) == 1


def test_a_failed_fetch_is_tried_again_after_a_back_off_not_by_every_request(
        writer: dict[str, str], reader: dict[str, str], source_root: Path,
        live_url: str) -> None:
    directory = model_dir(source_root, tokenizer=False)
    serve_versions(live_url, writer, str(directory))
    registry = CollectorRegistry()
    fallbacks = Counter("fallbacks", "", ["reason"], registry=registry)
    now = [0.0]
    counter = PromptTokens(live_url, reader["Authorization"].removeprefix("Bearer "), fallbacks,
                           retry_min_s=10, clock=lambda: now[0])

    async def count() -> int | None:
        return await counter.count(route(), Prompt("hello world", 11))

    async def body() -> list[int | None]:
        try:
            missing = await count()
            (directory / "tokenizer.json").write_text(tokenizer_json())
            within = await count()  # a fetch would find it now: none is made
            now[0] = 10.5
            return [missing, within, await count()]
        finally:
            await counter.aclose()

    assert asyncio.run(body()) == [None, None, 2]
    assert registry.get_sample_value("fallbacks_total", {"reason": NO_TOKENIZER}) == 2


def test_the_least_recently_used_tokenizer_goes_when_the_cache_is_full(
        writer: dict[str, str], reader: dict[str, str], source_root: Path,
        live_url: str) -> None:
    first, second = model_dir(source_root), model_dir(source_root)
    serve_versions(live_url, writer, str(first), str(second))
    fallbacks = Counter("fallbacks", "", ["reason"], registry=CollectorRegistry())
    counter = PromptTokens(live_url, reader["Authorization"].removeprefix("Bearer "), fallbacks,
                           cache_size=1)
    prompt = Prompt("hello world", 11)

    async def body() -> list[int | None]:
        try:
            counted = [await counter.count(route(1), prompt), await counter.count(route(2), prompt)]
            (first / "tokenizer.json").unlink()
            (second / "tokenizer.json").unlink()
            # Version 2 is kept; version 1 went and is fetched again, from files now gone.
            return [*counted, await counter.count(route(2), prompt),
                    await counter.count(route(1), prompt)]
        finally:
            await counter.aclose()

    assert asyncio.run(body()) == [2, 2, 2, None]


def test_the_gateway_reserves_the_exact_count_for_tenants_with_token_limits(
        writer: dict[str, str], reader: dict[str, str], source_root: Path,
        live_url: str) -> None:
    serve_versions(live_url, writer, str(model_dir(source_root)))
    gateway = Gateway(GatewaySettings(
        control_plane_url=live_url, _env_file=None,  # type: ignore[call-arg]
        control_plane_token=reader["Authorization"].removeprefix("Bearer ")))
    tenant = Tenant(name="t", enabled=True, allowed_models=frozenset({"*"}),
                    limits=Limits(tokens_per_minute=100_000))
    tight = Tenant(name="tight", enabled=True, allowed_models=frozenset({"*"}),
                   limits=Limits(tokens_per_minute=1000))
    text = "hello world hello world"
    long_text = "hello " * 2000  # tokenized off the event loop

    async def reserved(who: Tenant, on: Route, prompt: Prompt, choices: int = 1) -> int:
        grant = await gateway.admit(who, on, prompt, 10, choices)
        await gateway.settle(who, on, grant, 0, 0, reached_node=False)
        return sum(check.cost for check in grant.taken)

    async def body() -> list[int]:
        try:
            found = [await reserved(tenant, route(), Prompt(text, len(text))),
                     # An adapter's requests are tokenized by its base model's tokenizer.
                     await reserved(tenant, route().with_adapter("sql"), Prompt(text, len(text))),
                     await reserved(tenant, route(), Prompt(text, len(text), truncate=3)),
                     await reserved(tenant, route(), Prompt(text, len(text)), choices=2),
                     await reserved(tenant, route(), Prompt(long_text, len(long_text)))]
            # The byte bound (at least 47 tokens) would admit it; counted, it can never fit.
            with pytest.raises(BadRequest, match=r"needs up to 1005 tokens \(prompt ~995 \+ "
                                                 r"max_tokens 10\), more than tenant 'tight'"):
                await gateway.admit(tight, route(), Prompt("hello " * 995, 6 * 995), 10)
            return found
        finally:
            await gateway.prompt_tokens.aclose()

    assert asyncio.run(body()) == [4 + 10, 4 + 10, 3 + 10, 2 * (4 + 10), 2000 + 10]
