"""Adapters on deployments: want one loaded, want it unloaded, and what is wanted where.

Each records what is wanted and starts an operation in the caller's transaction; the operation's
work (``work.py``) then sends the backend its control request. A deployment serves one version
on one node, so its adapters are that version's, loaded into that node's engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from control_plane.adapters.orm import AdapterState, DeploymentAdapter
from control_plane.adapters.repository import AdapterRepository, DeploymentAdapterRepository
from control_plane.auth import audit
from control_plane.auth.scopes import Actor
from control_plane.deployments.orm import Deployment, DeploymentState
from control_plane.deployments.repository import DeploymentRepository
from control_plane.deployments.service import busy_deployment_ids
from control_plane.errors import (
    AdapterNotFound,
    AdapterNotOnDeployment,
    AdapterOfAnotherVersion,
    DeploymentIdNotFound,
    DeploymentNotReady,
    OperationInProgress,
)
from control_plane.operations import service as operations
from control_plane.operations.orm import Operation
from control_plane.operations.repository import OperationRepository
from control_plane.registry.repository import VersionRepository
from control_plane.registry.service import get_model

LOAD = "adapter.load"
UNLOAD = "adapter.unload"


def deployment_label(deployment: Deployment) -> str:
    return f"{deployment.id} ('{deployment.triton_name}' on node '{deployment.node.name}')"


def target_of(deployment: Deployment, name: str) -> str:
    return f"{deployment.model.name}/{deployment.alias}@{deployment.node.name}/{name}"


def snapshot(row: DeploymentAdapter) -> dict[str, Any]:
    return {"deployment_id": row.deployment_id, "adapter": row.adapter.name,
            "version": row.adapter.version.number, "state": row.state, "routed": row.routed}


LOCK_PREFIX = "deployment_adapter:"


def busy_row_ids(session: Session) -> set[int]:
    """Wanted adapters an unfinished operation is working on; the reconciler leaves them alone."""
    return {int(resource.removeprefix(LOCK_PREFIX))
            for resource in OperationRepository(session).locked(LOCK_PREFIX)}


def get_deployment(session: Session, deployment_id: int) -> Deployment:
    deployment = DeploymentRepository(session).get(deployment_id)
    if deployment is None:
        raise DeploymentIdNotFound(deployment_id)
    return deployment


def list_wanted(session: Session, deployment_id: int) -> Sequence[DeploymentAdapter]:
    return DeploymentAdapterRepository(session).of_deployment(
        get_deployment(session, deployment_id).id)


def _refuse_if_busy(session: Session, deployment: Deployment, row: DeploymentAdapter | None,
                    what: str) -> None:
    if deployment.id in busy_deployment_ids(session) or \
            (row is not None and row.id in busy_row_ids(session)):
        raise OperationInProgress(f"{what}: an operation is still working on deployment "
                                  f"{deployment_label(deployment)}; wait for it (GET "
                                  "/api/v1/operations?status=running) and retry")


def load(session: Session, actor: Actor, deployment_id: int, name: str,
         version: int | None = None, routed: bool = True) -> tuple[DeploymentAdapter, Operation]:
    """Want adapter ``name`` of the deployment's version loaded there, and start loading it.

    ``routed=False`` (a promotion gating it) keeps a newly wanted adapter out of the routing
    table until ``publish``; one already wanted keeps what it has."""
    deployment = get_deployment(session, deployment_id)
    # Takes turns with deletions of the model's adapters, which lock the model row too.
    model = get_model(session, deployment.model.name, for_update=True)
    label = deployment_label(deployment)
    serving = deployment.serving_version
    if not deployment.wanted or deployment.state != DeploymentState.READY or serving is None:
        raise DeploymentNotReady(f"deployment {label} is {deployment.state}"
                                 f"{'' if deployment.wanted else ' and removed'}; adapters load "
                                 "into a READY deployment's engine: wait for it to be READY "
                                 "(or deploy it again) and retry")
    if version is not None and version != serving:
        raise AdapterOfAnotherVersion(
            f"deployment {label} serves version {serving} of '{model.name}', not version "
            f"{version}: an adapter loads only on the version it is registered under; register "
            f"it under version {serving} (POST /api/v1/models/{model.name}/versions/{serving}/"
            "adapters) to load it here")
    served = VersionRepository(session).get(model.id, serving)
    adapters = AdapterRepository(session)
    adapter = None if served is None else adapters.get(served.id, name)
    if adapter is None:
        others = adapters.versions_with(model.id, name)
        if others:
            raise AdapterOfAnotherVersion(
                f"adapter '{name}' is registered under version(s) "
                f"{', '.join(map(str, others))} of '{model.name}', and deployment {label} "
                f"serves version {serving}; register it under version {serving} (POST "
                f"/api/v1/models/{model.name}/versions/{serving}/adapters) to load it here")
        raise AdapterNotFound(model.name, serving, name)
    rows = DeploymentAdapterRepository(session)
    row = rows.find(deployment.id, name)
    _refuse_if_busy(session, deployment, row, f"loading adapter '{name}'")
    if row is not None and row.adapter_id != adapter.id:
        raise AdapterOfAnotherVersion(
            f"deployment {label} still wants adapter '{name}' of version "
            f"{row.adapter.version.number} ({row.state}); unload it (DELETE "
            f"/api/v1/deployments/{deployment.id}/adapters/{name}) before loading version "
            f"{serving}'s")
    before = None if row is None else snapshot(row)
    if row is None:
        row = DeploymentAdapter(deployment=deployment, adapter=adapter,
                                state=AdapterState.LOADING.value, routed=routed,
                                updated_by=actor.name)
        rows.add(row)
    elif row.state != AdapterState.LOADED:
        # A loaded one stays loaded (and routed) while the operation confirms it: the backend
        # answers a load of what it holds without doing anything.
        rows.set_fields(row, state=AdapterState.LOADING.value, error=None, updated_by=actor.name)
    target = target_of(deployment, name)
    audit.record(session, actor, LOAD, "deployment_adapter", target, before=before,
                 after=snapshot(row))
    operation = operations.start(session, actor, LOAD, "deployment_adapter", target, {
        "deployment_adapter_id": row.id, "deployment_id": deployment.id, "adapter": name,
        "version": serving}, locks=[f"{LOCK_PREFIX}{row.id}"])
    return row, operation


def unload(session: Session, actor: Actor, deployment_id: int, name: str
           ) -> tuple[DeploymentAdapter, Operation]:
    """Want adapter ``name`` gone from the deployment, and start unloading it."""
    deployment = get_deployment(session, deployment_id)
    get_model(session, deployment.model.name, for_update=True)
    rows = DeploymentAdapterRepository(session)
    row = rows.find(deployment.id, name)
    if row is None:
        raise AdapterNotOnDeployment(deployment_label(deployment), name)
    _refuse_if_busy(session, deployment, row, f"unloading adapter '{name}'")
    before = snapshot(row)
    rows.set_fields(row, state=AdapterState.UNLOADING.value, error=None, updated_by=actor.name)
    target = target_of(deployment, name)
    audit.record(session, actor, UNLOAD, "deployment_adapter", target, before=before,
                 after=snapshot(row))
    operation = operations.start(session, actor, UNLOAD, "deployment_adapter", target, {
        "deployment_adapter_id": row.id, "deployment_id": deployment.id, "adapter": name},
        locks=[f"{LOCK_PREFIX}{row.id}"])
    return row, operation


def publish(session: Session, actor: Actor, deployment_id: int, name: str) -> bool:
    """Put a wanted adapter into the routing table (a promotion's gates passed); False when it
    was routed already."""
    deployment = get_deployment(session, deployment_id)
    rows = DeploymentAdapterRepository(session)
    row = rows.find(deployment.id, name)
    if row is None:
        raise AdapterNotOnDeployment(deployment_label(deployment), name)
    if row.routed:
        return False
    before = snapshot(row)
    rows.set_fields(row, routed=True, updated_by=actor.name)
    audit.record(session, actor, "adapter.publish", "deployment_adapter",
                 target_of(deployment, name), before=before, after=snapshot(row))
    return True
