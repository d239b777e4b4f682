"""Deployment use cases behind the API: ask for a deployment, its removal, or a version swap.

Each records what is wanted and starts an operation in the caller's transaction; the operation's
work (``work.py``) then drives the nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from control_plane.auth import audit
from control_plane.auth.scopes import Actor
from control_plane.deployments.naming import triton_model_name
from control_plane.deployments.orm import Deployment, DeploymentState
from control_plane.deployments.repository import DeploymentRepository
from control_plane.errors import DeploymentNotFound, InUseByDeployments, OperationInProgress
from control_plane.nodes.service import get_node
from control_plane.operations import service as operations
from control_plane.operations.orm import Operation
from control_plane.operations.repository import OperationRepository
from control_plane.registry.aliases import get_alias
from control_plane.registry.service import get_model

APPLY = "deployment.apply"
REMOVE = "deployment.remove"
SWAP = "alias.swap"


def snapshot(deployment: Deployment) -> dict[str, Any]:
    return {"model": deployment.model.name, "alias": deployment.alias,
            "node": deployment.node.name, "triton_name": deployment.triton_name,
            "wanted": deployment.wanted, "state": deployment.state,
            "serving_version": deployment.serving_version}


LOCK_PREFIX = "deployment:"


def deployment_locks(deployment_ids: Sequence[int]) -> list[str]:
    """The operation locks of deployments: one unfinished operation at a time works on each."""
    return [f"{LOCK_PREFIX}{deployment_id}" for deployment_id in deployment_ids]


def busy_deployment_ids(session: Session) -> set[int]:
    """Deployments an unfinished operation is working on; the reconciler leaves them alone."""
    return {int(resource.removeprefix(LOCK_PREFIX))
            for resource in OperationRepository(session).locked(LOCK_PREFIX)}


def _refuse_if_busy(session: Session, deployments: Sequence[Deployment], what: str) -> None:
    busy = busy_deployment_ids(session)
    taken = [d for d in deployments if d.id in busy]
    if taken:
        names = ", ".join(f"'{d.triton_name}' on '{d.node.name}'" for d in taken)
        raise OperationInProgress(f"{what}: an operation is still working on {names}; wait for "
                                  "it (GET /api/v1/operations?status=running) and retry")


def get_deployment(session: Session, model_name: str, alias_name: str, node_name: str
                   ) -> Deployment:
    model = get_model(session, model_name)
    node = get_node(session, node_name)
    deployment = DeploymentRepository(session).find(model.id, alias_name, node.id)
    if deployment is None:
        raise DeploymentNotFound(model_name, alias_name, node_name)
    return deployment


def list_deployments(session: Session, model_name: str | None, node_name: str | None,
                     state: DeploymentState | None, limit: int, offset: int
                     ) -> tuple[Sequence[Deployment], int]:
    model_id = get_model(session, model_name).id if model_name else None
    node_id = get_node(session, node_name).id if node_name else None
    return DeploymentRepository(session).list(model_id, node_id, state, limit, offset)


def apply(session: Session, actor: Actor, model_name: str, alias_name: str, node_name: str
          ) -> tuple[Deployment, Operation]:
    """Want ``alias_name`` of ``model_name`` served on ``node_name`` (again, if it was removed
    or failed) and start loading it."""
    model = get_model(session, model_name, for_update=True)
    alias = get_alias(session, model_name, alias_name)
    node = get_node(session, node_name)
    repository = DeploymentRepository(session)
    deployment = repository.find(model.id, alias_name, node.id)
    before = None if deployment is None else snapshot(deployment)
    if deployment is None:
        deployment = Deployment(model_id=model.id, alias=alias_name, node_id=node.id,
                                triton_name=triton_model_name(model_name, alias_name),
                                updated_by=actor.name)
        repository.add(deployment)
    else:
        _refuse_if_busy(session, [deployment], f"deploying '{deployment.triton_name}'")
        repository.set_fields(deployment, wanted=True, updated_by=actor.name)
    target = f"{model_name}/{alias_name}@{node_name}"
    audit.record(session, actor, "deployment.apply", "deployment", target, before=before,
                 after=snapshot(deployment))
    operation = operations.start(session, actor, APPLY, "deployment", target, {
        "deployment_ids": [deployment.id], "version": alias.version.number},
        locks=deployment_locks([deployment.id]))
    return deployment, operation


def remove(session: Session, actor: Actor, model_name: str, alias_name: str, node_name: str
           ) -> tuple[Deployment, Operation]:
    """Stop serving the alias on the node: drain, unload, keep the row as UNLOADED."""
    get_model(session, model_name, for_update=True)
    deployment = get_deployment(session, model_name, alias_name, node_name)
    _refuse_if_busy(session, [deployment], f"removing '{deployment.triton_name}'")
    before = snapshot(deployment)
    DeploymentRepository(session).set_fields(deployment, wanted=False, updated_by=actor.name)
    target = f"{model_name}/{alias_name}@{node_name}"
    audit.record(session, actor, "deployment.remove", "deployment", target, before=before,
                 after=snapshot(deployment))
    operation = operations.start(session, actor, REMOVE, "deployment", target,
                                 {"deployment_ids": [deployment.id]},
                                 locks=deployment_locks([deployment.id]))
    return deployment, operation


def forget_unloaded_or_refuse(session: Session, deployments: Sequence[Deployment], what: str
                              ) -> None:
    """Before an alias or node goes: refuse while something of it is deployed (or still being
    removed); deployments that ended UNLOADED are deleted with it (the audit log keeps them)."""
    live = [d for d in deployments
            if d.wanted or d.state != DeploymentState.UNLOADED.value]
    if live:
        names = ", ".join(f"'{d.model.name}/{d.alias}' on '{d.node.name}' ({d.state})"
                          for d in live)
        raise InUseByDeployments(f"{what} is deployed: {names}; remove the deployments (DELETE "
                                 "/api/v1/models/<m>/aliases/<a>/deployments/<node>) first")
    repository = DeploymentRepository(session)
    for deployment in deployments:
        repository.delete(deployment)


def check_alias_removable(session: Session, model_name: str, alias_name: str) -> None:
    model = get_model(session, model_name)
    forget_unloaded_or_refuse(
        session, DeploymentRepository(session).of_alias(model.id, alias_name, wanted_only=False),
        f"alias '{model_name}/{alias_name}'")


def check_node_removable(session: Session, node_name: str) -> None:
    node = get_node(session, node_name)
    forget_unloaded_or_refuse(session, DeploymentRepository(session).on_node(node.id),
                              f"node '{node_name}'")


def server_versions(session: Session, node_ids: Sequence[int]) -> dict[int, str]:
    """Triton's version on each node as the reconciler last read it (node id → version)."""
    return DeploymentRepository(session).server_versions(node_ids)


def deployed(session: Session, model_id: int, alias_name: str) -> Sequence[Deployment]:
    return DeploymentRepository(session).of_alias(model_id, alias_name)


def start_swap(session: Session, actor: Actor, model_name: str, alias_name: str, number: int,
               deployments: Sequence[Deployment], purpose: str = "move") -> Operation:
    """Start moving a deployed alias to version ``number``: the alias moves only once every
    node serves the new version. ``purpose`` ("move" or "rollback") is kept for its end."""
    _refuse_if_busy(session, deployments, f"moving '{model_name}/{alias_name}'")
    alias = get_alias(session, model_name, alias_name)
    return operations.start(session, actor, SWAP, "alias", f"{model_name}/{alias_name}", {
        "deployment_ids": [d.id for d in deployments], "model": model_name,
        "alias": alias_name, "from_version": alias.version.number, "to_version": number,
        "purpose": purpose}, locks=deployment_locks([d.id for d in deployments]))
