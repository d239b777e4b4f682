"""Runs operations in background threads, each in its own transactions, never in a request's."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction, utcnow
from control_plane.errors import ControlPlaneError
from control_plane.metrics.registry import ControlPlaneMetrics
from control_plane.operations import service

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperationContext:
    """What a piece of work gets: its operation's id and arguments, and a way to open sessions."""

    operation_id: str
    created_by: str
    request_id: str | None
    arguments: dict[str, Any]
    session_factory: sessionmaker[Session]


# The work does its reads and slow parts outside any transaction, then commits its own changes
# together with service.succeed(...) in one transaction; it raises to fail.
Work = Callable[[OperationContext], None]


class OperationRunner:
    def __init__(self, session_factory: sessionmaker[Session], max_workers: int = 4,
                 metrics: ControlPlaneMetrics | None = None) -> None:
        self._session_factory = session_factory
        self.metrics = metrics or ControlPlaneMetrics()
        self._work: dict[str, Work] = {}
        self._stopping = threading.Event()
        self._executor = ThreadPoolExecutor(max_workers=max_workers,
                                            thread_name_prefix="operation")

    def start(self, retry_seconds: float = 5.0) -> None:
        """Fail what a previous process left unfinished, retrying while the database is down
        (the API answers 503 meanwhile rather than refusing to start)."""
        self._stopping = threading.Event()
        first_attempt = threading.Event()
        started = utcnow()

        def recover() -> None:
            while not self._stopping.is_set():
                try:
                    with transaction(self._session_factory) as session:
                        interrupted = service.fail_interrupted(session, started)
                except SQLAlchemyError as exc:
                    first_attempt.set()
                    log.warning("cannot recover interrupted operations yet (%s); retrying in "
                                "%.0f s", type(exc).__name__, retry_seconds)
                    self._stopping.wait(retry_seconds)
                    continue
                first_attempt.set()
                if interrupted:
                    self.metrics.operations.labels("unknown", "interrupted").inc(interrupted)
                    log.warning("failed %d operation(s) a previous run left unfinished",
                                interrupted)
                return

        self._recovery = threading.Thread(target=recover, name="operation-recovery", daemon=True)
        self._recovery.start()
        # With a database that answers, recovery is done before the first request, so nothing
        # submitted from now on can be mistaken for a leftover.
        first_attempt.wait(timeout=30)

    def register(self, kind: str, work: Work) -> None:
        self._work[kind] = work

    def submit(self, operation_id: str) -> Future[None]:
        """Run a committed pending operation in the background."""
        return self._executor.submit(self._run, operation_id)

    def shutdown(self) -> None:
        self._stopping.set()
        # Work in progress finishes; queued work stays pending and is failed as interrupted at the
        # next start, so nothing is left looking as if it still runs.
        self._executor.shutdown(wait=True, cancel_futures=True)

    def _run(self, operation_id: str) -> None:
        kind, started = "unknown", time.monotonic()
        try:
            with transaction(self._session_factory) as session:
                operation = service.get(session, operation_id)
                if not service.mark_running(session, operation_id):
                    return  # already taken, finished or failed as interrupted
                kind = operation.kind
                work = self._work.get(operation.kind)
                context = OperationContext(operation.id, operation.created_by,
                                           operation.request_id, dict(operation.arguments),
                                           self._session_factory)
            started = time.monotonic()
            if work is None:
                raise ControlPlaneError(f"no work is registered for operations of kind "
                                        f"'{operation.kind}'")
            work(context)
            self._count(kind, "succeeded", started)
        except ControlPlaneError as exc:
            self._fail(operation_id, exc.message)
            self._count(kind, "failed", started)
        except Exception as exc:  # the runner outlives any one operation
            log.exception("operation %s failed", operation_id)
            self._fail(operation_id, f"internal error: {type(exc).__name__}: {exc}")
            self._count(kind, "failed", started)

    def _count(self, kind: str, outcome: str, started: float) -> None:
        self.metrics.operations.labels(kind, outcome).inc()
        self.metrics.operation_duration.labels(kind, outcome).observe(time.monotonic() - started)

    def _fail(self, operation_id: str, error: str) -> None:
        try:
            with transaction(self._session_factory) as session:
                service.fail(session, operation_id, error)
        except Exception:
            log.exception("could not record the failure of operation %s", operation_id)
