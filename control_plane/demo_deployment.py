"""``make serve``'s demo: the shipped model registered, pointed at by ``production`` and deployed
on the local Triton node through the control plane, the same path an operator's API calls take.

Idempotent: a later start finds the model, version, alias and node already there (the node's
URLs are updated if its ports changed) and only applies the deployment again.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from control_plane.auth.scopes import Actor, Scope
from control_plane.db import transaction
from control_plane.deployments import service as deployments
from control_plane.errors import ModelNotFound, NodeNotFound
from control_plane.lifecycle import alias_moves
from control_plane.lifecycle.alias_moves import SwapStarted
from control_plane.nodes import service as nodes
from control_plane.nodes.schemas import NodeCreate, NodeUpdate
from control_plane.operations import service as operations
from control_plane.operations.orm import OperationStatus
from control_plane.operations.runner import OperationRunner
from control_plane.registry import aliases
from control_plane.registry import service as registry
from control_plane.registry.repository import VersionRepository
from control_plane.registry.schemas import ModelCreate, VersionCreate
from control_plane.registry.serving import ServingSettings
from control_plane.triton import config_builder

ACTOR = Actor(name="make-serve", scope=Scope.ADMIN)
NODE = "local"
# Set from the model's own config.pbtxt / model.json in the repository; the control plane, not
# the node, decides the engine's model path.
SET_BY_CONTROL_PLANE = {"model", "served_model_name"}


def register_demo(session: Session, model: str, source: str, engine_args: dict[str, Any],
                  serving: ServingSettings, source_roots: list[Any]) -> tuple[int, bool]:
    """The demo model's version number, registering model and version on first use, and
    whether this call registered it (the shipped demo changed since the last start)."""
    try:
        found = registry.get_model(session, model)
    except ModelNotFound:
        found = registry.create_model(session, ACTOR, ModelCreate(
            name=model, description="demo model deployed by make serve",
            labels={"source": "make-serve"}))
    engine_args = {k: v for k, v in engine_args.items() if k not in SET_BY_CONTROL_PLANE}
    versions, _ = VersionRepository(session).list(found.id, 500, 0)
    for version in versions:
        if version.source == source and version.engine_args == engine_args and \
                version.serving == serving.model_dump(mode="json"):
            return version.number, False
    created = registry.register_version(
        session, ACTOR, model, VersionCreate(source=source, engine_args=engine_args,
                                             serving=serving),
        source_roots, config_builder.check)
    return created.number, True


def ensure_node(session: Session, http_url: str, grpc_url: str, key_variable: str,
                metrics_url: str | None = None) -> None:
    data = {"http_url": f"http://{http_url}", "grpc_url": grpc_url,
            "api_key_ref": f"env:{key_variable}", "metrics_url": metrics_url}
    try:
        node = nodes.get_node(session, NODE)
    except NodeNotFound:
        nodes.register_node(session, ACTOR, NodeCreate(name=NODE, labels={"local": "true"},
                                                       **data))  # type: ignore[arg-type]
        return
    if (node.http_url.rstrip("/"), node.grpc_url, node.api_key_ref, node.metrics_url) != (
            data["http_url"], grpc_url, data["api_key_ref"], metrics_url):
        nodes.update_node(session, ACTOR, NODE, NodeUpdate(**data))  # type: ignore[arg-type]


def deploy(session_factory: sessionmaker[Session], runner: OperationRunner, model: str,
           number: int, newly_registered: bool, timeout_s: float = 900) -> dict[str, Any]:
    """Serve ``production`` on the local node and wait for the outcome.

    ``production`` is pointed at the demo's version when it does not exist yet, or when this start
    registered a new demo version; otherwise it stays where an operator (or a promotion) put it.
    A move goes through the lifecycle, so a deployed alias moves by a swap."""
    with transaction(session_factory) as session:
        existing = aliases.find_alias(session, registry.get_model(session, model), "production")
        moved = None
        if existing is None or (newly_registered and existing.version.number != number):
            moved = alias_moves.move_alias(session, ACTOR, model, "production", number)
        if isinstance(moved, SwapStarted):
            operation = moved.operation
        else:
            _, operation = deployments.apply(session, ACTOR, model, "production", NODE)
    runner.submit(operation.id)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with transaction(session_factory) as session:
            current = operations.get(session, operation.id)
            if OperationStatus(current.status).finished:
                return {"status": current.status, "error": current.error, "id": current.id}
        time.sleep(0.5)
    return {"status": "timed out", "error": f"not finished within {timeout_s:g} s",
            "id": operation.id}
