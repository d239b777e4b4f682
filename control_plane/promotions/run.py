"""One promotion being carried out: its steps run in order, each recorded with start, end and
detail, each in transactions of its own, so a control plane that stopped mid-promotion resumes
it at its next start. What the steps are is the subclass's: a version's (``version_run``) or a
LoRA adapter's (``adapter_run``); the gates are measured and judged here for both."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from control_plane.auth import audit
from control_plane.auth.scopes import Actor, Scope
from control_plane.db import transaction, utcnow
from control_plane.deployments.orm import DeploymentState
from control_plane.deployments.repository import DeploymentRepository
from control_plane.errors import ControlPlaneError
from control_plane.operations.orm import OperationStatus
from control_plane.promotions import gate_checks
from control_plane.promotions.gate_checks import Observation
from control_plane.promotions.orm import Promotion, PromotionState
from control_plane.promotions.repository import PromotionRepository
from control_plane.promotions.schemas import PromotionOut
from control_plane.registry import service as registry
from control_plane.registry.gates import Gates

if TYPE_CHECKING:
    from control_plane.promotions.driver import PromotionDriver

log = logging.getLogger(__name__)


class Stopping(Exception):
    """The control plane is shutting down: the promotion stays running and resumes at the next
    start."""


class StepFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Target:
    """Where a gate's prompts go: a Triton model on a node, through an adapter when named."""

    node: str
    grpc_url: str
    triton_name: str
    lora_name: str | None = None


class PromotionRun:
    """The steps' order, recording and failure handling shared by every kind of promotion."""

    # A step that only tidies up: when it fails the promotion still stands.
    cleanup_step: str | None = None

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

    # -- what a kind of promotion defines ----------------------------------------------------

    def steps(self) -> dict[str, Callable[[], str | None]]:
        """Every step by name, in the order they run."""
        raise NotImplementedError

    def roll_back(self) -> list[str]:
        """Undo what the steps did; notes on what could not be undone."""
        raise NotImplementedError

    def gates(self) -> Gates:
        raise NotImplementedError

    # -- the whole run -------------------------------------------------------------------------

    def _tx(self, read_only: bool = False) -> Any:
        return transaction(self.driver.session_factory, read_only=read_only)

    def _get(self, session: Session) -> Promotion:
        promotion = PromotionRepository(session).get(self.id)
        if promotion is None:
            raise ControlPlaneError(f"promotion {self.id} no longer exists")
        return promotion

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
        for name, step in self.steps().items():
            if name in done:
                continue
            if self.driver.stopping.is_set():
                raise Stopping
            self._set_step(name, "running")
            try:
                detail = step()
            except (StepFailed, ControlPlaneError) as exc:
                self._set_step(name, "failed", exc.message)
                if name == self.cleanup_step:
                    # What the promotion is for is done and its gates passed: it stands; the
                    # leftovers are named in the error.
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
        """Roll back, end FAILED. Recorded first, so a restart finishes the roll-back."""
        with self._tx() as session:
            promotion = self._get(session)
            promotion.progress = {**promotion.progress, "failing": {"step": step,
                                                                    "error": error}}
        notes = self.roll_back()
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
                                "adapter": promotion.adapter, "alias": self.alias,
                                "failed_step": failed_step, "error": error})
            if self.driver.publish is not None:
                self.driver.publish(session, f"promotion.{state.value}", body)
        self.driver.runner.metrics.promotions.labels(state.value).inc()
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

    # -- gates ---------------------------------------------------------------------------------

    def _targets(self, alias: str) -> list[Target]:
        with self._tx(read_only=True) as session:
            model = registry.get_model(session, self.model)
            return [Target(d.node.name, d.node.grpc_url, d.triton_name)
                    for d in DeploymentRepository(session).of_alias(model.id, alias)
                    if d.state == DeploymentState.READY]

    def _record_gates(self, phase: str, results: list[dict[str, Any]]) -> None:
        with self._tx() as session:
            promotion = self._get(session)
            promotion.gate_results = [r for r in promotion.gate_results
                                      if r["phase"] != phase] + results
        for result in results:
            outcome = {True: "passed", False: "failed"}.get(result["passed"], "skipped")
            self.driver.runner.metrics.gate_checks.labels(result["kind"], phase, outcome).inc()

    def _smoke(self, gates: Gates, phase: str, targets: Sequence[Target]
               ) -> list[dict[str, Any]]:
        results = []
        for index, gate in enumerate(gates.smoke):
            for target in targets:
                seen = self._observe(target, gate.prompt, gate.max_tokens, gate.temperature)
                results.append(gate_checks.smoke_result(index, gate, phase, target.node, seen))
        return results

    def _compare(self, gates: Gates, candidate: Target, served: Target, current_version: int,
                 candidate_version: int) -> dict[str, Any]:
        spec = gates.compare
        assert spec is not None
        current: list[Observation] = []
        new: list[Observation] = []
        for prompt in spec.prompts:
            for _ in range(spec.rounds):
                # Alternating, so load on the node weighs on both alike.
                current.append(self._observe(served, prompt, spec.max_tokens, 0.0))
                new.append(self._observe(candidate, prompt, spec.max_tokens, 0.0))
        return gate_checks.comparison_result(spec, candidate.node, current, new,
                                             current_version, candidate_version,
                                             candidate.lora_name)

    def _judge(self, results: list[dict[str, Any]]) -> str:
        failed = [r for r in results if r["passed"] is False]
        if failed:
            raise StepFailed("; ".join(
                f"gate '{r['gate']}' failed on {r['actual'].get('node')}: {r['reason']}" +
                (f" (prompt {r['prompt']!r}, output {r['actual'].get('text')!r})"
                 if r["kind"] == "smoke" else "") for r in failed))
        ran = [r for r in results if r["passed"]]
        return f"{len(ran)} gate check(s) passed" if ran else "no gates defined"

    def _observe(self, target: Target, prompt: str, max_tokens: int, temperature: float
                 ) -> Observation:
        if self.driver.stopping.is_set():
            raise Stopping
        return self.driver.observe(target.grpc_url, target.triton_name, prompt, max_tokens,
                                   temperature, target.lora_name)
