"""Answers for URLs the gateway does not serve: which ones it does, in the error shape of the
protocol the client was speaking, instead of FastAPI's bare ``{"detail": "Not Found"}``.

The common case is an OpenAI client whose base URL lacks ``/v1`` (it then posts to
``/chat/completions``), or an endpoint of OpenAI's the gateway has not got (``/v1/embeddings``).
"""

from __future__ import annotations

from fastapi import Request
from fastapi.routing import APIRoute

from gateway.errors import MethodNotAllowed, UnknownEndpoint

# The routes that answer for whole prefixes: a path they match is not served for that reason.
CATCH_ALL = "{rest:path}"

OPENAI_ENDPOINTS = "POST /v1/chat/completions, POST /v1/completions and GET /v1/models"


def allowed_methods(request: Request) -> list[str]:
    """The methods the gateway serves at the request's path, by its routes (none if it serves
    the path with no method)."""
    path = request.url.path
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, APIRoute) and CATCH_ALL not in route.path and \
                route.path_regex.match(path):
            methods |= route.methods
    return sorted(methods)


def method_not_allowed(request: Request, allowed: list[str]) -> MethodNotAllowed:
    path = request.url.path
    return MethodNotAllowed(f"{request.method} {path} is not served; use "
                            f"{' or '.join(f'{method} {path}' for method in allowed)}", allowed)


def unknown_endpoint(request: Request) -> UnknownEndpoint:
    """Why the request's URL is not served here, and what is."""
    allowed = allowed_methods(request)
    if allowed:
        return method_not_allowed(request, allowed)
    what = f"{request.method} {request.url.path}"
    if request.url.path.startswith("/v1/"):
        return UnknownEndpoint(f"{what} is not served here: this gateway's OpenAI API is "
                               f"{OPENAI_ENDPOINTS} (text generation only)")
    return UnknownEndpoint(
        f"{what} is not served here: OpenAI's API is under /v1 ({OPENAI_ENDPOINTS}; an OpenAI "
        "client's base URL ends in /v1), Triton's HTTP protocol under /v2 (POST "
        "/v2/models/<model>/generate or generate_stream, GET /v2/models/<model> for metadata)")
