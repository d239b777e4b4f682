"""Reads answered from the process's ``ReadCache`` when it holds the answer.

A hit is a dictionary look-up on the event loop; a miss reads in one worker thread, in one
read-only transaction, and keeps what it read for the next caller (see read_cache)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

from fastapi import Request, Response
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from control_plane.db import transaction
from control_plane.read_cache import ReadCache

T = TypeVar("T")
# What a read endpoint makes of its rows: the JSON body and the headers to send with it.
Answer = tuple[bytes, dict[str, str]]


def _read(factory: sessionmaker[Session], read: Callable[[Session], T]) -> T:
    with transaction(factory, read_only=True) as session:
        return read(session)


async def read_through(request: Request, part: str, key: Hashable,
                       read: Callable[[Session], T]) -> T:
    """What ``read`` gives, from the cache's ``part`` when it holds ``key``; otherwise read in a
    transaction of its own and kept, unless it is None or it raised."""
    cache: ReadCache = request.app.state.read_cache
    found: T | None = cache.get(part, key)
    if found is None:
        generation = cache.generation(part)
        found = await run_in_threadpool(_read, request.app.state.session_factory, read)
        if found is not None:
            cache.put(part, key, found, generation)
    return found


async def cached_json(request: Request, part: str, key: Hashable,
                      read: Callable[[Session], Answer]) -> Response:
    """The JSON answer ``read`` gives, through the cache (``read_through``)."""
    body, headers = await read_through(request, part, key, read)
    return Response(body, media_type="application/json", headers=headers)
