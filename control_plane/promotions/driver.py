"""Running promotions in the background: claim one, carry out its steps (``version_run`` for a
version, ``adapter_run`` for a LoRA adapter), wait for the operations they start, and resume at
the next start what a previous process left unfinished."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction, utcnow
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


class Publish(Protocol):
    """Called in the transaction that ends a promotion (the webhook outbox), then after it
    commits. What it returns (the outbox's event) goes unused, so any return type will do."""

    def __call__(self, session: Session, event_type: str, payload: dict[str, Any], /) -> object:
        ...


class PromotionDriver:
    def __init__(self, session_factory: sessionmaker[Session], runner: OperationRunner,
                 source_roots: Sequence[Path], observe: Observe = gate_runner.observe,
                 publish: Publish | None = None, after_commit: Callable[[], None] = lambda: None,
                 step_timeout_s: float = 900.0, poll_s: float = 0.25) -> None:
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

    # -- running -------------------------------------------------------------------------------

    def start(self) -> None:
        """Resume what a previous process left unfinished (call after the operation runner has
        failed its interrupted operations, so every step finds its operations ended)."""
        started = utcnow()
        try:
            with transaction(self.session_factory, read_only=True) as session:
                leftover = PromotionRepository(session).unfinished_ids(started)
        except Exception:
            log.exception("cannot look for unfinished promotions; they resume at the next start")
            return
        for promotion_id in leftover:
            log.warning("resuming promotion %s, left unfinished by a previous run", promotion_id)
            self.submit(promotion_id, resume=True)

    def submit(self, promotion_id: str, resume: bool = False) -> Future[None]:
        return self._executor.submit(self._run, promotion_id, resume)

    def shutdown(self) -> None:
        # A promotion in progress stops at its next wait or step, as it is; it resumes at the next
        # start (a gate request in flight ends first, within its timeout).
        self.stopping.set()
        self._executor.shutdown(wait=True, cancel_futures=True)

    def _run(self, promotion_id: str, resume: bool) -> None:
        try:
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
