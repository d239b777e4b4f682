"""FastAPI dependencies that turn an ``Authorization: Bearer`` header into an authorized actor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from control_plane.auth.scopes import Actor, Scope
from control_plane.auth.tokens import authenticate
from control_plane.db import transaction
from control_plane.dependencies import DbSession, request_id
from control_plane.errors import Forbidden, Unauthorized

# auto_error=False: a missing header is reported in our error shape, not FastAPI's.
_bearer = HTTPBearer(auto_error=False,
                     description="an API token from 'llm-control-plane tokens create'")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _authorize(session: Session, request: Request, credentials: HTTPAuthorizationCredentials | None,
               required: Scope) -> Actor:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("missing API token: send 'Authorization: Bearer <token>'")
    actor = authenticate(session, credentials.credentials, request_id(request))
    if not actor.scope.includes(required):
        raise Forbidden(f"token '{actor.name}' has scope '{actor.scope}'; this call needs "
                        f"'{required}'")
    return actor


def require_scope(required: Scope) -> Callable[..., Actor]:
    """A dependency that admits callers whose token scope includes ``required``."""

    def dependency(request: Request, session: DbSession, credentials: Credentials) -> Actor:
        return _authorize(session, request, credentials, required)

    return dependency


def require_scope_briefly(required: Scope) -> Callable[..., Actor]:
    """As ``require_scope``, in a transaction of its own that ends before the endpoint runs: for
    endpoints that wait (long polls), which must hold no connection while they do."""

    def dependency(request: Request, credentials: Credentials) -> Actor:
        with transaction(request.app.state.session_factory, read_only=True) as session:
            return _authorize(session, request, credentials, required)

    return dependency


Reader = Annotated[Actor, Depends(require_scope(Scope.READ))]
Reporter = Annotated[Actor, Depends(require_scope(Scope.REPORT))]
NodeAgent = Annotated[Actor, Depends(require_scope(Scope.NODE))]
Writer = Annotated[Actor, Depends(require_scope(Scope.WRITE))]
Admin = Annotated[Actor, Depends(require_scope(Scope.ADMIN))]
WaitingReader = Annotated[Actor, Depends(require_scope_briefly(Scope.READ))]
# For routes that read or hash files before their transaction (registering a version).
BriefWriter = Annotated[Actor, Depends(require_scope_briefly(Scope.WRITE))]
