"""Answers for URLs the gateway does not serve: which ones it does, in the error shape of the
protocol the client was speaking, instead of FastAPI's bare ``{"detail": "Not Found"}``.

Starlette's router decides what is served: no route for the path is its 404, a route for the path
but not for the method is its 405 (with ``Allow`` naming the route's methods). ``routing_error()``
turns those into the gateway's errors. The common cases are an OpenAI client whose base URL lacks
``/v1`` (it then posts to ``/chat/completions``), an endpoint of OpenAI's the gateway has not got
(``/v1/embeddings``), and Triton's admin endpoints under ``/v2``, which stay inside.
"""

from __future__ import annotations

from fastapi import Request
from starlette.exceptions import HTTPException

from gateway.errors import GatewayError, MethodNotAllowed, NotServed, UnknownEndpoint

OPENAI_ENDPOINTS = "POST /v1/chat/completions, POST /v1/completions and GET /v1/models"


def routing_error(request: Request, exc: HTTPException) -> GatewayError | None:
    """The gateway's error for the router's 404 or 405; None for any other status."""
    if exc.status_code == 405:
        allow = (exc.headers or {}).get("Allow", "")
        return method_not_allowed(request, [m.strip() for m in allow.split(",") if m.strip()])
    if exc.status_code == 404:
        return unknown_endpoint(request)
    return None


def method_not_allowed(request: Request, allowed: list[str]) -> MethodNotAllowed:
    path = request.url.path
    return MethodNotAllowed(f"{request.method} {path} is not served; use "
                            f"{' or '.join(f'{method} {path}' for method in allowed)}", allowed)


def unknown_endpoint(request: Request) -> GatewayError:
    """Why the request's URL is not served here, and what is."""
    path = request.url.path
    what = f"{request.method} {path}"
    if path == "/v2" or path.startswith("/v2/"):
        # Triton's repository, shared-memory, trace, logging and statistics endpoints: refused
        # (403, as the gRPC side refuses their RPCs), not unknown.
        return NotServed(f"{path} is not served by the inference gateway: repository, "
                         "shared-memory, trace, logging and statistics endpoints stay inside; "
                         "operators use the control plane's admin API")
    if path.startswith("/v1/"):
        return UnknownEndpoint(f"{what} is not served here: this gateway's OpenAI API is "
                               f"{OPENAI_ENDPOINTS} (text generation only)")
    return UnknownEndpoint(
        f"{what} is not served here: OpenAI's API is under /v1 ({OPENAI_ENDPOINTS}; an OpenAI "
        "client's base URL ends in /v1), Triton's HTTP protocol under /v2 (POST "
        "/v2/models/<model>/generate or generate_stream, GET /v2/models/<model> for metadata)")
