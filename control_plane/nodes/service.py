"""Triton node use cases. Each takes the caller's session and flushes; the caller commits."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from control_plane.auth import audit
from control_plane.auth.scopes import Actor
from control_plane.concurrency import check_if_match, etag
from control_plane.db import utcnow
from control_plane.errors import Conflict, NodeAlreadyExists, NodeNotFound
from control_plane.nodes.orm import TritonNode
from control_plane.nodes.repository import NodeRepository
from control_plane.nodes.schemas import (
    OBSERVED_FIELDS,
    NodeCreate,
    NodeLeave,
    NodeOut,
    NodeRegistration,
    NodeUpdate,
)


def node_etag(node: TritonNode) -> str:
    return etag(node.id, node.revision)


def _snapshot(node: TritonNode) -> dict[str, Any]:
    return NodeOut.of(node).model_dump(mode="json", exclude=set(OBSERVED_FIELDS))


def register_node(session: Session, actor: Actor, data: NodeCreate) -> TritonNode:
    repository = NodeRepository(session)
    if repository.get_by_name(data.name) is not None:
        raise NodeAlreadyExists(data.name)
    node = TritonNode(name=data.name, http_url=str(data.http_url), grpc_url=data.grpc_url,
                      metrics_url=None if data.metrics_url is None else str(data.metrics_url),
                      labels=data.labels, api_key_ref=data.api_key_ref,
                      gpu_inventory=data.gpu_inventory, excluded_gpus=data.excluded_gpus)
    try:
        repository.save(node)
    except IntegrityError as exc:  # a concurrent registration of the same name won the race
        raise NodeAlreadyExists(data.name) from exc
    audit.record(session, actor, "node.register", "node", node.name, after=_snapshot(node))
    return node


def get_node(session: Session, name: str, *, for_update: bool = False) -> TritonNode:
    node = NodeRepository(session).get_by_name(name, for_update=for_update)
    if node is None:
        raise NodeNotFound(name)
    return node


def list_nodes(session: Session, labels: Mapping[str, str], limit: int, offset: int
               ) -> tuple[Sequence[TritonNode], int]:
    return NodeRepository(session).list(labels, limit, offset)


def update_node(session: Session, actor: Actor, name: str, data: NodeUpdate,
                if_match: str | None = None) -> TritonNode:
    node = get_node(session, name, for_update=True)
    check_if_match(node_etag(node), if_match, f"node '{name}'")
    before = _snapshot(node)
    if data.http_url is not None:
        node.http_url = str(data.http_url)
    if data.grpc_url is not None:
        node.grpc_url = data.grpc_url
    # Unlike the other fields, null is a value here: it removes the URL.
    if "metrics_url" in data.model_fields_set:
        node.metrics_url = None if data.metrics_url is None else str(data.metrics_url)
    if data.labels is not None:
        node.labels = data.labels
    if data.api_key_ref is not None:
        node.api_key_ref = data.api_key_ref
    if data.gpu_inventory is not None:
        node.gpu_inventory = data.gpu_inventory
    if data.excluded_gpus is not None:
        node.excluded_gpus = data.excluded_gpus
    if data.cordoned is not None and data.cordoned != (node.cordoned_at is not None):
        node.cordoned_at = utcnow() if data.cordoned else None
    node.updated_at = utcnow()
    NodeRepository(session).save(node)
    audit.record(session, actor, "node.update", "node", name, before=before, after=_snapshot(node))
    return node


def remove_node(session: Session, actor: Actor, name: str, if_match: str | None = None) -> None:
    node = get_node(session, name, for_update=True)
    check_if_match(node_etag(node), if_match, f"node '{name}'")
    before = _snapshot(node)
    NodeRepository(session).delete(node)
    audit.record(session, actor, "node.remove", "node", name, before=before)


def join(session: Session, actor: Actor, name: str, data: NodeRegistration
         ) -> tuple[TritonNode, bool]:
    """A node's agent registers it at start: created the first time, its addresses refreshed
    and back in service after that (a restarted pod is the same node, and the reconciler loads
    what should run there). Returns the node and whether it was created."""
    repository = NodeRepository(session)
    node = repository.get_by_name(name, for_update=True)
    if node is None:
        created = register_node(session, actor, NodeCreate(
            name=name, http_url=data.http_url, grpc_url=data.grpc_url,
            metrics_url=data.metrics_url, labels=data.labels, api_key_ref=data.api_key_ref,
            gpu_inventory=data.gpu_inventory))
        return created, True
    before = _snapshot(node)
    node.http_url = str(data.http_url)
    node.grpc_url = data.grpc_url
    node.metrics_url = None if data.metrics_url is None else str(data.metrics_url)
    node.labels = data.labels
    node.api_key_ref = data.api_key_ref
    node.gpu_inventory = data.gpu_inventory
    node.cordoned_at = None
    node.updated_at = utcnow()
    repository.save(node)
    audit.record(session, actor, "node.join", "node", name, before=before, after=_snapshot(node))
    return node, False


def leave(session: Session, actor: Actor, name: str,
          check_removable: Callable[[Session, str], None]) -> NodeLeave:
    """A node's agent takes it out as it stops: cordoned at once (gateways stop sending it new
    requests while its open streams drain), and forgotten if nothing is deployed there; with
    deployments it stays, cordoned, until it joins again or an operator moves them."""
    node = get_node(session, name, for_update=True)
    before = _snapshot(node)
    try:
        check_removable(session, name)
    except Conflict as refusal:
        if node.cordoned_at is None:
            node.cordoned_at = utcnow()
            node.updated_at = utcnow()
            NodeRepository(session).save(node)
        audit.record(session, actor, "node.leave", "node", name, before=before,
                     after=_snapshot(node))
        return NodeLeave(node=name, removed=False,
                         detail=f"cordoned: gateways route nothing new to it and nothing new is "
                                f"placed there; it stays registered ({refusal.message})")
    NodeRepository(session).delete(node)
    audit.record(session, actor, "node.leave", "node", name, before=before)
    return NodeLeave(node=name, removed=True,
                     detail="nothing was deployed there: the node is forgotten")
