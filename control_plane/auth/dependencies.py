"""FastAPI dependencies that turn an ``Authorization: Bearer`` header into an authorized actor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from control_plane.auth.scopes import Actor, Scope
from control_plane.auth.tokens import authenticate
from control_plane.dependencies import DbSession, request_id
from control_plane.errors import Forbidden, Unauthorized

# auto_error=False: a missing header is reported in our error shape, not FastAPI's.
_bearer = HTTPBearer(auto_error=False,
                     description="an API token from 'llm-control-plane tokens create'")


def require_scope(required: Scope) -> Callable[..., Actor]:
    """A dependency that admits callers whose token scope includes ``required``."""

    def dependency(request: Request, session: DbSession,
                   credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
                   ) -> Actor:
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise Unauthorized("missing API token: send 'Authorization: Bearer <token>'")
        actor = authenticate(session, credentials.credentials, request_id(request))
        if not actor.scope.includes(required):
            raise Forbidden(f"token '{actor.name}' has scope '{actor.scope}'; this call needs "
                            f"'{required}'")
        return actor

    return dependency


Reader = Annotated[Actor, Depends(require_scope(Scope.READ))]
Writer = Annotated[Actor, Depends(require_scope(Scope.WRITE))]
Admin = Annotated[Actor, Depends(require_scope(Scope.ADMIN))]
