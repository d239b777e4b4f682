"""Errors a client can cause or meet at the gateway, each with what to do about it.

GatewayError(message)                      HTTP status / gRPC code / OpenAI error type
├── BadRequest                             400 / INVALID_ARGUMENT / invalid_request_error
├── Unauthenticated                        401 / UNAUTHENTICATED / authentication_error
├── PermissionDenied                       403 / PERMISSION_DENIED / permission_error
├── ModelNotFound                          404 / NOT_FOUND / invalid_request_error
├── BodyTooLarge                           413 / RESOURCE_EXHAUSTED / invalid_request_error
├── BodyTimeout                            408 / DEADLINE_EXCEEDED / invalid_request_error
├── NotServed                              403 / UNIMPLEMENTED / invalid_request_error
├── UnknownEndpoint (no such URL)          404 / UNIMPLEMENTED / invalid_request_error
│   └── MethodNotAllowed (+ Allow)         405 / UNIMPLEMENTED / invalid_request_error
├── RateLimited (+ Retry-After)            429 / RESOURCE_EXHAUSTED / rate_limit_exceeded
├── LimitsUnavailable (fail closed)        503 / UNAVAILABLE / server_error
└── NoNodeAvailable                        503 / UNAVAILABLE / server_error
    └── NodeFailed (mid-stream)            502 / UNAVAILABLE / server_error
"""

from __future__ import annotations

import math


class GatewayError(Exception):
    http_status = 500
    grpc_code = "INTERNAL"
    openai_type = "server_error"
    # Seconds a client should wait before it retries (the Retry-After header); None: no advice.
    retry_after_s: float | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def kind(self) -> str:
        return type(self).__name__

    @property
    def openai_code(self) -> str:
        return self.kind

    def headers(self) -> dict[str, str]:
        if self.retry_after_s is None:
            return {}
        # Whole seconds (RFC 9110), rounded up so a client that waits that long is let in.
        return {"Retry-After": str(max(1, math.ceil(self.retry_after_s)))}


class BadRequest(GatewayError):
    http_status = 400
    grpc_code = "INVALID_ARGUMENT"
    openai_type = "invalid_request_error"


class Unauthenticated(GatewayError):
    http_status = 401
    grpc_code = "UNAUTHENTICATED"
    openai_type = "authentication_error"


class PermissionDenied(GatewayError):
    http_status = 403
    grpc_code = "PERMISSION_DENIED"
    openai_type = "permission_error"


class ModelNotFound(GatewayError):
    http_status = 404
    grpc_code = "NOT_FOUND"
    openai_type = "invalid_request_error"


class BodyTooLarge(GatewayError):
    http_status = 413
    grpc_code = "RESOURCE_EXHAUSTED"
    openai_type = "invalid_request_error"


class BodyTimeout(GatewayError):
    http_status = 408
    grpc_code = "DEADLINE_EXCEEDED"
    openai_type = "invalid_request_error"


class NotServed(GatewayError):
    http_status = 403
    grpc_code = "UNIMPLEMENTED"
    openai_type = "invalid_request_error"


class UnknownEndpoint(GatewayError):
    http_status = 404
    grpc_code = "UNIMPLEMENTED"
    openai_type = "invalid_request_error"


class MethodNotAllowed(UnknownEndpoint):
    """A URL the gateway serves, with another method; ``allowed`` goes in the Allow header."""

    http_status = 405

    def __init__(self, message: str, allowed: list[str]) -> None:
        super().__init__(message)
        self.allowed = allowed

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "Allow": ", ".join(self.allowed)}


class RateLimited(GatewayError):
    """Over one of the tenant's limits; the message names it and when to retry."""

    http_status = 429
    grpc_code = "RESOURCE_EXHAUSTED"
    openai_type = "requests"

    def __init__(self, message: str, retry_after_s: float, limit: str) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.limit = limit
        # OpenAI's error types: "requests" for request counts, "tokens" for token counts.
        self.openai_type = "tokens" if "tokens" in limit else "requests"

    @property
    def openai_code(self) -> str:
        return "rate_limit_exceeded"


class LimitsUnavailable(GatewayError):
    """The shared limit store is down and the gateway is set to fail closed."""

    http_status = 503
    grpc_code = "UNAVAILABLE"
    openai_type = "server_error"
    retry_after_s = 5.0


class NoNodeAvailable(GatewayError):
    http_status = 503
    grpc_code = "UNAVAILABLE"
    openai_type = "server_error"


class NodeFailed(NoNodeAvailable):
    http_status = 502
