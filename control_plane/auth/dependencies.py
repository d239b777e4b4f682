"""FastAPI dependencies that turn an ``Authorization: Bearer`` header into an authorized actor."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from control_plane.auth.repository import TokenRepository
from control_plane.auth.scopes import Actor, Scope
from control_plane.auth.tokens import hash_secret
from control_plane.cached_reads import read_through
from control_plane.dependencies import request_id
from control_plane.errors import Forbidden, Unauthorized
from control_plane.read_cache import TOKENS

# auto_error=False: a missing header is reported in our error shape, not FastAPI's.
_bearer = HTTPBearer(auto_error=False,
                     description="an API token from 'llm-control-plane tokens create'")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


async def _authorize(request: Request, credentials: HTTPAuthorizationCredentials | None,
                     required: Scope) -> Actor:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("missing API token: send 'Authorization: Bearer <token>'")
    # A token found in the read cache costs no thread and no query; the cache forgets every token
    # as soon as any is created or revoked, by whatever process (see read_cache). A miss reads it
    # in a transaction of its own, ended before the endpoint runs: endpoints that wait (long
    # polls) or read files first (registration) hold no connection meanwhile.
    secret_hash = hash_secret(credentials.credentials)
    token = await read_through(
        request, TOKENS, ("token", secret_hash),
        lambda session: TokenRepository(session).name_and_scope_by_hash(secret_hash))
    if token is None:
        raise Unauthorized("the API token is not valid; create one with "
                           "'llm-control-plane tokens create'")
    name, scope = token
    actor = Actor(name=name, scope=Scope(scope), request_id=request_id(request))
    if not actor.scope.includes(required):
        raise Forbidden(f"token '{actor.name}' has scope '{actor.scope}'; this call needs "
                        f"'{required}'")
    return actor


def require_scope(required: Scope) -> Callable[..., Awaitable[Actor]]:
    """A dependency that admits callers whose token scope includes ``required``."""

    async def dependency(request: Request, credentials: Credentials) -> Actor:
        return await _authorize(request, credentials, required)

    return dependency


Reader = Annotated[Actor, Depends(require_scope(Scope.READ))]
Reporter = Annotated[Actor, Depends(require_scope(Scope.REPORT))]
NodeAgent = Annotated[Actor, Depends(require_scope(Scope.NODE))]
Writer = Annotated[Actor, Depends(require_scope(Scope.WRITE))]
Admin = Annotated[Actor, Depends(require_scope(Scope.ADMIN))]
