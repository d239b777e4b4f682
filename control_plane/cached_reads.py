"""Read endpoints answered from the process's ``ReadCache`` when it holds the answer.

A hit is a dictionary look-up on the event loop; a miss reads in one worker thread, in one
read-only transaction, and keeps the JSON it wrote for the next caller (see read_cache)."""

from __future__ import annotations

from collections.abc import Callable, Hashable

from fastapi import Request, Response
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from control_plane.db import transaction
from control_plane.read_cache import ReadCache

# What a read makes of its rows: the JSON body and the headers to send with it.
Answer = tuple[bytes, dict[str, str]]


def _read(factory: sessionmaker[Session], read: Callable[[Session], Answer]) -> Answer:
    with transaction(factory, read_only=True) as session:
        return read(session)


async def cached_json(request: Request, part: str, key: Hashable,
                      read: Callable[[Session], Answer]) -> Response:
    """The answer ``read`` gives, from the cache's ``part`` when it holds ``key``; errors are
    not kept."""
    cache: ReadCache = request.app.state.read_cache
    answer: Answer | None = cache.get(part, key)
    if answer is None:
        generation = cache.generation(part)
        answer = await run_in_threadpool(_read, request.app.state.session_factory, read)
        cache.put(part, key, answer, generation)
    body, headers = answer
    return Response(body, media_type="application/json", headers=headers)
