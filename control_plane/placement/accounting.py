"""How much memory a GPU can still be booked for: the arithmetic every filter and scorer shares.

Per GPU, matched to its reservations by ``(node, gpu_uuid)``::

    usable   = floor(total x (1 - headroom_fraction))
    booked   = sum of every reservation on the GPU (ours, loaded or not)
    foreign  = max(0, used - sum of the reservations on it with active=True)
    bookable = usable - booked - foreign

``booked`` counts reservations whose engine has not loaded yet: the memory is promised even though
``used`` does not show it. ``foreign`` is memory in use that is none of our loaded engines (another
process, a leaked context); our active engines are already in ``booked``, so subtracting them from
``used`` keeps them from being counted twice.

An engine is booked for what vLLM will really take: vLLM sizes itself from
``gpu_memory_utilization``, a fraction of the GPU's total memory, so a booking is
``ceil(utilization x total)`` with the utilization rounded up to 4 decimals.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from functools import lru_cache
from typing import NamedTuple

from control_plane.gpus.readings import GpuReading
from control_plane.placement.model import Reservation

GIB = 2**30
# gpu_memory_utilization is rounded up to 4 decimals (8 MiB on an 80 GiB GPU): short enough to
# read in a config, fine enough to waste little.
_UTILIZATION_SCALE = 10_000


class GpuBook(NamedTuple):
    """The reservations on one GPU, added up, as one request sees them."""

    booked: int = 0
    active: int = 0
    # The GPU already holds an engine of the request's holder (what anti-affinity refuses).
    holds_holder: bool = False


# Every GPU with no reservation.
EMPTY_BOOK = GpuBook()


class Ledger:
    """The reservations added up per GPU (matched by node and UUID), kept current as reservations
    are added and removed, so a decision reads the sums instead of adding them up again."""

    # One immutable GpuBook per booked GPU, filed by node so a GPU costs one look-up. A node's
    # books are replaced, never changed, when a reservation is added or removed: a caller can keep
    # them as they were (a decision explains itself later from what it decided on) and tell that
    # they changed by identity (FleetState rebuilds what it derives from them). Tuples of numbers
    # are objects the garbage collector stops tracking, so the books leave nothing behind that
    # brings on full collections (tens of milliseconds in a large process).
    def __init__(self, reservations: Iterable[Reservation] = (),
                 holder: str | None = None) -> None:
        # ``holder``: whose engines ``book()`` reports by default (anti-affinity's question).
        self.holder = holder
        self._nodes: dict[str, Mapping[str, GpuBook]] = {}
        # Every reservation held, counted: a release must name one that was added.
        self._held: Counter[Reservation] = Counter()
        # Per holder, the GPUs holding its engines and how many engines each.
        self._holders: dict[str, Counter[tuple[str, str]]] = {}
        for reservation in reservations:
            self.add(reservation)

    def add(self, reservation: Reservation) -> None:
        books = self._nodes.get(reservation.node, _NO_BOOKS)
        book = books.get(reservation.gpu_uuid, EMPTY_BOOK)
        self._nodes[reservation.node] = {**books, reservation.gpu_uuid: GpuBook(
            book.booked + reservation.bytes,
            book.active + (reservation.bytes if reservation.active else 0))}
        self._held[reservation] += 1
        self._holders.setdefault(reservation.holder, Counter())[
            (reservation.node, reservation.gpu_uuid)] += 1

    def remove(self, reservation: Reservation) -> None:
        """Take back one ``reservation`` added before; KeyError if there is none."""
        if not self._held[reservation]:
            raise KeyError(f"no such reservation to release: {reservation}")
        self._held[reservation] -= 1
        if not self._held[reservation]:
            del self._held[reservation]
        books = self._nodes[reservation.node]
        book = books[reservation.gpu_uuid]
        left = GpuBook(book.booked - reservation.bytes,
                       book.active - (reservation.bytes if reservation.active else 0))
        key = (reservation.node, reservation.gpu_uuid)
        gpus = self._holders[reservation.holder]
        gpus[key] -= 1
        if not gpus[key]:
            del gpus[key]
            if not gpus:
                del self._holders[reservation.holder]
        changed = {**books, reservation.gpu_uuid: left}
        if left == EMPTY_BOOK:
            del changed[reservation.gpu_uuid]
        if changed:
            self._nodes[reservation.node] = changed
        else:
            del self._nodes[reservation.node]

    def node(self, name: str) -> Mapping[str, GpuBook]:
        """The books of a node's GPUs by UUID (``holds_holder`` unset); GPUs with no reservation
        are absent. Never changed afterwards: a new mapping replaces it when the node's
        reservations change."""
        return self._nodes.get(name, _NO_BOOKS)

    def held_by(self, holder: str) -> Collection[tuple[str, str]]:
        """The GPUs, as ``(node, uuid)``, that hold an engine of ``holder``."""
        return self._holders.get(holder, _NO_GPUS)

    def book(self, node: str, gpu_uuid: str, holder: str | None = None) -> GpuBook:
        """One GPU's book, ``holds_holder`` answered for ``holder`` (default: the ledger's)."""
        book = self.node(node).get(gpu_uuid, EMPTY_BOOK)
        holder = holder if holder is not None else self.holder
        if holder is not None and (node, gpu_uuid) in self.held_by(holder):
            return book._replace(holds_holder=True)
        return book

    def reservations(self) -> list[Reservation]:
        """Every reservation held, each as often as it was added."""
        return list(self._held.elements())


_NO_BOOKS: Mapping[str, GpuBook] = {}
_NO_GPUS: Counter[tuple[str, str]] = Counter()


def usable_bytes(total: int, headroom_fraction: float) -> int:
    return math.floor(total * (1.0 - headroom_fraction))


def foreign_bytes(used: int, book: GpuBook) -> int:
    # Not max(): asked for every GPU of the fleet on every decision, and a builtin call costs
    # more than the comparison.
    active = book.active
    return used - active if used > active else 0


def utilization_for(bytes_per_gpu: int, total: int) -> float:
    """vLLM's ``gpu_memory_utilization`` giving at least ``bytes_per_gpu`` of ``total``."""
    # Integer ceiling first: a float division could round 0.30000001 down to 0.3.
    return -(-bytes_per_gpu * _UTILIZATION_SCALE // total) / _UTILIZATION_SCALE


def booking_bytes(utilization: float, total: int) -> int:
    """What vLLM takes on a GPU of ``total`` bytes at ``utilization``, computed as vLLM does."""
    return math.ceil(total * utilization)


@lru_cache(maxsize=1024)
def engine_fit(bytes_per_gpu: int, headroom_fraction: float, total: int) -> tuple[int, int]:
    """``(booking, usable)`` of an engine on a GPU of ``total`` bytes: the same for every GPU of
    a size, so cached (placement asks it for each of a thousand GPUs of four sizes)."""
    return (booking_bytes(utilization_for(bytes_per_gpu, total), total),
            usable_bytes(total, headroom_fraction))


def gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def gpu_memory(gpu: GpuReading) -> tuple[int, int] | None:
    """``(total, used)`` when both were read and the total is positive, else None."""
    total, used = gpu.memory_total_bytes, gpu.memory_used_bytes
    if total is None or used is None or total <= 0:
        return None
    return total, used
