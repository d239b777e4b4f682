"""Request bodies bounded at the edge: a body over the limit is refused with 413 before it is
buffered whole (a declared length at once, a chunked one as soon as it passes the limit), and
a client that sends its body too slowly is cut off with 408, so it holds no worker for long."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.errors import BodyTimeout, BodyTooLarge, GatewayError
from gateway.metrics import GatewayMetrics

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def error_document(path: str, error: GatewayError) -> dict[str, Any]:
    """Triton's ``{"error": ...}`` on /v2, OpenAI's error object everywhere else: off /v1 and /v2
    the likeliest caller is an OpenAI client whose base URL lacks /v1, and a person reads the
    message either way."""
    if path == "/v2" or path.startswith("/v2/"):
        return {"error": error.message}
    return {"error": {"message": error.message, "type": error.openai_type, "param": None,
                      "code": error.openai_code}}


async def send_error(send: Send, path: str, error: GatewayError) -> None:
    body = json.dumps(error_document(path, error)).encode()
    await send({"type": "http.response.start", "status": error.http_status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float,
                 metrics: GatewayMetrics) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.metrics = metrics

    def _too_large(self, size: str) -> BodyTooLarge:
        self.metrics.body_refusals.labels("http", "body_size").inc()
        return BodyTooLarge(f"the request body is {size}; this gateway takes at most "
                            f"{self.max_bytes} bytes (LLMGW_MAX_BODY_BYTES): send a shorter "
                            "prompt")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await send_error(send, path, GatewayError("Content-Length is not a number"))
                return
            if int(declared) > self.max_bytes:
                await send_error(send, path, self._too_large(f"{int(declared)} bytes"))
                return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        parts: list[bytes] = []
        size = 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                self.metrics.body_refusals.labels("http", "body_timeout").inc()
                await send_error(send, path, BodyTimeout(
                    f"the request body did not arrive within {self.timeout_s:.0f} s "
                    f"({size} bytes came); send it at once"))
                return
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await send_error(send, path, self._too_large(f"over {self.max_bytes} bytes "
                                                             "(sent chunked)"))
                return
            parts.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(parts)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
