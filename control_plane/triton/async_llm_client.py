"""Streaming clients on asyncio, for many concurrent requests from one thread: Triton's HTTP
``generate_stream`` (server-sent events) and gRPC ``ModelStreamInfer`` (``tritonclient.grpc.aio``),
each filling the same ``StreamResult`` as the threaded client in ``llm_client``. Used by the burst
tests and benchmarks."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import tritonclient.grpc.aio as grpcclient_aio

from control_plane.triton.llm_client import StreamResult, record_response, stock_inputs


async def http_stream(client: httpx.AsyncClient, model: str, prompt: str,
                      parameters: dict[str, Any]) -> StreamResult:
    """POST ``/v2/models/{model}/generate_stream`` and read its events to the end.

    ``client`` carries the base URL. A refusal (HTTP status >= 400, or an error event) ends in
    ``result.error``; transport errors propagate."""
    result = StreamResult(submitted_at=time.monotonic())
    body = {"text_input": prompt, "stream": True, "return_num_output_tokens": True,
            "parameters": parameters}
    async with client.stream("POST", f"/v2/models/{model}/generate_stream", json=body) as response:
        if response.status_code >= 400:
            payload = (await response.aread()).decode(errors="replace")
            result.error = _error_text(payload)
            result.error_status = str(response.status_code)
            result.done_at = time.monotonic()
            return result
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[len("data:"):])
            if "error" in event:
                result.error = str(event["error"])
                break
            text = event.get("text_output")
            if text:
                if result.first_token_at is None:
                    result.first_token_at = time.monotonic()
                result.texts.append(text)
            if "num_output_tokens" in event:  # per event (the tokens it carries)
                result.num_output_tokens += int(event["num_output_tokens"])
    result.final = result.error is None
    result.done_at = time.monotonic()
    return result


def _error_text(payload: str) -> str:
    """The message of a refusal: generate_stream sends it as an SSE event (``data: {...}``),
    other endpoints as plain JSON."""
    text = payload.strip().removeprefix("data:")
    try:
        return str(json.loads(text).get("error", payload))
    except (json.JSONDecodeError, AttributeError):
        return payload


async def grpc_stream(client: grpcclient_aio.InferenceServerClient, model: str, prompt: str,
                      sampling: dict[str, Any],
                      parameters: dict[str, Any] | None = None,
                      headers: dict[str, str] | None = None) -> StreamResult:
    """One request on a gRPC stream of its own (the stock vLLM tensors), read to its final
    response. The stream is cancelled if the caller is (e.g. on a deadline)."""
    result = StreamResult(submitted_at=time.monotonic())

    async def requests() -> AsyncIterator[dict[str, Any]]:
        # One request, then the client's side of the stream closes: the aio client cannot ask
        # for an empty final response, so Triton ending the stream is what marks the end when
        # the last response carries no tensors.
        yield {"model_name": model, "inputs": stock_inputs(prompt, sampling),
               "parameters": parameters}

    responses = client.stream_infer(requests(), headers=headers)
    try:
        async for item, error in responses:
            if record_response(result, item, error):
                break
    except BaseException:
        responses.cancel()
        raise
    result.final = result.error is None
    result.done_at = time.monotonic()
    return result
