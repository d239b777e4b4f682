"""FastAPI dependencies that turn an ``Authorization: Bearer`` header into an authorized actor."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from control_plane.auth.repository import TokenRepository
from control_plane.auth.scopes import Actor, Scope
from control_plane.auth.tokens import hash_secret
from control_plane.db import transaction
from control_plane.dependencies import request_id
from control_plane.errors import Forbidden, Unauthorized
from control_plane.read_cache import TOKENS, ReadCache

# auto_error=False: a missing header is reported in our error shape, not FastAPI's.
_bearer = HTTPBearer(auto_error=False,
                     description="an API token from 'llm-control-plane tokens create'")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _token_by_hash(factory: sessionmaker[Session], secret_hash: str) -> tuple[str, str] | None:
    with transaction(factory, read_only=True) as session:
        return TokenRepository(session).name_and_scope_by_hash(secret_hash)


async def _authorize(request: Request, credentials: HTTPAuthorizationCredentials | None,
                     required: Scope) -> Actor:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("missing API token: send 'Authorization: Bearer <token>'")
    # A token found in the read cache costs no thread and no query; the cache forgets every token
    # as soon as any is created or revoked, by whatever process (see read_cache).
    cache: ReadCache = request.app.state.read_cache
    key = ("token", hash_secret(credentials.credentials))
    token: tuple[str, str] | None = cache.get(TOKENS, key)
    if token is None:
        generation = cache.generation(TOKENS)
        # In a transaction of its own, ended before the endpoint runs: endpoints that wait (long
        # polls) or read files first (registration) hold no connection meanwhile.
        token = await run_in_threadpool(_token_by_hash, request.app.state.session_factory,
                                        key[1])
        if token is None:
            raise Unauthorized("the API token is not valid; create one with "
                               "'llm-control-plane tokens create'")
        cache.put(TOKENS, key, token, generation)
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
