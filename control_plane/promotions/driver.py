"""The work of a promotion, step by step, each step in transactions of its own:

1. register (from a manifest) and validate the version;
2. deploy it as a candidate alias (its own Triton model name) on the nodes the target runs on;
3. run its gates against the candidate, and compare it with the version it replaces;
4. move the target alias with the zero-downtime swap;
5. run the gates again on the served name;
6. remove the candidate.

On a failure the previous version keeps (or, after the swap, gets back) the alias, the candidate is
removed, and the promotion ends FAILED with the step and the reason. Every step can run again, so
a control plane that stopped mid-promotion resumes it at its next start and brings it to an end:
finished, or rolled back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from control_plane.auth import audit
from control_plane.auth.scopes import Actor, Scope
from control_plane.db import transaction, utcnow
from control_plane.deployments import service as deployments
from control_plane.deployments.naming import triton_model_name
from control_plane.deployments.orm import DeploymentState
from control_plane.deployments.repository import DeploymentRepository
from control_plane.errors import ControlPlaneError
from control_plane.lifecycle import alias_moves
from control_plane.lifecycle.alias_moves import SwapStarted
from control_plane.operations import service as operations
from control_plane.operations.orm import OperationStatus
from control_plane.operations.runner import OperationRunner
from control_plane.promotions import gate_checks, gate_runner
from control_plane.promotions.gate_checks import Observation
from control_plane.promotions.gates import Gates
from control_plane.promotions.manifest import VersionManifest
from control_plane.promotions.orm import Promotion, PromotionState
from control_plane.promotions.repository import PromotionRepository
from control_plane.promotions.schemas import STEPS, PromotionOut
from control_plane.registry import aliases, validation
from control_plane.registry import service as registry
from control_plane.registry.orm import VersionState
from control_plane.triton import config_builder

log = logging.getLogger(__name__)

# Measures one request to a Triton model: (grpc_url, triton_name, prompt, max_tokens, temperature).
Observe = Callable[[str, str, str, int, float], Observation]
# Called in the transaction that ends a promotion (the webhook outbox), then after it commits.
Publish = Callable[[Session, str, dict[str, Any]], None]


class Stopping(Exception):
    """The control plane is shutting down: the promotion stays running and resumes at the next
    start."""


class StepFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class _Target:
    node: str
    grpc_url: str
    triton_name: str


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
            run = _Run(self, promotion_id)
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


class _Run:
    """One promotion being carried out."""

    def __init__(self, driver: PromotionDriver, promotion_id: str) -> None:
        self.driver = driver
        self.id = promotion_id
        with self._tx() as session:
            promotion = self._get(session)
            self.model = promotion.model.name
            self.alias = promotion.alias
            self.nodes = list(promotion.nodes)
            self.from_version = promotion.from_version
            self.actor = Actor(name=promotion.requested_by, scope=Scope.WRITE,
                               request_id=promotion.request_id)

    def _tx(self, read_only: bool = False) -> Any:
        return transaction(self.driver.session_factory, read_only=read_only)

    def _get(self, session: Session) -> Promotion:
        promotion = PromotionRepository(session).get(self.id)
        if promotion is None:
            raise ControlPlaneError(f"promotion {self.id} no longer exists")
        return promotion

    # -- the whole run -------------------------------------------------------------------------

    def execute(self) -> None:
        with self._tx(read_only=True) as session:
            promotion = self._get(session)
            if PromotionState(promotion.state).finished:
                return
            failing = promotion.progress.get("failing")
            done = {s["name"] for s in promotion.steps if s["state"] in ("succeeded", "skipped")}
        if failing is not None:  # stopped while rolling back: finish the roll-back
            self._fail(failing["step"], failing["error"])
            return
        steps: dict[str, Callable[[], str | None]] = {
            "register": self._register, "deploy_candidate": self._deploy_candidate,
            "gates_candidate": self._gates_candidate, "swap": self._swap,
            "gates_served": self._gates_served, "remove_candidate": self._remove_candidate}
        for name in STEPS:
            if name in done:
                continue
            if self.driver.stopping.is_set():
                raise Stopping
            self._set_step(name, "running")
            try:
                detail = steps[name]()
            except (StepFailed, ControlPlaneError) as exc:
                self._set_step(name, "failed", exc.message)
                if name == "remove_candidate":
                    # The alias serves the new version and its gates passed: the promotion
                    # stands; the candidate's leftovers are named in the error.
                    self._finish(PromotionState.SUCCEEDED,
                                 error=f"the candidate was not removed: {exc.message}")
                    return
                self._fail(name, exc.message)
                return
            except Stopping:
                raise
            except Exception as exc:
                log.exception("promotion %s: step %s failed", self.id, name)
                message = f"internal error: {type(exc).__name__}: {exc}"
                self._set_step(name, "failed", message)
                self._fail(name, message)
                return
            self._set_step(name, "succeeded", detail)
        self._finish(PromotionState.SUCCEEDED)

    def _fail(self, step: str, error: str) -> None:
        """Put the previous version back where the promotion moved the alias, remove the
        candidate, end FAILED. Recorded first, so a restart finishes the roll-back."""
        with self._tx() as session:
            promotion = self._get(session)
            promotion.progress = {**promotion.progress, "failing": {"step": step,
                                                                    "error": error}}
        notes = []
        try:
            restored = self._restore_alias()
            if restored:
                notes.append(restored)
        except (StepFailed, ControlPlaneError) as exc:
            notes.append(f"putting the previous version back failed: {exc.message}")
        try:
            self._remove_candidate()
        except (StepFailed, ControlPlaneError) as exc:
            notes.append(f"the candidate was not removed: {exc.message}")
        self._finish(PromotionState.FAILED, failed_step=step,
                     error="; ".join([f"{step}: {error}", *notes]))

    def _finish(self, state: PromotionState, failed_step: str | None = None,
                error: str | None = None) -> None:
        with self._tx() as session:
            repository = PromotionRepository(session)
            now = utcnow()
            if not repository.transition(self.id, [PromotionState.RUNNING], state,
                                         failed_step=failed_step, error=error, finished_at=now,
                                         updated_at=now):
                log.warning("promotion %s was ended elsewhere", self.id)
                return
            promotion = self._get(session)
            body = PromotionOut.of(promotion).model_dump(mode="json")
            audit.record(session, self.actor, f"promotion.{state.value}", "model", self.model,
                         after={"promotion": self.id, "version": promotion.version,
                                "alias": self.alias, "failed_step": failed_step,
                                "error": error})
            if self.driver.publish is not None:
                self.driver.publish(session, f"promotion.{state.value}", body)
        self.driver.after_commit()

    def _set_step(self, name: str, state: str, detail: str | None = None) -> None:
        with self._tx() as session:
            promotion = self._get(session)
            now = utcnow().isoformat()
            steps = []
            for step in promotion.steps:
                if step["name"] == name:
                    step = {**step, "state": state, "detail": detail}
                    if state == "running":
                        step["started_at"], step["finished_at"] = now, None
                    else:
                        step["finished_at"] = now
                steps.append(step)
            promotion.steps = steps
            promotion.updated_at = utcnow()

    def _progress(self, **values: Any) -> None:
        with self._tx() as session:
            promotion = self._get(session)
            promotion.progress = {**promotion.progress, **values}

    def _version(self) -> int:
        number = self._version_or_none()
        assert number is not None, "the register step sets the version"
        return number

    def _version_or_none(self) -> int | None:
        with self._tx(read_only=True) as session:
            return self._get(session).version

    def _operations_or_fail(self, operation_ids: Sequence[str], what: str) -> None:
        failed = [(i, e) for i, status, e in self.driver.await_operations(operation_ids)
                  if status != OperationStatus.SUCCEEDED.value]
        if failed:
            raise StepFailed(f"{what}: " + "; ".join(f"{error} (operation {i})"
                                                     for i, error in failed))

    # -- the steps -----------------------------------------------------------------------------

    def _register(self) -> str:
        validate = None
        with self._tx() as session:
            promotion = self._get(session)
            if promotion.version is None:
                manifest = VersionManifest.model_validate(promotion.manifest)
                version = registry.register_version(
                    session, self.actor, self.model, manifest.version_create(),
                    self.driver.source_roots, config_builder.check)
                promotion.version = version.number
            version = registry.get_version(session, self.model, promotion.version)
            number = version.number
            if version.state == VersionState.ARCHIVED:
                raise StepFailed(f"version {number} is archived")
            if version.state == VersionState.REGISTERED:
                validate = validation.start(session, self.actor, self.model, number).id
        if validate is not None:
            self._operations_or_fail([validate], f"version {number} did not pass validation")
            return f"version {number} registered and validated"
        return f"version {number} is validated"

    def _candidate_alias(self) -> str:
        return f"candidate-{self.id[:12]}"

    def _deploy_candidate(self) -> str:
        number, candidate = self._version(), self._candidate_alias()
        with self._tx() as session:
            model = registry.get_model(session, self.model, for_update=True)
            if aliases.find_alias(session, model, candidate) is None:
                alias_moves.move_alias(session, self.actor, self.model, candidate, number)
            started = [deployments.apply(session, self.actor, self.model, candidate, node)[1].id
                       for node in self.nodes]
            promotion = self._get(session)
            promotion.progress = {**promotion.progress, "candidate": candidate}
        self._operations_or_fail(started, f"version {number} did not deploy as a candidate")
        return (f"version {number} serves as '{triton_model_name(self.model, candidate)}' on "
                f"{', '.join(self.nodes)}")

    def _targets(self, alias: str) -> list[_Target]:
        with self._tx(read_only=True) as session:
            model = registry.get_model(session, self.model)
            return [_Target(d.node.name, d.node.grpc_url, d.triton_name)
                    for d in DeploymentRepository(session).of_alias(model.id, alias)
                    if d.state == DeploymentState.READY]

    def _gates(self) -> Gates:
        number = self._version()
        with self._tx(read_only=True) as session:
            return Gates.model_validate(registry.get_version(session, self.model, number).gates)

    def _record_gates(self, phase: str, results: list[dict[str, Any]]) -> None:
        with self._tx() as session:
            promotion = self._get(session)
            promotion.gate_results = [r for r in promotion.gate_results
                                      if r["phase"] != phase] + results

    def _smoke(self, gates: Gates, phase: str, targets: Sequence[_Target]
               ) -> list[dict[str, Any]]:
        results = []
        for index, gate in enumerate(gates.smoke):
            for target in targets:
                seen = self._observe(target, gate.prompt, gate.max_tokens, gate.temperature)
                results.append(gate_checks.smoke_result(index, gate, phase, target.node, seen))
        return results

    def _judge(self, results: list[dict[str, Any]]) -> str:
        failed = [r for r in results if r["passed"] is False]
        if failed:
            raise StepFailed("; ".join(
                f"gate '{r['gate']}' failed on {r['actual'].get('node')}: {r['reason']}" +
                (f" (prompt {r['prompt']!r}, output {r['actual'].get('text')!r})"
                 if r["kind"] == "smoke" else "") for r in failed))
        ran = [r for r in results if r["passed"]]
        return f"{len(ran)} gate check(s) passed" if ran else "no gates defined"

    def _observe(self, target: _Target, prompt: str, max_tokens: int, temperature: float
                 ) -> Observation:
        if self.driver.stopping.is_set():
            raise Stopping
        return self.driver.observe(target.grpc_url, target.triton_name, prompt, max_tokens,
                                   temperature)

    def _gates_candidate(self) -> str:
        gates, number = self._gates(), self._version()
        candidates = self._targets(self._candidate_alias())
        if len(candidates) < len(self.nodes):
            raise StepFailed("the candidate is not ready on every node")
        results = self._smoke(gates, "candidate", candidates)
        if gates.compare is not None:
            served = {t.node: t for t in self._targets(self.alias)}
            pair = next(((c, served[c.node]) for c in candidates if c.node in served), None)
            if self.from_version is None or pair is None:
                results.append(gate_checks.skipped_comparison(
                    gates.compare, "skipped: no version serves the alias yet"))
            else:
                results.append(self._compare(gates, pair[0], pair[1], number))
        self._record_gates("candidate", results)
        return self._judge(results)

    def _compare(self, gates: Gates, candidate: _Target, served: _Target, number: int
                 ) -> dict[str, Any]:
        spec = gates.compare
        assert spec is not None
        current: list[Observation] = []
        new: list[Observation] = []
        for prompt in spec.prompts:
            for _ in range(spec.rounds):
                # Alternating, so load on the node weighs on both alike.
                current.append(self._observe(served, prompt, spec.max_tokens, 0.0))
                new.append(self._observe(candidate, prompt, spec.max_tokens, 0.0))
        assert self.from_version is not None
        return gate_checks.comparison_result(spec, candidate.node, current, new,
                                             self.from_version, number)

    def _swap(self) -> str:
        number = self._version()
        started: list[str] = []
        with self._tx() as session:
            model = registry.get_model(session, self.model, for_update=True)
            alias = aliases.find_alias(session, model, self.alias)
            if alias is not None and alias.version.number == number:
                if not self._get(session).progress.get("fresh_deployment"):
                    return f"'{self.alias}' already pointed at version {number}"
            else:
                outcome = alias_moves.move_alias(session, self.actor, self.model, self.alias,
                                                 number)
                if isinstance(outcome, SwapStarted):
                    started = [outcome.operation.id]
            if not started:
                # The alias ran nowhere: it now points at the version; serve it on the nodes.
                promotion = self._get(session)
                promotion.progress = {**promotion.progress, "fresh_deployment": True}
                started = [deployments.apply(session, self.actor, self.model, self.alias,
                                             node)[1].id for node in self.nodes]
        self._operations_or_fail(started, f"'{self.alias}' was not moved to version {number}")
        return f"'{self.alias}' serves version {number}"

    def _gates_served(self) -> str:
        served = self._targets(self.alias)
        results = self._smoke(self._gates(), "served", served)
        self._record_gates("served", results)
        return self._judge(results)

    def _remove_candidate(self) -> str:
        candidate = self._candidate_alias()
        with self._tx() as session:
            model = registry.get_model(session, self.model, for_update=True)
            if aliases.find_alias(session, model, candidate) is None:
                return "no candidate to remove"
            started = [deployments.remove(session, self.actor, self.model, candidate,
                                          d.node.name)[1].id
                       for d in DeploymentRepository(session).of_alias(model.id, candidate)]
        self._operations_or_fail(started, "the candidate did not unload")
        with self._tx() as session:
            alias_moves.delete_alias(session, self.actor, self.model, candidate)
        return f"'{triton_model_name(self.model, candidate)}' unloaded and its alias deleted"

    def _restore_alias(self) -> str | None:
        """The alias back on the version it had before, if the promotion moved it."""
        number = self._version_or_none()
        with self._tx() as session:
            model = registry.get_model(session, self.model, for_update=True)
            alias = aliases.find_alias(session, model, self.alias)
            promotion = self._get(session)
            fresh = bool(promotion.progress.get("fresh_deployment"))
            if alias is None or number is None or alias.version.number != number or \
                    self.from_version == number:
                return None
            removals: list[str] = []
            swap: list[str] = []
            if fresh:
                # It ran nowhere before the promotion: take down what the promotion started.
                removals = [deployments.remove(session, self.actor, self.model, self.alias,
                                               d.node.name)[1].id
                            for d in DeploymentRepository(session).of_alias(model.id,
                                                                            self.alias)]
            elif self.from_version is not None:
                outcome = alias_moves.move_alias(session, self.actor, self.model, self.alias,
                                                 self.from_version, purpose="rollback")
                if isinstance(outcome, SwapStarted):
                    swap = [outcome.operation.id]
        if removals:
            self._operations_or_fail(removals, f"'{self.alias}' was not taken down again")
            with self._tx() as session:
                if self.from_version is None:
                    alias_moves.delete_alias(session, self.actor, self.model, self.alias)
                    return f"'{self.alias}' removed again: no version served it before"
                alias_moves.move_alias(session, self.actor, self.model, self.alias,
                                       self.from_version, purpose="rollback")
            return f"'{self.alias}' back on version {self.from_version}"
        if swap:
            self._operations_or_fail(swap, f"swapping '{self.alias}' back failed")
        return f"'{self.alias}' swapped back to version {self.from_version}"
