"""Placement use cases behind the API: preview a placement, and show a node's GPUs with what is
booked on each. Both only read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from control_plane.gpus.readings import GpuReading
from control_plane.nodes.orm import TritonNode
from control_plane.nodes.repository import NodeRepository
from control_plane.nodes.service import get_node
from control_plane.placement.accounting import GpuBook, foreign_bytes, usable_bytes
from control_plane.placement.model import NodeView, Strategy
from control_plane.registry.aliases import get_alias
from control_plane.registry.orm import ModelVersion
from control_plane.registry.service import get_version
from control_plane.reservations.orm import GpuReservation
from control_plane.reservations.placer import Decision, Placer
from control_plane.reservations.repository import ReservationRepository


def preview(session: Session, placer: Placer, model: str, version: int | None,
            alias: str | None, node: str | None, strategy: Strategy | None
            ) -> tuple[ModelVersion, Decision]:
    """Where the version (or the alias's version) would go now; nothing is booked."""
    target = (get_alias(session, model, alias).version if alias is not None
              else get_version(session, model, version or 0))
    nodes: Sequence[TritonNode] = ([get_node(session, node)] if node is not None
                                   else NodeRepository(session).all())
    holder = f"{model}/{alias or f'v{target.number}'}:preview"
    return target, placer.decide(session, target, nodes, holder, strategy)


@dataclass(frozen=True)
class GpuState:
    reading: GpuReading
    excluded: bool
    booked_bytes: int
    bookable_bytes: int | None
    reservations: tuple[GpuReservation, ...]


@dataclass(frozen=True)
class NodeGpus:
    node: TritonNode
    taken_at: datetime | None
    error: str | None
    gpus: tuple[GpuState, ...]


def node_gpus(session: Session, placer: Placer, name: str, view: NodeView | None,
              taken_at: datetime | None) -> NodeGpus:
    """The node's GPUs as last read (``view``; read now when None) with each GPU's bookings."""
    node = get_node(session, name)
    if view is None:
        view, taken_at = placer.view(node), datetime.now(UTC)
    by_gpu: dict[str, list[GpuReservation]] = {}
    for row in ReservationRepository(session).on_nodes([node.id]):
        by_gpu.setdefault(row.gpu_uuid, []).append(row)
    states = []
    for gpu in view.gpus:
        mine = tuple(by_gpu.get(gpu.uuid, ()))
        book = GpuBook(booked=sum(r.bytes for r in mine),
                       active=sum(r.bytes for r in mine if r.active))
        bookable = None
        if gpu.memory_total_bytes is not None and gpu.memory_used_bytes is not None:
            bookable = max(0, usable_bytes(gpu.memory_total_bytes, placer.headroom_fraction)
                           - book.booked - foreign_bytes(gpu.memory_used_bytes, book))
        states.append(GpuState(gpu, gpu.uuid in node.excluded_gpus, book.booked, bookable, mine))
    return NodeGpus(node, taken_at, view.error, tuple(states))

