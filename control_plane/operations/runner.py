"""Claims operations from the database and runs them in background threads, each in its own
transactions, never in a request's."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction, utcnow
from control_plane.errors import ControlPlaneError
from control_plane.metrics.registry import ControlPlaneMetrics
from control_plane.operations import service
from control_plane.operations.repository import OperationRepository

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperationContext:
    """What a piece of work gets: its operation's id and arguments, and a way to open sessions."""

    operation_id: str
    created_by: str
    request_id: str | None
    arguments: dict[str, Any]
    session_factory: sessionmaker[Session]
    kind: str = ""


# The work does its reads and slow parts outside any transaction, then commits its own changes
# together with service.succeed(...) in one transaction; it raises to fail.
Work = Callable[[OperationContext], None]


class OperationRunner:
    """Claims pending operations from the database and runs each in a worker thread.

    Every process (replica or API worker) runs one: whichever has a free worker claims the
    oldest pending operation, so an operation runs once and in one place, even when the process
    that accepted it died before it started. A claim carries a heartbeat renewed every
    ``lease_s / 3``; a running operation whose heartbeat is older than ``lease_s`` (its process
    was killed or lost the database) is failed as interrupted by any process."""

    def __init__(self, session_factory: sessionmaker[Session], max_workers: int = 4,
                 metrics: ControlPlaneMetrics | None = None, lease_s: float = 15.0,
                 poll_s: float = 1.0) -> None:
        self._session_factory = session_factory
        self.metrics = metrics or ControlPlaneMetrics()
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.claimer = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._work: dict[str, Work] = {}
        self._max_workers = max_workers
        self._free = threading.Semaphore(max_workers)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._executor: ThreadPoolExecutor | None = None

    def start(self) -> None:
        if any(thread.is_alive() for thread in self._threads):
            return  # already claiming (a second server on the same app)
        self._stopping = threading.Event()
        self._free = threading.Semaphore(self._max_workers)
        self._executor = ThreadPoolExecutor(max_workers=self._max_workers,
                                            thread_name_prefix="operation")
        self._threads = [threading.Thread(target=self._claim_loop, name="operation-claims",
                                          daemon=True),
                         threading.Thread(target=self._lease_loop, name="operation-leases",
                                          daemon=True)]
        for thread in self._threads:
            thread.start()

    def register(self, kind: str, work: Work) -> None:
        self._work[kind] = work

    def submit(self, operation_id: str) -> None:
        """A pending operation was committed: claim work now rather than at the next poll.
        Another process may claim it first; it runs once either way."""
        self._wake.set()

    def shutdown(self) -> None:
        self._stopping.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads = []
        # Work in progress finishes; nothing is claimed any more, so what is still pending stays
        # pending for another process (or this one's next start).
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    # -- claiming ------------------------------------------------------------------------------

    def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.poll_s)
            self._wake.clear()
            try:
                self._claim_while_free()
            except Exception:  # a database outage: claim again at the next poll
                log.exception("cannot claim pending operations; trying again in %.0f s",
                              self.poll_s)

    def _claim_while_free(self) -> None:
        while not self._stopping.is_set() and self._free.acquire(blocking=False):
            try:
                claimed = self._claim()
            except BaseException:
                self._free.release()
                raise
            if claimed is None:
                self._free.release()
                return
            assert self._executor is not None
            self._executor.submit(self._run_claimed, claimed)

    def _claim(self) -> OperationContext | None:
        with transaction(self._session_factory) as session:
            operation = OperationRepository(session).claim_next(self.claimer, utcnow())
            if operation is None:
                return None
            return OperationContext(operation.id, operation.created_by, operation.request_id,
                                    dict(operation.arguments), self._session_factory,
                                    kind=operation.kind)

    # -- heartbeats and expired claims ---------------------------------------------------------

    def _lease_loop(self) -> None:
        while not self._stopping.wait(self.lease_s / 3):
            try:
                with transaction(self._session_factory) as session:
                    OperationRepository(session).beat(self.claimer, utcnow())
                with transaction(self._session_factory) as session:
                    interrupted = service.fail_expired(
                        session, utcnow() - timedelta(seconds=self.lease_s))
            except Exception:
                log.exception("cannot renew or check operation leases; trying again in %.0f s",
                              self.lease_s / 3)
                continue
            if interrupted:
                self.metrics.operations.labels("unknown", "interrupted").inc(interrupted)
                log.warning("failed %d operation(s) whose process stopped answering as "
                            "interrupted", interrupted)
                # What they held (deployments) is free again: claim what waited on it.
                self._wake.set()

    # -- running -------------------------------------------------------------------------------

    def _run_claimed(self, context: OperationContext) -> None:
        started = time.monotonic()
        try:
            work = self._work.get(context.kind)
            if work is None:
                raise ControlPlaneError(f"no work is registered for operations of kind "
                                        f"'{context.kind}'")
            work(context)
            self._count(context.kind, "succeeded", started)
        except ControlPlaneError as exc:
            self._fail(context.operation_id, exc.message)
            self._count(context.kind, "failed", started)
        except Exception as exc:  # the runner outlives any one operation
            log.exception("operation %s failed", context.operation_id)
            self._fail(context.operation_id, f"internal error: {type(exc).__name__}: {exc}")
            self._count(context.kind, "failed", started)
        finally:
            self._free.release()
            # A worker is free, and the operation's locks are gone: look for more work.
            self._wake.set()

    def _count(self, kind: str, outcome: str, started: float) -> None:
        self.metrics.operations.labels(kind, outcome).inc()
        self.metrics.operation_duration.labels(kind, outcome).observe(time.monotonic() - started)

    def _fail(self, operation_id: str, error: str) -> None:
        try:
            with transaction(self._session_factory) as session:
                service.fail(session, operation_id, error)
        except Exception:
            log.exception("could not record the failure of operation %s", operation_id)
