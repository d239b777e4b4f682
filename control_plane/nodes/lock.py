"""One action at a time on a node, across the threads of a process and every process on the
database: a reconcile pass, a deployment's operation and an adapter's never interleave their
calls to one Triton, whichever API worker or replica runs them.

A thread lock orders the threads of this process; then the database lock called
``node-<id>`` (the leader election's: a PostgreSQL advisory lock on its own connection, an
``flock`` beside a SQLite file) orders the processes. Both die with their holder, so a killed
process leaves no node locked.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Self

from control_plane.leader import LeaderLock

# How often a blocking acquire tries the database lock again while another process holds it.
RETRY_S = 0.1


class NodeLock:
    """The lock of one node; the same object for every thread of the process."""

    def __init__(self, database_url: str, node_id: int) -> None:
        self._local = threading.Lock()
        self._shared = LeaderLock(database_url, f"node-{node_id}")

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Like ``threading.Lock.acquire``: wait (up to ``timeout`` if not negative) or not."""
        deadline = None if timeout < 0 else time.monotonic() + timeout
        if not self._local.acquire(blocking, timeout if blocking else -1):
            return False
        while not self._shared.try_acquire():
            if not blocking or (deadline is not None and time.monotonic() >= deadline):
                self._local.release()
                return False
            time.sleep(RETRY_S)
        return True

    def release(self) -> None:
        self._shared.release()
        self._local.release()

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()


class NodeLocks:
    """Every node's lock, made on first use."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._locks: dict[int, NodeLock] = {}
        self._guard = threading.Lock()

    def __call__(self, node_id: int) -> NodeLock:
        with self._guard:
            lock = self._locks.get(node_id)
            if lock is None:
                lock = self._locks[node_id] = NodeLock(self.database_url, node_id)
            return lock
