"""The Idempotency-Key header on creating POSTs, for FastAPI routes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.orm import Session

from control_plane.auth.scopes import Actor
from control_plane.idempotency.service import StoredResponse, fingerprint, run_once

IdempotencyKeyHeader = Annotated[str | None, Header(
    alias="Idempotency-Key",
    description="any unique string; a retry with the same key returns the first result "
                "(header Idempotent-Replayed: true) and creates nothing twice")]


def respond_once(request: Request, session: Session, actor: Actor, key: str | None,
                 body: BaseModel | None, status_code: int,
                 perform: Callable[[], tuple[BaseModel, dict[str, str]]]) -> JSONResponse:
    """Run ``perform`` (returning the response model and headers) at most once per key."""

    def run() -> StoredResponse:
        out, headers = perform()
        return StoredResponse(status_code=status_code, body=out.model_dump(mode="json"),
                              headers=headers)

    if key is None:
        result = run()
    else:
        request_fingerprint = fingerprint(request.method, request.url.path,
                                          {} if body is None else body.model_dump(mode="json"))
        result = run_once(session, actor, key, request_fingerprint, run)
    headers = dict(result.headers)
    if result.replayed:
        headers["Idempotent-Replayed"] = "true"
    return JSONResponse(result.body, status_code=result.status_code, headers=headers)
