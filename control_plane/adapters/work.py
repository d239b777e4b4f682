"""The work of adapter operations: send the backend of the deployment's node its control request
(load or unload), under the node's lock so that a reconcile pass never interleaves with it."""

from __future__ import annotations

from collections.abc import Callable

from control_plane.adapters.actuator import AdapterActuator
from control_plane.db import transaction
from control_plane.errors import PreconditionFailed
from control_plane.nodes.lock import NodeLock
from control_plane.operations import service as operations
from control_plane.operations.runner import OperationContext

NodeLockOf = Callable[[int], NodeLock]


def _succeed(context: OperationContext, result: dict[str, object]) -> None:
    with transaction(context.session_factory) as session:
        if not operations.succeed(session, context.operation_id, result):
            raise PreconditionFailed(f"operation {context.operation_id} was ended elsewhere")


def _make(actuator: AdapterActuator, node_lock: NodeLockOf, action: str
          ) -> Callable[[OperationContext], None]:
    """The work of ``action`` ("load" or "unload"): the two differ only in the call."""
    def work(context: OperationContext) -> None:
        row_id = context.arguments["deployment_adapter_id"]
        with node_lock(actuator.target(row_id).node_id):
            # Read again under the lock: a reconcile pass may have just finished with it.
            target = actuator.target(row_id)
            send = actuator.load if action == "load" else actuator.unload
            listing = send(target, context.created_by)
        _succeed(context, {f"{action}ed": target.name, "node": target.endpoint.name,
                           "triton_name": target.triton_name, "backend": listing.as_json()})

    return work


def make_load(actuator: AdapterActuator, node_lock: NodeLockOf
              ) -> Callable[[OperationContext], None]:
    return _make(actuator, node_lock, "load")


def make_unload(actuator: AdapterActuator, node_lock: NodeLockOf
                ) -> Callable[[OperationContext], None]:
    return _make(actuator, node_lock, "unload")
