"""Carrying out the evacuation plan at the end of each reconcile pass (on the leader).

It reads only what is already known (the GPU monitor's latest readings, the database), decides
with ``plan_evacuations``, and acts through the deployment lifecycle: ``deployments.apply`` for a
replacement on the node placement picks among those with healthy room, ``deployments.remove``
(drain first) for the engine on the faulty GPU once the replacement is READY. Where no node has
room it says so, on the deployment's ``error``, in ``GET /api/v1/evacuations`` and in
``llmcp_gpu_evacuations{state="no_capacity"}``, and tries again at the next pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from sqlalchemy.orm import Session, sessionmaker

from control_plane.auth.scopes import Actor, Scope
from control_plane.db import transaction
from control_plane.deployments import service as deployments
from control_plane.deployments.orm import Deployment, DeploymentState, NodeHealth
from control_plane.deployments.repository import DeploymentRepository
from control_plane.errors import ControlPlaneError
from control_plane.evacuation.orm import GpuEvacuation
from control_plane.evacuation.plan import (
    EngineOnGpus,
    Evacuate,
    Finish,
    Forget,
    MoveUnderWay,
    Step,
    Wait,
    plan_evacuations,
)
from control_plane.evacuation.repository import EvacuationRepository
from control_plane.gpus.monitor import NodeReadings
from control_plane.metrics.registry import ControlPlaneMetrics
from control_plane.nodes.orm import TritonNode
from control_plane.nodes.repository import NodeRepository
from control_plane.placement.model import NodeView, Refusal
from control_plane.registry.aliases import get_alias
from control_plane.reservations.placer import Placer, refusal_text

log = logging.getLogger(__name__)
ACTOR = Actor(name="gpu-evacuator", scope=Scope.ADMIN)


class Evacuator:
    """``name`` and ``__call__`` make it one of the reconciler's fleet steps."""

    name = "gpu_evacuation"

    def __init__(self, session_factory: sessionmaker[Session], placer: Placer,
                 readings: Callable[[], Mapping[str, NodeReadings]],
                 submit: Callable[[str], object], metrics: ControlPlaneMetrics | None = None
                 ) -> None:
        self.session_factory = session_factory
        self.placer = placer
        self.readings = readings
        self.submit = submit
        self.metrics = metrics or ControlPlaneMetrics()

    def __call__(self) -> list[Step]:
        """One round: plan from what is known now, then carry out each step on its own."""
        readings = dict(self.readings())
        with transaction(self.session_factory, read_only=True) as session:
            busy = deployments.busy_deployment_ids(session)
            repository = EvacuationRepository(session)
            engines = [EngineOnGpus(d.id, d.node.name, tuple(uuids),
                                    DeploymentState(d.state), d.id in busy)
                       for d, uuids in repository.booked_gpus().values()]
            moves = {row.deployment_id: _move(row) for row in repository.all()}
        steps = plan_evacuations(engines, readings, moves)
        for step in steps:
            try:
                self._carry_out(step, readings)
            except ControlPlaneError as exc:
                # An operation raced in, the alias went: the next pass looks again.
                log.warning("GPU evacuation of deployment %s: %s", step.deployment_id,
                            exc.message)
        with transaction(self.session_factory, read_only=True) as session:
            rows = EvacuationRepository(session).all()
            moving = sum(1 for row in rows if row.replacement_id is not None)
        self.metrics.gpu_evacuations.labels("moving").set(moving)
        self.metrics.gpu_evacuations.labels("no_capacity").set(len(rows) - moving)
        return steps

    def _carry_out(self, step: Step, readings: Mapping[str, NodeReadings]) -> None:
        operation_id = None
        with transaction(self.session_factory) as session:
            repository = EvacuationRepository(session)
            row = repository.of_deployment(step.deployment_id)
            deployment = DeploymentRepository(session).get(step.deployment_id)
            if isinstance(step, Forget):
                if row is not None:
                    log.info("GPU evacuation of deployment %s ends: %s", step.deployment_id,
                             step.reason)
                    repository.delete(row)
                return
            if deployment is None:
                return
            if isinstance(step, Wait):
                if row is not None:
                    _note(session, row, deployment, row.faults, step.detail)
                return
            if isinstance(step, Finish):
                _, operation = deployments.remove(session, ACTOR, deployment.model.name,
                                                  deployment.alias, deployment.node.name)
                operation_id = operation.id
                log.warning("GPU evacuation: %s/%s now serves on node %s; draining it on "
                            "node %s (%s)", deployment.model.name, deployment.alias,
                            step.replacement_node, deployment.node.name,
                            row.faults if row else "")
                if row is not None:
                    repository.delete(row)
            else:
                operation_id = self._evacuate(session, step, row, deployment, readings)
        if operation_id is not None:
            self.submit(operation_id)

    def _evacuate(self, session: Session, step: Evacuate, row: GpuEvacuation | None,
                  deployment: Deployment, readings: Mapping[str, NodeReadings]) -> str | None:
        """Deploy the alias where placement finds healthy room, or record why nowhere."""
        model, alias = deployment.model.name, deployment.alias
        if row is None:
            row = GpuEvacuation(deployment_id=deployment.id, faults=step.faults, detail="")
            EvacuationRepository(session).add(row)
        candidates = _candidates(session, deployment)
        if not candidates:
            _note(session, row, deployment, step.faults, (
                "no healthy capacity to move it to: every other node not seen down serves "
                "the alias already or has no GPU inventory; register a node with GPUs or "
                "deploy the alias elsewhere"))
            return None
        version = get_alias(session, model, alias).version
        views = {node.name: _view(node, readings) for node in candidates}
        decision = self.placer.decide(session, version, candidates,
                                      f"{model}/{alias}:evacuation", views=views)
        if isinstance(decision.outcome, Refusal):
            _note(session, row, deployment, step.faults,
                  f"no healthy capacity to move it to: {refusal_text(decision.outcome)}")
            return None
        target = decision.outcome.node
        replacement, operation = deployments.apply(session, ACTOR, model, alias, target)
        row.replacement_id = replacement.id
        _note(session, row, deployment, step.faults, f"moving to node {target}: loading "
              f"there (operation {operation.id}); this engine drains once that one is READY")
        log.warning("GPU evacuation: %s/%s on node %s (%s): a replacement loads on node %s",
                    model, alias, deployment.node.name, step.faults, target)
        return operation.id


def _move(row: GpuEvacuation) -> MoveUnderWay:
    replacement = row.replacement
    if row.replacement_id is None or replacement is None:
        return MoveUnderWay(row.deployment_id)
    return MoveUnderWay(row.deployment_id, DeploymentState(replacement.state),
                        replacement.node.name, replacement.wanted, replacement.error)


def _candidates(session: Session, deployment: Deployment) -> list[TritonNode]:
    """Nodes with GPUs, in service (not cordoned) and not seen down, that do not serve the alias
    yet."""
    repository = DeploymentRepository(session)
    taken = {d.node_id for d in repository.of_alias(deployment.model_id, deployment.alias)}
    nodes = []
    for node in NodeRepository(session).in_service():
        status = repository.node_health(node.id)
        if node.id in taken or node.gpu_inventory is None or \
                (status is not None and status.health != NodeHealth.UP):
            continue
        nodes.append(node)
    return nodes


def _view(node: TritonNode, readings: Mapping[str, NodeReadings]) -> NodeView:
    """The node as the GPU monitor last read it: no inventory is read inside the transaction."""
    latest = readings.get(node.name)
    if latest is None:
        return NodeView(node.name, error="the GPU monitor has not read this node yet")
    return NodeView(node.name, latest.gpus, latest.error,
                    excluded_gpus=frozenset(node.excluded_gpus))


def _note(session: Session, row: GpuEvacuation, deployment: Deployment, faults: str,
          detail: str) -> None:
    """Keep the move's latest word on its row and on the deployment (``error``), written only
    when it changed."""
    if row.detail != detail or row.faults != faults:
        if row.detail != detail:
            log.warning("GPU evacuation of %s/%s on node %s: %s", deployment.model.name,
                        deployment.alias, deployment.node.name, detail)
        row.faults, row.detail = faults, detail
        session.flush()
    error = f"GPU fault: {faults}; {detail}"
    if deployment.error != error:
        DeploymentRepository(session).set_fields(deployment, error=error)
