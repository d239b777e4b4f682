"""The threads registrations run on: a few per API worker, handed out first come, first served.

Starlette runs every plain-function endpoint and dependency in anyio's default pool of 40 threads.
Sixteen registrations at once then had sixteen threads hashing sources and running transactions,
taking turns on one interpreter lock in no particular order, and the unluckiest waited for all the
others: what write p99 at concurrency 16 measures (``bench/admin_api.py``). A registration runs
instead on one of a few threads of its own (``LLMCP_API_REGISTRATION_THREADS``), which anyio's
``CapacityLimiter`` hands out in the order they were asked for: its source is read and hashed
there, then its transaction opens. Registrations of large local models (seconds of hashing) make
the registrations behind them wait; nothing else does.

Nothing that runs on these threads waits for something that needs one of them: a registration's
transaction waits only for its model's row lock (PostgreSQL) or for SQLite's writer queue, and
whoever holds either is a registration already on one of these threads or a request on the
default pool, which needs none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio.to_thread
from anyio import CapacityLimiter

T = TypeVar("T")


class RegistrationThreads:
    """An app's registration threads; made with the app, they bind to the loop that first
    uses them."""

    def __init__(self, count: int) -> None:
        self._limiter = CapacityLimiter(count)

    async def run(self, work: Callable[[], T]) -> T:
        """``work()`` on one of the threads, after the registrations that asked before."""
        return await anyio.to_thread.run_sync(work, limiter=self._limiter)
