"""The reconciler's adapter step: after a node's deployments are reconciled, in the same pass and
under the node's lock, the adapters wanted on its READY deployments are compared with what each
engine lists, and what is missing is loaded again (after a node or model restart, the engine
starts without them). Deployments without wanted adapters cost no request."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from itertools import groupby
from typing import Any

from control_plane.adapters.actuator import AdapterActuator, AdapterTarget, target_of
from control_plane.adapters.loading import busy_row_ids
from control_plane.adapters.orm import AdapterState
from control_plane.adapters.plan import (
    AdapterAction,
    AdapterPlan,
    CarryAdapter,
    ForgetAdapter,
    LoadAdapter,
    MarkAdapterFailed,
    MarkAdapterLoaded,
    WantedAdapter,
    plan_adapters,
)
from control_plane.adapters.repository import AdapterRepository, DeploymentAdapterRepository
from control_plane.db import transaction
from control_plane.deployments.orm import DeploymentState
from control_plane.deployments.service import busy_deployment_ids
from control_plane.errors import ControlPlaneError
from control_plane.triton.specs import NodeEndpoint

log = logging.getLogger(__name__)
ACTOR = "reconciler"


@dataclass
class _Deployment:
    """One deployment's wanted adapters, as read for this pass."""

    deployment_id: int
    triton_name: str
    serving_version: int  # meaningful once READY (0 before: nothing serves)
    targets: dict[int, AdapterTarget] = field(default_factory=dict)
    busy: set[int] = field(default_factory=set)  # wanted adapters an operation works on
    registered: set[str] = field(default_factory=set)  # names under the serving version
    skipped: str | None = None  # why the engine is not asked
    forget: bool = False  # the deployment was removed: its adapters go with it


class AdapterReconciler:
    """A ``control_plane.deployments.reconciler.NodeStep``."""

    name = "adapters"

    def __init__(self, actuator: AdapterActuator) -> None:
        self.actuator = actuator

    def __call__(self, node_id: int, endpoint: NodeEndpoint) -> tuple[dict[str, Any], list[str]]:
        errors: list[str] = []
        reports = []
        for deployment in self._read(node_id):
            report: dict[str, Any] = {"deployment_id": deployment.deployment_id,
                                      "triton_name": deployment.triton_name}
            reports.append(report)
            if deployment.skipped is not None:
                report["skipped"] = deployment.skipped
                continue
            if deployment.forget:
                plan = AdapterPlan(tuple(ForgetAdapter(t.row_id, t.name)
                                         for t in deployment.targets.values()))
            else:
                try:
                    listing = self.actuator.listing(endpoint, deployment.triton_name)
                except ControlPlaneError as exc:
                    errors.append(exc.message)
                    report["error"] = exc.message
                    continue
                report["engine"] = sorted(listing.names)
                plan = plan_adapters(deployment.serving_version,
                                     [WantedAdapter(t.row_id, t.name, t.version, t.state)
                                      for t in deployment.targets.values()],
                                     listing.names, deployment.busy, deployment.registered)
            report["actions"] = [{"action": type(a).__name__, **asdict(a)} for a in plan.actions]
            report["skipped"] = [list(item) for item in plan.skipped]
            for action in plan.actions:
                try:
                    self._act(action, deployment.targets[action.row_id])
                except ControlPlaneError as exc:
                    errors.append(exc.message)
                    log.warning("reconcile %s on node %s: %s", action, endpoint.name,
                                exc.message)
        return {"deployments": reports}, errors

    def _read(self, node_id: int) -> list[_Deployment]:
        with transaction(self.actuator.session_factory, read_only=True) as session:
            # Busy first, as the deployments' step reads it (see Reconciler._desired).
            busy_deployments = busy_deployment_ids(session)
            busy_rows = busy_row_ids(session)
            found = []
            rows = DeploymentAdapterRepository(session).on_node(node_id)
            for _, group in groupby(rows, key=lambda row: row.deployment_id):
                members = list(group)
                deployment = members[0].deployment
                entry = _Deployment(deployment.id, deployment.triton_name,
                                    deployment.serving_version or 0,
                                    {row.id: target_of(row) for row in members},
                                    {row.id for row in members if row.id in busy_rows})
                if deployment.serving_version is not None and any(
                        row.adapter.version.number != deployment.serving_version
                        for row in members):
                    entry.registered = AdapterRepository(session).names_under(
                        deployment.model_id, deployment.serving_version)
                if not deployment.wanted:
                    entry.forget = True
                elif deployment.id in busy_deployments:
                    entry.skipped = "an operation is working on the deployment"
                elif deployment.state != DeploymentState.READY or \
                        deployment.serving_version is None:
                    entry.skipped = f"the deployment is {deployment.state}"
                found.append(entry)
            return found

    def _act(self, action: AdapterAction, target: AdapterTarget) -> None:
        if isinstance(action, LoadAdapter):
            if target.state == AdapterState.LOADED:
                # Not in the engine: say so while it loads (the routing table drops it).
                self.actuator.mark(target, AdapterState.LOADING, ACTOR)
                target = replace(target, state=AdapterState.LOADING)
            self.actuator.load(target, ACTOR)
        elif isinstance(action, MarkAdapterLoaded):
            self.actuator.mark(target, AdapterState.LOADED, ACTOR)
        elif isinstance(action, MarkAdapterFailed):
            self.actuator.mark(target, AdapterState.FAILED, ACTOR, error=action.reason)
        elif isinstance(action, ForgetAdapter):
            self.actuator.forget(target, target.state)
        elif isinstance(action, CarryAdapter):
            self.actuator.load(self.actuator.carry(target, action.to_version, ACTOR), ACTOR)
        else:
            self.actuator.unload(target, ACTOR)
