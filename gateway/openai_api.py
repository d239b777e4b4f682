"""OpenAI-compatible routes: ``GET /v1/models``, ``POST /v1/completions`` and
``POST /v1/chat/completions``, streaming (SSE, ``data: [DONE]``) and not."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from gateway.auth import bearer_key, parse_priority
from gateway.backend_parameters import for_backend
from gateway.errors import BadRequest, GatewayError, NodeFailed
from gateway.kserve_http import parse_json_body, parse_max_tokens
from gateway.lora import with_lora_name
from gateway.openai_translate import (
    OpenAIRequest,
    backend_event,
    final_response,
    merge_logprobs,
    model_list,
    openai_logprobs,
    parse_chat,
    parse_completion,
    sse_events,
    stream_chunk,
    usage_chunk,
)
from gateway.prompt_tokens import Prompt
from gateway.routing.table import Route, Tenant
from gateway.service import Gateway
from gateway.upstream_http import HttpUpstream, Upstream

PROTOCOL = "openai"
PRIORITY_HEADER = "x-priority"


class BackendRefused(GatewayError):
    """The backend answered the request with an error (its message says why)."""

    http_status = 400
    openai_type = "invalid_request_error"


def _backend_error(status: int, body: bytes) -> GatewayError:
    # generate_stream answers an error before the stream as one SSE event.
    text = body.decode(errors="replace").strip().removeprefix("data:").strip()
    try:
        message = json.loads(text).get("error") or text
    except (json.JSONDecodeError, AttributeError):
        message = text
    error = BackendRefused(str(message))
    error.http_status = status if 400 <= status < 500 else 502
    if error.http_status >= 500:
        error.openai_type = "server_error"
    return error


async def _events(upstream: Upstream) -> AsyncIterator[dict[str, Any]]:
    buffer = bytearray()
    for event in sse_events(buffer, upstream.first):
        yield event
    async for chunk in upstream.rest():
        for event in sse_events(buffer, chunk):
            yield event


def _sse(document: dict[str, Any] | str) -> bytes:
    text = document if isinstance(document, str) else json.dumps(document)
    return f"data: {text}\n\n".encode()


def build_router(gateway: Gateway, upstream: HttpUpstream) -> APIRouter:
    router = APIRouter(prefix="/v1")

    def caller(request: Request) -> Tenant:
        return gateway.caller(bearer_key(request.headers.get("authorization")))

    @router.get("/models")
    async def models(request: Request) -> dict[str, Any]:
        return model_list(gateway.table.routes.values(), caller(request))

    async def open_choices(route: Route, oa: OpenAIRequest, parameters: dict[str, Any]
                           ) -> list[Upstream]:
        opened = await asyncio.gather(*(
            upstream.open(route, PROTOCOL, "generate_stream",
                          json.dumps(oa.backend_body(index, parameters)).encode())
            for index in range(oa.n)), return_exceptions=True)
        answers = [a for a in opened if isinstance(a, Upstream)]
        failure = next((a for a in opened if isinstance(a, BaseException)), None)
        refused = next((a for a in answers if a.status != 200), None)
        if failure is not None or refused is not None:
            for answer in answers:
                await upstream.close(answer)
            if failure is not None:
                raise failure
            assert refused is not None
            raise _backend_error(refused.status, refused.first)
        return answers

    async def complete(request: Request, parse: Callable[[dict[str, Any]], OpenAIRequest],
                       prompt_field: str) -> Response:
        received = time.monotonic()
        tenant = caller(request)
        oa = parse(parse_json_body(await request.body()))
        route = gateway.route_for(tenant, oa.model)
        prompt = Prompt(oa.text_input, len(oa.text_input.encode()), oa.chat)
        gateway.check_prompt_bytes(route, prompt, prompt_field)
        header = parse_priority(request.headers.get(PRIORITY_HEADER), "the X-Priority header")
        if header is not None and oa.priority is not None and header != oa.priority:
            raise BadRequest(f"priority {oa.priority} and X-Priority {header} disagree; send one")
        requested = oa.priority if oa.priority is not None else header
        parameters = for_backend(oa.parameters, tenant, gateway.gateway_secret, requested)
        if route.adapter is not None:
            # OpenAI's fields have no lora_name: the model name is the only place it comes from.
            parameters = with_lora_name(parameters, route.adapter, "parameters")
        grant = await gateway.admit(tenant, route, prompt,
                                    parse_max_tokens(oa.parameters.get("max_tokens")), oa.n)
        try:
            answers = await open_choices(route, oa, parameters)
        except BaseException:
            await gateway.settle(tenant, route, grant, 0, 0, reached_node=False)
            raise
        gateway.metrics.ttft.labels(PROTOCOL, route.name).observe(time.monotonic() - received)
        tokens = gateway.metrics.output_tokens.labels(PROTOCOL, route.name, tenant.name)
        outcomes = gateway.metrics.requests

        if not oa.stream:
            texts, reasons = [""] * oa.n, [None] * oa.n
            logprobs: list[dict[str, Any] | None] = [None] * oa.n
            prompt_tokens, completion_tokens = 0, 0
            try:
                for index, answer in enumerate(answers):
                    async for document in _events(answer):
                        if "error" in document:
                            raise NodeFailed(str(document["error"]))
                        event = backend_event(document)
                        logprobs[index] = merge_logprobs(oa, logprobs[index], openai_logprobs(
                            oa, event.logprobs, len(texts[index])))
                        texts[index] += event.text
                        reasons[index] = event.finish_reason or reasons[index]
                        prompt_tokens = event.input_tokens or prompt_tokens
                        completion_tokens += event.output_tokens
            except GatewayError:
                outcomes.labels(PROTOCOL, route.name, tenant.name, "failed").inc()
                raise
            finally:
                for answer in answers:
                    await upstream.close(answer)
                # Every choice is a request of its own, with the prompt.
                await gateway.settle(tenant, route, grant, prompt_tokens * oa.n,
                                     completion_tokens)
            tokens.inc(completion_tokens)
            outcomes.labels(PROTOCOL, route.name, tenant.name, "ok").inc()
            return JSONResponse(final_response(oa, texts, reasons, prompt_tokens,
                                               completion_tokens, logprobs))

        async def finish(prompt: int, completion: int) -> None:
            # Out of the streaming task: a dropped client cancels that one, and its cleanup.
            for answer in answers:
                await upstream.close(answer)
            await gateway.settle(tenant, route, grant, prompt, completion)

        async def stream() -> AsyncIterator[bytes]:
            queue: asyncio.Queue[tuple[int, dict[str, Any] | None]] = asyncio.Queue()

            async def pump(index: int, answer: Upstream) -> None:
                try:
                    async for document in _events(answer):
                        await queue.put((index, document))
                finally:
                    await queue.put((index, None))

            tasks = [asyncio.create_task(pump(i, a)) for i, a in enumerate(answers)]
            open_streams, started = len(answers), set()
            offsets = [0] * len(answers)
            prompt_tokens, completion_tokens, outcome = 0, 0, "ok"
            try:
                while open_streams:
                    index, document = await queue.get()
                    if document is None:
                        open_streams -= 1
                        continue
                    if "error" in document:
                        outcome = "failed"
                        yield _sse({"error": {"message": str(document["error"]),
                                              "type": "server_error", "param": None,
                                              "code": "NodeFailed"}})
                        break
                    event = backend_event(document)
                    prompt_tokens = event.input_tokens or prompt_tokens
                    completion_tokens += event.output_tokens
                    tokens.inc(event.output_tokens)
                    first = index not in started
                    started.add(index)
                    if event.text or first:
                        yield _sse(stream_chunk(oa, index, event.text, None, first=first,
                                                logprobs=openai_logprobs(oa, event.logprobs,
                                                                         offsets[index])))
                        offsets[index] += len(event.text)
                    if event.finish_reason:
                        yield _sse(stream_chunk(oa, index, None, event.finish_reason))
                if oa.include_usage and outcome == "ok":
                    yield _sse(usage_chunk(oa, prompt_tokens, completion_tokens))
                yield _sse("[DONE]")
            finally:
                for task in tasks:
                    task.cancel()
                outcomes.labels(PROTOCOL, route.name, tenant.name, outcome).inc()
                gateway.finish_later(finish(prompt_tokens * oa.n, completion_tokens))

        return StreamingResponse(stream(), media_type="text/event-stream")

    @router.post("/completions")
    async def completions(request: Request) -> Response:
        return await complete(request, parse_completion, "prompt")

    @router.post("/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await complete(request, parse_chat, "messages")

    return router
