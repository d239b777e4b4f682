"""Running promotions in the background: claim one, carry out its steps (``version_run`` for a
version, ``adapter_run`` for a LoRA adapter), wait for the operations they start, and adopt what
a process that stopped left unfinished."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import database_url, transaction, utcnow
from control_plane.deployments import service as deployments
from control_plane.deployments.repository import DeploymentRepository
from control_plane.leader import LeaderLock
from control_plane.operations import service as operations
from control_plane.operations.orm import OperationStatus
from control_plane.operations.runner import OperationRunner
from control_plane.promotions import gate_runner
from control_plane.promotions.adapter_run import AdapterRun
from control_plane.promotions.gate_checks import Observation
from control_plane.promotions.orm import PromotionState
from control_plane.promotions.repository import PromotionRepository
from control_plane.promotions.run import StepFailed, Stopping
from control_plane.promotions.version_run import VersionRun

log = logging.getLogger(__name__)

# Measures one request to a Triton model: (grpc_url, triton_name, prompt, max_tokens, temperature,
# lora_name).
Observe = Callable[[str, str, str, int, float, str | None], Observation]


def driver_lock(url: str, promotion_id: str) -> LeaderLock:
    """The lock whose holder drives ``promotion_id``: one driver among every process on the
    database at ``url``; the adopter leaves a promotion whose lock is held alone."""
    return LeaderLock(url, f"promotion-{promotion_id}")


class Publish(Protocol):
    """Called in the transaction that ends a promotion (the webhook outbox), then after it
    commits. What it returns (the outbox's event) goes unused, so any return type will do."""

    def __call__(self, session: Session, event_type: str, payload: dict[str, Any], /) -> object:
        ...


class PromotionDriver:
    def __init__(self, session_factory: sessionmaker[Session], runner: OperationRunner,
                 source_roots: Sequence[Path], observe: Observe = gate_runner.observe,
                 publish: Publish | None = None, after_commit: Callable[[], None] = lambda: None,
                 step_timeout_s: float = 900.0, poll_s: float = 0.25,
                 adopt_every_s: float = 10.0) -> None:
        self.session_factory = session_factory
        self.runner = runner
        self.source_roots = list(source_roots)
        self.observe = observe
        self.publish = publish
        self.after_commit = after_commit
        self.step_timeout_s = step_timeout_s
        self.poll_s = poll_s
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="promotion")
        self.stopping = threading.Event()
        self.adopt_every_s = adopt_every_s
        self.database_url = database_url(session_factory)
        self._driving: set[str] = set()
        self._guard = threading.Lock()
        self._adopter: threading.Thread | None = None

    # -- running -------------------------------------------------------------------------------

    def start(self) -> None:
        """Look, now and every ``adopt_every_s``, for unfinished promotions no process drives
        (the one driving it died or stopped) and resume them."""
        self._adopter = threading.Thread(target=self._adopt_loop, name="promotion-adopter",
                                         daemon=True)
        self._adopter.start()

    def submit(self, promotion_id: str, resume: bool = False) -> Future[None]:
        return self._executor.submit(self._run, promotion_id, resume)

    def shutdown(self) -> None:
        # A promotion in progress stops at its next wait or step, as it is; another process, or
        # this one's next start, resumes it (a gate request in flight ends first).
        self.stopping.set()
        if self._adopter is not None:
            self._adopter.join(timeout=30)
        self._executor.shutdown(wait=True, cancel_futures=True)

    def _adopt_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                with transaction(self.session_factory, read_only=True) as session:
                    unfinished = PromotionRepository(session).unfinished_ids(utcnow())
                for promotion_id in unfinished:
                    with self._guard:
                        if promotion_id in self._driving:
                            continue
                    self.submit(promotion_id, resume=True)
            except Exception:
                log.exception("cannot look for unfinished promotions; looking again in %.0f s",
                              self.adopt_every_s)
            self.stopping.wait(self.adopt_every_s)

    def _run(self, promotion_id: str, resume: bool) -> None:
        # One driver per promotion among every process on the database: the lock is held for the
        # whole run and dies with its process, whose promotions another process then adopts.
        lock = driver_lock(self.database_url, promotion_id)
        with self._guard:
            if promotion_id in self._driving:
                return
            if not lock.try_acquire():
                lock.release()  # closes the connection it tried on
                return  # another process drives it
            self._driving.add(promotion_id)
        try:
            self._drive(promotion_id, resume)
        finally:
            with self._guard:
                self._driving.discard(promotion_id)
            lock.release()

    def _drive(self, promotion_id: str, resume: bool) -> None:
        try:
            with transaction(self.session_factory, read_only=True) as session:
                promotion = PromotionRepository(session).get(promotion_id)
                if promotion is None or PromotionState(promotion.state).finished:
                    return
                model_id = promotion.model_id
            if resume:
                self._wait_for_abandoned_operations(promotion_id, model_id)
            with transaction(self.session_factory) as session:
                repository = PromotionRepository(session)
                claimed = repository.transition(promotion_id, [PromotionState.PENDING],
                                                PromotionState.RUNNING, updated_at=utcnow())
                if not claimed and not resume:
                    return  # taken or finished elsewhere
            with transaction(self.session_factory, read_only=True) as session:
                promotion = PromotionRepository(session).get(promotion_id)
                of_adapter = promotion is not None and promotion.adapter is not None
            run = (AdapterRun if of_adapter else VersionRun)(self, promotion_id)
            run.execute()
        except Stopping:
            log.info("promotion %s stops with the control plane; it resumes at the next start",
                     promotion_id)
        except Exception:
            log.exception("promotion %s stopped on an internal error", promotion_id)

    def _wait_for_abandoned_operations(self, promotion_id: str, model_id: int) -> None:
        """A promotion taken over from a process that died may have left operations running on
        the model's deployments; they hold the deployments until their lease lapses and they
        are failed as interrupted. Its steps start again once they have (or after a step's
        timeout, when a step that needs them fails with a clear error)."""
        deadline = time.monotonic() + self.step_timeout_s
        while time.monotonic() < deadline and not self.stopping.is_set():
            with transaction(self.session_factory, read_only=True) as session:
                ids = {d.id for d in DeploymentRepository(session).of_model(
                    model_id, wanted_only=False)}
                if not ids & deployments.busy_deployment_ids(session):
                    return
            log.info("promotion %s waits for the operations a stopped process left on its "
                     "deployments", promotion_id)
            time.sleep(max(self.poll_s, 1.0))

    # -- helpers shared by the steps ----------------------------------------------------------

    def await_operations(self, operation_ids: Sequence[str]) -> list[tuple[str, str, str | None]]:
        """Submit committed operations and wait until each has ended: (id, status, error)."""
        for operation_id in operation_ids:
            self.runner.submit(operation_id)
        deadline = time.monotonic() + self.step_timeout_s
        pending = list(operation_ids)
        ended: dict[str, tuple[str, str, str | None]] = {}
        while pending:
            with transaction(self.session_factory, read_only=True) as session:
                for operation_id in list(pending):
                    operation = operations.get(session, operation_id)
                    if OperationStatus(operation.status).finished:
                        ended[operation_id] = (operation_id, operation.status, operation.error)
                        pending.remove(operation_id)
            if pending:
                if self.stopping.is_set():
                    raise Stopping
                if time.monotonic() > deadline:
                    raise StepFailed(f"operation(s) {', '.join(pending)} did not end within "
                                     f"{self.step_timeout_s:g} s")
                time.sleep(self.poll_s)
        return [ended[operation_id] for operation_id in operation_ids]
