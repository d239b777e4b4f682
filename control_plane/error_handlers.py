"""Turns every error into the one JSON shape ``{"error": <type>, "detail": <message>}``."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.exceptions import HTTPException

from control_plane.errors import ControlPlaneError, DatabaseUnavailable

log = logging.getLogger(__name__)


class ErrorBody(BaseModel):
    error: str
    detail: str


def _error(status_code: int, error: str, detail: str,
           headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(ErrorBody(error=error, detail=detail).model_dump(),
                        status_code=status_code, headers=headers)


def error_responses(*status_codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries documenting the error shape for ``status_codes``."""
    return {code: {"model": ErrorBody} for code in status_codes}


def database_unavailable(exc: DBAPIError) -> DatabaseUnavailable:
    # The driver's first line names the cause (refused connection, missing file, …); the rest is
    # SQL and parameters a client has no use for.
    reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else type(exc).__name__
    return DatabaseUnavailable(
        f"the database is unavailable ({reason}); nothing was changed, retry when it is back")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ControlPlaneError)
    async def control_plane_error(_: Request, exc: ControlPlaneError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else exc.headers
        return _error(exc.status_code, type(exc).__name__, exc.message, headers)

    @app.exception_handler(OperationalError)
    async def operational_error(_: Request, exc: OperationalError) -> JSONResponse:
        unavailable = database_unavailable(exc)
        return _error(unavailable.status_code, type(unavailable).__name__, unavailable.message)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
            for error in exc.errors())
        return _error(422, "InvalidRequest", problems)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        cause = exc.__cause__
        if exc.status_code == 400 and isinstance(cause, (ValueError, RecursionError)):
            # FastAPI's answer to a body it cannot decode (not UTF-8, nested too deep) is a bare
            # 400, while malformed JSON is a 422: one mistake, one documented answer that says why.
            return _error(422, "InvalidRequest", f"body: cannot be read as JSON ({cause}); send "
                                                 "a UTF-8 encoded JSON object")
        # Routing's own answers (no endpoint raises HTTPException): say what to do instead.
        what = f"{request.method} {request.url.path}"
        if exc.status_code == 404:
            return _error(404, "UnknownEndpoint",
                          f"{what} is not an endpoint of this API; every endpoint is listed at "
                          "/docs (OpenAPI document: /openapi.json)", exc.headers)
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            return _error(405, "MethodNotAllowed",
                          f"{what} is not served; this URL takes {allowed or 'other methods'} "
                          "(every endpoint is listed at /docs)", exc.headers)
        return _error(exc.status_code, "HTTPError", str(exc.detail), exc.headers)

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, exc: Exception) -> JSONResponse:
        # A bug, not a user's mistake: the documented shape and the request id to find the
        # traceback by, never the exception's text (it may carry SQL or internal state).
        request_id = getattr(request.state, "request_id", None) or "-"
        log.error("unexpected error in %s %s (request id %s)", request.method, request.url.path,
                  request_id, exc_info=exc)
        return _error(500, "InternalError",
                      f"the control plane failed on this request (request id {request_id}); "
                      "nothing you sent was wrong: retry, and report the request id if it "
                      "happens again (the control plane's log has the traceback)",
                      {"X-Request-ID": request_id})
