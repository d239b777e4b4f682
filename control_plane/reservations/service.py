"""Placement use cases behind the API: preview a placement, and show a node's GPUs with what is
booked on each. Both only read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from control_plane.gpus.monitor import NodeReadings
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


def preview_nodes(session: Session, node: str | None) -> Sequence[TritonNode]:
    """The node a preview names, or every node."""
    return [get_node(session, node)] if node is not None else NodeRepository(session).all()


def cached_views(placer: Placer, latest: Callable[[str], NodeReadings | None],
                 nodes: Sequence[TritonNode]) -> tuple[dict[str, NodeView], datetime | None]:
    """Each GPU node as the monitor last read it, and when the oldest of those readings was
    taken; a node it has not read yet (registered a moment ago) is read now. Call it with no
    transaction open: a read can be NVML, HTTP or a file."""
    views: dict[str, NodeView] = {}
    taken: list[datetime] = []
    for node in nodes:
        if node.gpu_inventory is None:
            continue
        reading = latest(node.name)
        if reading is None:
            views[node.name] = placer.view(node)
            taken.append(datetime.now(UTC))
        else:
            views[node.name] = NodeView(node.name, reading.gpus, reading.error,
                                        excluded_gpus=frozenset(node.excluded_gpus))
            taken.append(reading.taken_at)
    return views, min(taken, default=None)


def preview(session: Session, placer: Placer, model: str, version: int | None,
            alias: str | None, nodes: Sequence[TritonNode], views: dict[str, NodeView],
            strategy: Strategy | None) -> tuple[ModelVersion, Decision]:
    """Where the version (or the alias's version) would go now among ``nodes``, as ``views``
    shows them; nothing is booked."""
    target = (get_alias(session, model, alias).version if alias is not None
              else get_version(session, model, version or 0))
    holder = f"{model}/{alias or f'v{target.number}'}:preview"
    return target, placer.decide(session, target, nodes, holder, strategy, views=views)


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


def node_gpus(session: Session, placer: Placer, name: str, view: NodeView,
              taken_at: datetime | None) -> NodeGpus:
    """The node's GPUs as last read (``view``) with each GPU's bookings."""
    node = get_node(session, name)
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

