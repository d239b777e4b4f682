"""Triton's (KServe v2) HTTP protocol at the gateway: generate, generate_stream, health, model
ready, metadata and config. Admin endpoints are not served (``unknown_endpoints.routing_error``
refuses them): operators use the control plane."""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from gateway.auth import bearer_key
from gateway.backend_parameters import for_backend
from gateway.errors import BadRequest, NotServed
from gateway.lora import generate_document_with_lora_name
from gateway.prompt_tokens import INPUT_FORMAT, Prompt, is_chat
from gateway.routing.table import Route, Tenant
from gateway.service import Gateway
from gateway.token_counts import SseReader, TokenTally, ask_counts, read_json
from gateway.upstream_http import HttpUpstream

SERVER_NAME = "llm-gateway"
PROTOCOL = "kserve_http"


def parse_json_body(body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the request body is not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise BadRequest(f"the request body must be a JSON object, got {type(document).__name__}")
    return document


def parse_max_tokens(value: Any) -> int | None:
    """max_tokens as clients send it (an integer or a string of one); anything else is left to
    the backend, which refuses it naming the field."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip()) or None
    return None


def parse_truncate(value: Any) -> int | None:
    """truncate_prompt_tokens as clients send it (an integer or a string of one); anything else
    is left to the backend, which refuses it naming the field."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def prompt_of(text_input: Any, chat: bool, truncate: int | None) -> Prompt:
    """``text_input`` as the backend reads it: one string (a list of one is that string)."""
    if isinstance(text_input, str):
        return Prompt(text_input, len(text_input.encode()), chat, truncate)
    if isinstance(text_input, list) and all(isinstance(item, str) for item in text_input):
        # More than one element is refused by the backend; the byte bound reserves it until then.
        text = text_input[0] if len(text_input) == 1 else None
        return Prompt(text, sum(len(item.encode()) for item in text_input), chat, truncate)
    raise BadRequest("text_input must be a string")


def checked_prompt(gateway: Gateway, route: Route, document: dict[str, Any]) -> Prompt:
    if "text_input" not in document:
        raise BadRequest("text_input is required (the prompt, a string)")
    parameters = document.get("parameters")
    chat = isinstance(parameters, dict) and is_chat(parameters.get(INPUT_FORMAT))
    truncate = parse_truncate(sampling_of(document).get("truncate_prompt_tokens"))
    prompt = prompt_of(document["text_input"], chat, truncate)
    gateway.check_prompt_bytes(route, prompt, "text_input")
    return prompt


def sampling_of(document: dict[str, Any]) -> dict[str, Any]:
    """Where the backend reads a generate body's sampling parameters: the sampling_parameters
    input, else the request parameters ({} when neither is an object: the backend refuses
    it, naming the field)."""
    sampling = document.get("sampling_parameters")
    if isinstance(sampling, str):
        try:
            sampling = json.loads(sampling) if sampling.strip() else {}
        except json.JSONDecodeError:
            return {}
    source = sampling if isinstance(sampling, dict) else document.get("parameters")
    return source if isinstance(source, dict) else {}


def max_tokens_of(document: dict[str, Any]) -> int | None:
    """The output tokens a generate body asks for (None: the backend's default)."""
    return parse_max_tokens(sampling_of(document).get("max_tokens"))


def generate_body(gateway: Gateway, route: Route, tenant: Tenant, document: dict[str, Any]
                  ) -> bytes:
    """The body the node gets: the client's, with gateway parameters and the adapter its model
    name selects."""
    parameters = document.get("parameters", {})
    if not isinstance(parameters, dict):
        raise BadRequest("parameters must be a JSON object")
    document = {**document, "parameters": for_backend(parameters, tenant,
                                                      gateway.gateway_secret)}
    if route.adapter is not None:
        document = generate_document_with_lora_name(document, route.adapter)
    return json.dumps(document).encode()


def build_router(gateway: Gateway, upstream: HttpUpstream) -> APIRouter:
    router = APIRouter()

    def caller(request: Request) -> Tenant:
        return gateway.caller(bearer_key(request.headers.get("authorization")))

    @router.get("/v2/health/live")
    async def live() -> Response:
        return Response(status_code=200)

    @router.get("/v2/health/ready")
    async def ready() -> Response:
        return Response(status_code=200 if gateway.watcher.loaded.is_set() else 503)

    @router.get("/v2")
    async def server_metadata() -> dict[str, Any]:
        return {"name": SERVER_NAME, "version": "1", "extensions": []}

    async def forward_get(request: Request, model: str, suffix: str) -> Response:
        route = gateway.route_for(caller(request), model)
        answer = await upstream.get(route, suffix)
        return Response(answer.content, status_code=answer.status_code,
                        media_type=answer.headers.get("content-type"))

    @router.get("/v2/models/{model}/ready")
    async def model_ready(request: Request, model: str) -> Response:
        return await forward_get(request, model, "/ready")

    @router.get("/v2/models/{model}/versions/{version}/ready")
    async def version_ready(request: Request, model: str, version: str) -> Response:
        return await forward_get(request, model, f"/versions/{version}/ready")

    @router.get("/v2/models/{model}")
    async def model_metadata(request: Request, model: str) -> Response:
        return await forward_get(request, model, "")

    @router.get("/v2/models/{model}/config")
    async def model_config(request: Request, model: str) -> Response:
        return await forward_get(request, model, "/config")

    async def generate(request: Request, model: str, path: str) -> Response:
        received = time.monotonic()
        tenant = caller(request)
        route = gateway.route_for(tenant, model)
        document = parse_json_body(await request.body())
        prompt = checked_prompt(gateway, route, document)
        grant = await gateway.admit(tenant, route, prompt, max_tokens_of(document))
        tally, strip = TokenTally(), frozenset[str]()
        try:
            # Always: usage is counted for every tenant, limits or not.
            document = dict(document)
            strip = ask_counts(document)
            body = generate_body(gateway, route, tenant, document)
            answer = await upstream.open(route, PROTOCOL, path, body)
        except BaseException:
            await gateway.settle(tenant, route, grant, 0, 0, reached_node=False)
            raise
        outcome = "ok" if answer.status == 200 else f"error_{answer.status}"
        gateway.metrics.requests.labels(PROTOCOL, route.name, tenant.name, outcome).inc()
        if answer.status != 200 or not path.endswith("generate_stream"):
            try:
                content = answer.first + b"".join([chunk async for chunk in answer.rest()])
            finally:
                await upstream.close(answer)
                if answer.status == 200:
                    content = read_json(content, tally, strip)
                await gateway.settle(tenant, route, grant, tally.prompt or 0, tally.output)
            if answer.status == 200:
                gateway.metrics.ttft.labels(PROTOCOL, route.name).observe(
                    time.monotonic() - received)
            return Response(content, status_code=answer.status, media_type="application/json")
        gateway.metrics.ttft.labels(PROTOCOL, route.name).observe(time.monotonic() - received)
        reader = SseReader(tally, strip)

        async def finish(answer: Any) -> None:
            await upstream.close(answer)  # the node stops generating for a dropped client
            await gateway.settle(tenant, route, grant, tally.prompt or 0, tally.output)

        async def events() -> Any:
            tokens = gateway.metrics.output_tokens.labels(PROTOCOL, route.name, tenant.name)
            try:
                tokens.inc(answer.first.count(b"data: "))
                yield reader.feed(answer.first)
                async for chunk in answer.rest():
                    tokens.inc(chunk.count(b"data: "))
                    yield reader.feed(chunk)
                yield reader.rest()
            finally:
                # A stream the client dropped pays for what was generated until then.
                gateway.finish_later(finish(answer))

        return StreamingResponse(events(), media_type="text/event-stream")

    @router.post("/v2/models/{model}/generate")
    async def generate_once(request: Request, model: str) -> Response:
        return await generate(request, model, "generate")

    @router.post("/v2/models/{model}/generate_stream")
    async def generate_stream(request: Request, model: str) -> Response:
        return await generate(request, model, "generate_stream")

    @router.post("/v2/models/{model}/versions/{version}/generate")
    async def version_generate(request: Request, model: str, version: str) -> Response:
        return await generate(request, model, f"versions/{version}/generate")

    @router.post("/v2/models/{model}/versions/{version}/generate_stream")
    async def version_generate_stream(request: Request, model: str, version: str) -> Response:
        return await generate(request, model, f"versions/{version}/generate_stream")

    @router.post("/v2/models/{model}/infer")
    async def infer(model: str) -> Response:
        raise NotServed(f"POST /v2/models/{model}/infer is not served: the LLM models are "
                        "decoupled; use /generate, /generate_stream or gRPC ModelStreamInfer")

    return router
