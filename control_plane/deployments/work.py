"""The work of deployment operations: apply (load) and remove (drain and unload). A swap's work
moves an alias and is the lifecycle's (``lifecycle.swap_work``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from control_plane.db import transaction
from control_plane.deployments.actuator import Actuator
from control_plane.deployments.repository import DeploymentRepository
from control_plane.errors import PreconditionFailed
from control_plane.operations import service as operations
from control_plane.operations.runner import OperationContext
from control_plane.registry import aliases

log = logging.getLogger(__name__)


def _succeed(context: OperationContext, result: dict[str, object]) -> None:
    with transaction(context.session_factory) as session:
        if not operations.succeed(session, context.operation_id, result):
            raise PreconditionFailed(f"operation {context.operation_id} was ended elsewhere")


def make_apply(actuator: Actuator, after: Callable[[], None]) -> Callable[[OperationContext], None]:
    def work(context: OperationContext) -> None:
        (deployment_id,) = context.arguments["deployment_ids"]
        try:
            # The alias's version now, not when the request came: a swap may have moved it.
            with transaction(context.session_factory) as session:
                deployment = DeploymentRepository(session).get(deployment_id)
                if deployment is None:
                    raise PreconditionFailed(f"deployment {deployment_id} no longer exists")
                alias = aliases.get_alias(session, deployment.model.name, deployment.alias)
                number, node_id = alias.version.number, deployment.node_id
            with actuator.node_lock(node_id):
                actuator.load(deployment_id, number, context.created_by)
            _succeed(context, {"serving_version": number})
        finally:
            after()

    return work


def make_remove(actuator: Actuator, after: Callable[[], None]
                ) -> Callable[[OperationContext], None]:
    def work(context: OperationContext) -> None:
        (deployment_id,) = context.arguments["deployment_ids"]
        try:
            endpoint, name = actuator.endpoint(deployment_id)
            with transaction(context.session_factory) as session:
                node_id = DeploymentRepository(session).get(deployment_id).node_id  # type: ignore[union-attr]
            with actuator.node_lock(node_id):
                actuator.unload(deployment_id, context.created_by)
            _succeed(context, {"unloaded": name, "node": endpoint.name})
        finally:
            after()

    return work
