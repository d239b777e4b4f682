"""FastAPI dependencies shared by every feature: the transaction and the settings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from control_plane.db import transaction
from control_plane.settings import Settings

# Methods whose endpoints only read; their transactions take no write lock on SQLite.
READ_ONLY_METHODS = frozenset({"GET", "HEAD"})


def _session(request: Request) -> Iterator[Session]:
    # The one owner of the transaction: commit after the endpoint returns, roll back if it raised.
    with transaction(request.app.state.session_factory,
                     read_only=request.method in READ_ONLY_METHODS) as session:
        yield session


# Dependencies that only read app.state are coroutines: FastAPI runs a plain function in its
# thread pool, a hop that cost more than the lookup (two per registration).
async def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def request_id(request: Request) -> str | None:
    value: str | None = getattr(request.state, "request_id", None)
    return value


# scope="function" commits before the response is sent, so a failed commit becomes an error
# response instead of a 2xx for a change that never happened.
DbSession = Annotated[Session, Depends(_session, scope="function")]
AppSettings = Annotated[Settings, Depends(_settings)]
