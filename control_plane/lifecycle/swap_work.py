"""The work of a swap operation: load the new version on every node of a deployed alias, then
move the alias; if any node fails, the nodes already swapped go back to the old version."""

from __future__ import annotations

import logging
from collections.abc import Callable

from control_plane.auth.scopes import Actor, Scope
from control_plane.db import transaction
from control_plane.deployments.actuator import Actuator
from control_plane.deployments.repository import DeploymentRepository
from control_plane.errors import ControlPlaneError, DeploymentFailed, PreconditionFailed
from control_plane.lifecycle import alias_moves
from control_plane.operations import service as operations
from control_plane.operations.runner import OperationContext

log = logging.getLogger(__name__)


def make_swap(actuator: Actuator, after: Callable[[], None]) -> Callable[[OperationContext], None]:
    def work(context: OperationContext) -> None:
        arguments = context.arguments
        model, alias = arguments["model"], arguments["alias"]
        old, new = arguments["from_version"], arguments["to_version"]
        swapped: list[int] = []
        try:
            for deployment_id in arguments["deployment_ids"]:
                with transaction(context.session_factory) as session:
                    node_id = DeploymentRepository(session).get(deployment_id).node_id  # type: ignore[union-attr]
                with actuator.node_lock(node_id):
                    actuator.load(deployment_id, new, context.created_by)
                swapped.append(deployment_id)
        except ControlPlaneError as exc:
            _roll_back(actuator, swapped, old, context.created_by)
            raise DeploymentFailed(f"'{model}/{alias}' stays on version {old}: {exc.message}"
                                   ) from exc
        finally:
            after()
        with transaction(context.session_factory) as session:
            actor = Actor(name=context.created_by, scope=Scope.WRITE,
                          request_id=context.request_id)
            alias_moves.complete_swap(session, actor, model, alias, new,
                                      rollback=arguments.get("purpose") == "rollback")
            if not operations.succeed(session, context.operation_id,
                                      {"from_version": old, "to_version": new,
                                       "deployments": len(swapped)}):
                raise PreconditionFailed(f"operation {context.operation_id} was ended elsewhere")
        # Once more now that the deployments are no longer busy: the new engines started without
        # adapters, and the reconciler's pass carries over those the new version has too.
        after()

    return work


def _roll_back(actuator: Actuator, swapped: list[int], old: int, actor: str) -> None:
    """Nodes that already serve the new version go back to the old one, so the alias's version
    is what serves everywhere."""
    for deployment_id in swapped:
        try:
            with transaction(actuator.session_factory) as session:
                node_id = DeploymentRepository(session).get(deployment_id).node_id  # type: ignore[union-attr]
            with actuator.node_lock(node_id):
                actuator.load(deployment_id, old, actor)
        except ControlPlaneError:
            # The reconciler loads the alias's version there on its next pass.
            log.exception("rolling deployment %s back to version %s failed", deployment_id, old)
