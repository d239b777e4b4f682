"""``FleetState``: the fleet's readings and bookings as placement sees them, kept current.

A caller that decides often (the placement benchmark, a long-lived scheduler) keeps one and tells
it what changed: a node read again, reservations booked or released. A decision then reads the
per-GPU sums instead of adding up every reservation of the fleet again, which at a thousand GPUs
and a few thousand reservations was half of its time. ``place()`` builds a fresh one per call, so
a one-off decision and a kept state take the same path and give the same answer.

Per node it also keeps a ``NodeState``: the node's reading, its books and, per GPU size, the GPUs
that pass the reading rules ordered by what they carry. A decision bisects that order for the GPUs
a booking fits on instead of checking every GPU of the fleet (issue 16). A node's state is built
again only when its reading or its bookings change, and never changes once built (nor do the
ledger's books it holds, which the ledger replaces rather than changes): a decision keeps the
states it decided on to explain itself later.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from control_plane.gpus.readings import GpuReading
from control_plane.placement.accounting import EMPTY_BOOK, GpuBook, Ledger, foreign_bytes
from control_plane.placement.filters import READING_GPU_FILTERS
from control_plane.placement.model import Device, NodeView, PlacementRequest, Reservation

# Per GPU of a node, in order: the reading rule it fails and why, or None when it passes them.
ReadingVerdicts = tuple[tuple[str, str] | None, ...]


class GroupGpu(NamedTuple):
    """A GPU that passed the reading rules, with what a new booking must fit beside."""

    # Booked for our engines plus used by others (see ``accounting``): the fits-memory rule
    # passes when load <= usable - booking.
    load: int
    gpu_index: int
    uuid: str
    # One of our engines is booked on it (what best fit fills first).
    in_use: bool


class GpuRun(NamedTuple):
    """GPUs of one node, of one total memory and all in use or all empty, least loaded first."""

    # Their loads, ascending: bisected for how many of them a booking fits on.
    loads: tuple[int, ...]
    gpus: tuple[GroupGpu, ...]


class GpuGroup(NamedTuple):
    """A node's GPUs of one total memory that passed the reading rules: those in use and those
    empty apart, as the scorers tell them apart (see ``Scorer.key``)."""

    total: int
    in_use: GpuRun
    empty: GpuRun


class NodeState(NamedTuple):
    """One node's reading and books, and what decisions derive from them; never changed."""

    view: NodeView
    books: Mapping[str, GpuBook]
    reading_verdicts: ReadingVerdicts
    # By total memory, in the order the sizes first appear on the node; none if unreadable.
    groups: tuple[GpuGroup, ...]


class FleetState:
    """Nodes by name and a ``Ledger`` of their reservations, updated in place: read the ledger,
    but book and release through the ``FleetState``, which rebuilds the states they change."""

    def __init__(self, nodes: Iterable[NodeView] = (),
                 reservations: Iterable[Reservation] = ()) -> None:
        self._views: dict[str, NodeView] = {}
        self._by_name: tuple[NodeView, ...] | None = None
        self._reading_verdicts: dict[str, ReadingVerdicts] = {}
        # Built when first asked for, dropped when the node's reading or bookings change.
        self._states: dict[str, NodeState] = {}
        self._all_states: tuple[NodeState, ...] | None = None
        for view in nodes:
            self.set_node(view)
        self.ledger = Ledger(reservations)

    def set_node(self, view: NodeView) -> None:
        """Add a node, or replace its readings with ``view``'s."""
        if view.name not in self._views:
            self._by_name = None
        elif self._by_name is not None:
            self._by_name = tuple(view if old.name == view.name else old
                                  for old in self._by_name)
        self._views[view.name] = view
        self._reading_verdicts.pop(view.name, None)
        self._changed(view.name)

    def remove_node(self, name: str) -> None:
        """Forget a node (its reservations stay in the ledger until released)."""
        del self._views[name]
        self._by_name = None
        self._reading_verdicts.pop(name, None)
        self._changed(name)

    def book(self, reservations: Iterable[Reservation]) -> None:
        for reservation in reservations:
            self.ledger.add(reservation)
            self._changed(reservation.node)

    def release(self, reservations: Iterable[Reservation]) -> None:
        """Take back reservations booked before; KeyError for one that was not."""
        for reservation in reservations:
            self.ledger.remove(reservation)
            self._changed(reservation.node)

    def view(self, name: str) -> NodeView | None:
        return self._views.get(name)

    def reading_verdicts(self, node: NodeView) -> ReadingVerdicts:
        """What the reading rules (``READING_GPU_FILTERS``) say of each of the node's GPUs,
        checked once per reading."""
        verdicts = self._reading_verdicts.get(node.name)
        if verdicts is None:
            verdicts = self._reading_verdicts[node.name] = tuple(
                _first_failure(node, gpu) for gpu in node.gpus)
        return verdicts

    def node_states(self) -> tuple[NodeState, ...]:
        """Every node's state, by name; those whose reading or bookings changed built again."""
        if self._all_states is None:
            states = self._states
            self._all_states = tuple(states.get(view.name) or self._node_state(view)
                                     for view in self.nodes)
        return self._all_states

    @property
    def names(self) -> Sequence[str]:
        return sorted(self._views)

    @property
    def nodes(self) -> tuple[NodeView, ...]:
        """Every node, by name: the order decisions go through them, so ties break the same."""
        if self._by_name is None:
            self._by_name = tuple(sorted(self._views.values(), key=lambda node: node.name))
        return self._by_name

    def _changed(self, name: str) -> None:
        self._states.pop(name, None)
        self._all_states = None

    def _node_state(self, view: NodeView) -> NodeState:
        books = self.ledger.node(view.name)
        verdicts = self.reading_verdicts(view)
        groups: dict[int, tuple[list[GroupGpu], list[GroupGpu]]] = {}
        if view.error is None:
            for gpu, verdict in zip(view.gpus, verdicts, strict=True):
                if verdict is not None:
                    continue
                book = books.get(gpu.uuid, EMPTY_BOOK)
                # gpu-healthy passed, so both figures were read.
                used = gpu.memory_used_bytes or 0
                in_use = book.booked > 0
                insort(groups.setdefault(gpu.memory_total_bytes or 0, ([], []))[not in_use],
                       GroupGpu(book.booked + foreign_bytes(used, book), gpu.index, gpu.uuid,
                                in_use))
        state = self._states[view.name] = NodeState(
            view, books, verdicts,
            tuple(GpuGroup(total, _run(in_use), _run(empty))
                  for total, (in_use, empty) in groups.items()))
        return state


def _run(gpus: list[GroupGpu]) -> GpuRun:
    return GpuRun(tuple(gpu.load for gpu in gpus), tuple(gpus))


# The reading rules never read the request (a test holds them to it): this one fills their
# signature.
_ANY_REQUEST = PlacementRequest(holder="", device=Device.GPU, bytes_per_gpu=1)


def _first_failure(node: NodeView, gpu: GpuReading) -> tuple[str, str] | None:
    for reading_filter in READING_GPU_FILTERS:
        detail = reading_filter.check(_ANY_REQUEST, node, gpu, EMPTY_BOOK)
        if detail is not None:
            return reading_filter.name, detail
    return None
