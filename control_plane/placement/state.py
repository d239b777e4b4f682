"""``FleetState``: the fleet's readings and bookings as placement sees them, kept current.

A caller that decides often (the placement benchmark, a long-lived scheduler) keeps one and tells
it what changed: a node read again, reservations booked or released. A decision then reads the
per-GPU sums instead of adding up every reservation of the fleet again, which at a thousand GPUs
and a few thousand reservations was half of its time. ``place()`` builds a fresh one per call, so
a one-off decision and a kept state take the same path and give the same answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from control_plane.gpus.readings import GpuReading
from control_plane.placement.accounting import EMPTY_BOOK, Ledger
from control_plane.placement.filters import READING_GPU_FILTERS
from control_plane.placement.model import NodeView, PlacementRequest, Reservation

# Per GPU of a node, in order: the reading rule it fails and why, or None when it passes them.
ReadingVerdicts = tuple[tuple[str, str] | None, ...]


class FleetState:
    """Nodes by name and a ``Ledger`` of their reservations, updated in place."""

    def __init__(self, nodes: Iterable[NodeView] = (),
                 reservations: Iterable[Reservation] = ()) -> None:
        self._views: dict[str, NodeView] = {}
        self._by_name: tuple[NodeView, ...] | None = None
        self._reading_verdicts: dict[str, ReadingVerdicts] = {}
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

    def remove_node(self, name: str) -> None:
        """Forget a node (its reservations stay in the ledger until released)."""
        del self._views[name]
        self._by_name = None
        self._reading_verdicts.pop(name, None)

    def book(self, reservations: Iterable[Reservation]) -> None:
        for reservation in reservations:
            self.ledger.add(reservation)

    def release(self, reservations: Iterable[Reservation]) -> None:
        """Take back reservations booked before; KeyError for one that was not."""
        for reservation in reservations:
            self.ledger.remove(reservation)

    def view(self, name: str) -> NodeView | None:
        return self._views.get(name)

    def reading_verdicts(self, node: NodeView, request: PlacementRequest) -> ReadingVerdicts:
        """What the reading rules (``READING_GPU_FILTERS``) say of each of the node's GPUs,
        checked once per reading (``request`` only fills their signature: they never read it)."""
        verdicts = self._reading_verdicts.get(node.name)
        if verdicts is None:
            verdicts = self._reading_verdicts[node.name] = tuple(
                _first_failure(request, node, gpu) for gpu in node.gpus)
        return verdicts

    @property
    def names(self) -> Sequence[str]:
        return sorted(self._views)

    @property
    def nodes(self) -> tuple[NodeView, ...]:
        """Every node, by name: the order decisions go through them, so ties break the same."""
        if self._by_name is None:
            self._by_name = tuple(sorted(self._views.values(), key=lambda node: node.name))
        return self._by_name


def _first_failure(request: PlacementRequest, node: NodeView,
                   gpu: GpuReading) -> tuple[str, str] | None:
    for reading_filter in READING_GPU_FILTERS:
        detail = reading_filter.check(request, node, gpu, EMPTY_BOOK)
        if detail is not None:
            return reading_filter.name, detail
    return None
