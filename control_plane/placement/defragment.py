"""``plan_defragmentation()``: moves of running engines that free whole GPUs, each with its cost.

``place()`` decides one version at a time and never moves a running engine: departures leave holes
that nothing of the right size fills, and engines that came when the large GPUs were busy stay on
small ones. Counted in GPUs in use, an offline repacking of the same versions needs about a third
fewer (``bench/placement.py``). The planner proposes the moves that get part of that back.

It drains GPUs one at a time, the smallest first (their engines go to larger GPUs, of which fewer
hold the same), then those with the fewest versions, then the least booked: every deployment
version with an engine on the GPU moves, all its engines together, and so does every version on the
GPUs those engines share (a tensor-parallel engine frees none of its GPUs while a neighbour stays),
to GPUs that pass the placement rules (healthy, not excluded, not its own, room for the booking it
would need there, one node, equal sizes, on the nodes its request allows: a deployment names its
own). A version goes to GPUs already in use, the tightest first, and opens an empty GPU only when
that GPU is larger than the one being drained, the largest first: the first drain onto it frees
nothing, the next ones fill it. A version that fits nowhere as things stand (typically engines of
tensor parallelism 4 or 8 on small GPUs, while the large ones are nearly full) gets room made on
larger GPUs in use of one node: single-GPU versions move off them, the smallest first, into room
elsewhere, opening empty GPUs of any size if need be, then it moves in (the nodes that need the
least moved off are tried, six at most; a version no room could be made for is not tried again in
the plan). A drain that would leave more GPUs in use than before is not proposed, nor one that
leaves as many without opening a larger GPU; a version moves at most once per plan, and the plan
ends at the drain after which the fewest GPUs are in use, so it never ends on a GPU opened for
nothing.

Moves are make-before-break and feasible in order: each books its target beside what is booked
after the moves before it, then releases its version's old reservations. A GPU a plan drains is
never the target of a later move. The budget bounds the engines reloaded (and the bytes loaded
again); a drain that does not fit in what is left of it is skipped.

``plan_room()`` makes room the same way for a request ``place()`` refused, on GPUs in use of one
node, and leaves its placement to ``place()``.

Pure and deterministic: it reads a ``FleetState`` and the requests its holders were placed with,
changes neither, and gives the same plan for them in every process (ties are broken by name, never
by a set's order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from control_plane.placement.accounting import booking_bytes, engine_fit, utilization_for
from control_plane.placement.model import Device, Placement, PlacementRequest, Reservation
from control_plane.placement.state import FleetState

# A GPU as the ledger files it: (node, uuid).
GpuKey = tuple[str, str]


@dataclass(frozen=True)
class MoveBudget:
    """The most a plan may cost: engines reloaded and, when set, bytes loaded again."""

    engines: int
    bytes: int | None = None


@dataclass(frozen=True)
class Move:
    """One deployment version's engines, moved together: book ``target``'s reservations, load the
    engines there, then release ``release``."""

    holder: str
    release: tuple[Reservation, ...]
    target: Placement

    @property
    def engines(self) -> int:
        return len(self.target.engines)

    @property
    def bytes(self) -> int:
        return sum(reservation.bytes for reservation in self.target.reservations)


@dataclass(frozen=True)
class DefragmentationPlan:
    moves: tuple[Move, ...] = ()
    # GPUs that hold nothing once the moves are done, and empty GPUs the moves start using.
    freed: tuple[GpuKey, ...] = ()
    opened: tuple[GpuKey, ...] = ()
    gpus_in_use_before: int = 0
    gpus_in_use_after: int = 0

    @property
    def engines(self) -> int:
        return sum(move.engines for move in self.moves)

    @property
    def bytes(self) -> int:
        return sum(move.bytes for move in self.moves)


@dataclass
class ScratchGpu:
    key: GpuKey
    index: int
    total: int
    # Memory in use that is none of our loaded engines, from the reading: it stays put.
    foreign: int
    booked: int = 0
    holders: set[str] = field(default_factory=set)


@dataclass
class _Drain:
    moves: list[Move]
    freed: list[GpuKey]
    opened: list[GpuKey]


class FleetScratch:
    """The fleet's GPUs and who holds what, changed as moves are planned, with an undo log."""

    def __init__(self, fleet: FleetState, requests: Mapping[str, PlacementRequest]) -> None:
        self.requests = requests
        self.gpus: dict[GpuKey, ScratchGpu] = {}
        # Per node, its GPUs that may take an engine (readable, healthy, not excluded).
        self.targets: dict[str, list[ScratchGpu]] = {}
        for view in fleet.nodes:
            verdicts = fleet.reading_verdicts(view) if view.error is None else \
                (("inventory-readable", view.error),) * len(view.gpus)
            books = fleet.ledger.node(view.name)
            for reading, verdict in zip(view.gpus, verdicts, strict=True):
                book = books.get(reading.uuid)
                used, active = reading.memory_used_bytes or 0, book.active if book else 0
                gpu = ScratchGpu((view.name, reading.uuid), reading.index,
                           reading.memory_total_bytes or 0, used - active if used > active else 0)
                self.gpus[gpu.key] = gpu
                if verdict is None:
                    self.targets.setdefault(view.name, []).append(gpu)
        self.held: dict[str, list[Reservation]] = {}
        for reservation in fleet.ledger.reservations():
            self.held.setdefault(reservation.holder, []).append(reservation)
            self.add(reservation)
        # What each GPU holds before any move: what a plan's freed and opened GPUs are read from.
        self.booked_before = {key: gpu.booked for key, gpu in self.gpus.items()}
        self._log: list[Move] = []
        self.moved: set[str] = set()
        # Versions no room could be made for in this plan: not tried again (it costs a search
        # of every node, and what changes between two tries rarely makes room).
        self.no_room: set[str] = set()

    def in_use(self) -> int:
        return sum(1 for gpu in self.gpus.values() if gpu.booked)

    def sources(self) -> list[ScratchGpu]:
        """GPUs in use, the first to drain first: the smallest (their engines go to larger GPUs,
        of which fewer hold the same), then the fewest versions, then the least booked."""
        return sorted((gpu for gpu in self.gpus.values() if gpu.booked),
                      key=lambda gpu: (gpu.total, len(gpu.holders), gpu.booked, gpu.key))

    def closure(self, source: ScratchGpu) -> list[ScratchGpu]:
        """``source`` and every GPU sharing a version with it, and so on: what draining it
        moves off, all of it on one node."""
        seen = {source.key: source}
        todo = [source]
        while todo:
            gpu = todo.pop()
            for holder in gpu.holders:
                for r in self.held.get(holder, ()):
                    other = self.gpus.get((r.node, r.gpu_uuid))
                    if other is not None and other.key not in seen:
                        seen[other.key] = other
                        todo.append(other)
        return list(seen.values())

    def movable(self, holder: str) -> bool:
        """A GPU engine placed with a known request, on GPUs the fleet still reads, not moved
        yet by this plan (a second move would release what the first has not loaded yet)."""
        request = self.requests.get(holder)
        return request is not None and request.device is Device.GPU and \
            holder not in self.moved and all(
            (r.node, r.gpu_uuid) in self.gpus for r in self.held[holder])

    def move(self, holder: str, frozen: set[GpuKey], opens_above: int) -> Move | None:
        """Move ``holder``'s engines off their GPUs, onto none of ``frozen``; an empty GPU is
        opened only if its total exceeds ``opens_above``. None when nowhere fits."""
        request = self.requests[holder]
        current = self.held[holder]
        own = {(r.node, r.gpu_uuid) for r in current}
        needed = request.tensor_parallel_size * request.replicas
        best: tuple[tuple[int, int, int, str], list[ScratchGpu]] | None = None
        for node in request.nodes or self.targets:
            groups: dict[int, list[tuple[int, int, ScratchGpu]]] = {}
            empty = 0
            for gpu in self.targets.get(node, ()):
                if gpu.key in frozen or gpu.key in own:
                    continue
                if not gpu.booked:
                    empty += 1
                    if gpu.total <= opens_above:
                        continue
                booking, usable = engine_fit(request.bytes_per_gpu, request.headroom_fraction,
                                             gpu.total)
                left = usable - gpu.booked - gpu.foreign - booking
                if left >= 0:
                    # In use first, tightest first; then empty ones, largest first.
                    groups.setdefault(gpu.total, []).append(
                        (0, left, gpu) if gpu.booked else (1, -gpu.total, gpu))
            for group in groups.values():
                if len(group) < needed:
                    continue
                chosen = sorted(group, key=lambda item: (item[0], item[1], item[2].index))
                chosen = chosen[:needed]
                opened = sum(item[0] for item in chosen)
                # Fewest opened, then tightest; then the node that keeps fewest GPUs empty.
                rank = (opened, sum(item[1] for item in chosen), empty - opened, node)
                if best is None or rank < best[0]:
                    best = rank, [item[2] for item in chosen]
        if best is None:
            return None
        chosen_gpus = best[1]
        target = placement_on(request, node=chosen_gpus[0].key[0],
                              gpus=[(gpu.index, gpu.key[1]) for gpu in chosen_gpus],
                              total=min(gpu.total for gpu in chosen_gpus))
        for reservation in target.reservations:
            self.add(reservation)
        for reservation in current:
            self.remove(reservation)
        self.held[holder] = list(target.reservations)
        move = Move(holder=holder, release=tuple(current), target=target)
        self._log.append(move)
        self.moved.add(holder)
        return move

    def move_making_room(self, holder: str, frozen: set[GpuKey], larger_than: int,
                         nodes_tried: int = 6) -> Move | None:
        """Move ``holder`` onto GPUs in use larger than ``larger_than`` of one node,
        after moving single-GPU versions off them into room elsewhere; None when no node of the
        ``nodes_tried`` that need the least moved off can be made to fit."""
        if holder in self.no_room:
            return None
        request = self.requests[holder]
        own = {(r.node, r.gpu_uuid) for r in self.held[holder]}
        needed = request.tensor_parallel_size * request.replicas
        options: list[tuple[int, str, list[tuple[int, ScratchGpu]]]] = []
        for node in request.nodes or self.targets:
            groups: dict[int, list[tuple[int, ScratchGpu]]] = {}
            for gpu in self.targets.get(node, ()):
                if gpu.total <= larger_than or gpu.key in frozen or gpu.key in own or \
                        not gpu.booked:
                    continue
                booking, usable = engine_fit(request.bytes_per_gpu, request.headroom_fraction,
                                             gpu.total)
                short = gpu.booked + gpu.foreign + booking - usable
                if short > 0 and short > sum(self.single_bytes(h) for h in gpu.holders):
                    continue
                groups.setdefault(gpu.total, []).append((max(short, 0), gpu))
            for group in groups.values():
                if len(group) >= needed:
                    chosen = sorted(group, key=lambda item: (item[0], item[1].index))[:needed]
                    options.append((sum(short for short, _ in chosen), node, chosen))
        for _, _, chosen in sorted(options, key=lambda option: option[:2])[:nodes_tried]:
            mark = self.mark()
            room = frozen | {gpu.key for _, gpu in chosen}
            for short, gpu in chosen:
                # Smallest first: small engines fit the holes of GPUs in use, and those that
                # open an empty GPU (of any size) pack many to it, where one large engine would
                # take a GPU of its own; the drain is kept only if it frees more GPUs than it
                # opens. Largest first, with empty GPUs opened only when larger than this one,
                # left 1.077 x an offline first-fit decreasing on the placement benchmark
                # against 1.055 (docs/benchmarks.md). Then by holder: a set's order changes
                # from process to process, and the plan must not.
                for other in sorted(gpu.holders, key=lambda h: (self.single_bytes(h), h)):
                    if short <= 0:
                        break
                    size = self.single_bytes(other)
                    if size and self.move(other, room, opens_above=0) is not None:
                        short -= size
                if short > 0:
                    break
            else:
                moved = self.move(holder, frozen, opens_above=larger_than)
                if moved is not None:
                    return moved
            self.undo(mark)
        self.no_room.add(holder)
        return None

    def single_bytes(self, holder: str) -> int:
        """The bytes of ``holder``'s one engine if it is a movable single-GPU version, else 0."""
        request = self.requests.get(holder)
        if request is None or request.tensor_parallel_size * request.replicas != 1 or \
                not self.movable(holder):
            return 0
        return self.held[holder][0].bytes

    def mark(self) -> int:
        return len(self._log)

    def moves_since(self, mark: int) -> list[Move]:
        return self._log[mark:]

    def undo(self, mark: int) -> None:
        """Take back the moves made since ``mark``, the last first."""
        while len(self._log) > mark:
            move = self._log.pop()
            for reservation in move.target.reservations:
                self.remove(reservation)
            for reservation in move.release:
                self.add(reservation)
            self.held[move.holder] = list(move.release)
            self.moved.discard(move.holder)

    def add(self, reservation: Reservation) -> None:
        gpu = self.gpus.get((reservation.node, reservation.gpu_uuid))
        if gpu is not None:
            gpu.booked += reservation.bytes
            gpu.holders.add(reservation.holder)

    def remove(self, reservation: Reservation) -> None:
        gpu = self.gpus.get((reservation.node, reservation.gpu_uuid))
        if gpu is not None:
            gpu.booked -= reservation.bytes
            gpu.holders.discard(reservation.holder)


def placement_on(request: PlacementRequest, *, node: str, gpus: Sequence[tuple[int, str]],
                 total: int) -> Placement:
    """``request``'s engines on ``gpus`` (index, UUID) of ``node``, each of ``total`` bytes, booked
    as ``place()`` books them: the placement a move loads its engines into."""
    utilization = utilization_for(request.bytes_per_gpu, total)
    booking = booking_bytes(utilization, total)
    tp = request.tensor_parallel_size
    return Placement(
        node=node, device=Device.GPU,
        engines=tuple(tuple(index for index, _ in gpus[i:i + tp])
                      for i in range(0, len(gpus), tp)),
        tensor_parallel_size=tp, gpu_memory_utilization=utilization,
        reservations=tuple(Reservation(node=node, gpu_uuid=uuid, bytes=booking,
                                       holder=request.holder) for _, uuid in gpus))


def plan_defragmentation(fleet: FleetState, requests: Mapping[str, PlacementRequest],
                         budget: MoveBudget) -> DefragmentationPlan:
    """The moves, within ``budget``, that leave the fewest GPUs in use; ``requests`` by holder
    (a holder without one, or on the CPU, stays where it is)."""
    scratch = FleetScratch(fleet, requests)
    before = scratch.in_use()
    drains: list[_Drain] = []
    frozen: set[GpuKey] = set()
    engines_left, bytes_left = budget.engines, budget.bytes
    # A drain that failed may succeed once others have moved: passes until one frees nothing.
    progress = True
    while progress:
        progress = False
        for source in scratch.sources():
            if source.key in frozen or not source.holders:
                continue
            closure = scratch.closure(source)
            holders = sorted({h for gpu in closure for h in gpu.holders}, key=lambda h: (
                -_share(requests[h]) if h in requests else 0, h))
            if not all(map(scratch.movable, holders)) or \
                    sum(requests[h].replicas for h in holders) > engines_left:
                continue
            drain = _drain(scratch, holders, source, frozen | {gpu.key for gpu in closure})
            if drain is None:
                continue
            cost = sum(move.bytes for move in drain[0].moves)
            if sum(move.engines for move in drain[0].moves) > engines_left or \
                    (bytes_left is not None and cost > bytes_left):
                scratch.undo(drain[1])
                continue
            drains.append(drain[0])
            frozen.update(drain[0].freed)
            engines_left -= sum(move.engines for move in drain[0].moves)
            if bytes_left is not None:
                bytes_left -= cost
            progress = True
    return plan_of(scratch, [move for drain in _best_prefix(drains) for move in drain.moves],
                    before)


def plan_room(fleet: FleetState, requests: Mapping[str, PlacementRequest],
              request: PlacementRequest, budget: MoveBudget) -> DefragmentationPlan | None:
    """Moves, within ``budget``, of single-GPU versions off GPUs already in use of one node, after
    which ``request`` (refused where things stand) fits there; None when no such moves exist.
    They make room in large GPUs for what only large GPUs hold. The plan's figures count its
    moves alone, before the request is placed (``place()`` places it, once they are done)."""
    scratch = FleetScratch(fleet, {**requests, request.holder: request})
    scratch.held.setdefault(request.holder, [])
    before = scratch.in_use()
    mark = scratch.mark()
    if scratch.move_making_room(request.holder, set(), larger_than=0) is None:
        return None
    # The request's own placement is left to place(): only the moves that made room.
    moves = [move for move in scratch.moves_since(mark) if move.holder != request.holder]
    if not moves or sum(move.engines for move in moves) > budget.engines or (
            budget.bytes is not None and sum(move.bytes for move in moves) > budget.bytes):
        return None
    return plan_of(scratch, moves, before)


def plan_of(scratch: FleetScratch, moves: list[Move], before: int) -> DefragmentationPlan:
    """``moves`` as a plan: the GPUs they leave empty and open, read against what each GPU held
    before any move, and the GPUs in use before and after."""
    changes = _changes(moves)
    freed = tuple(sorted(key for key, change in changes.items()
                         if scratch.booked_before[key] and not scratch.booked_before[key] + change))
    opened = tuple(sorted(key for key, change in changes.items()
                          if not scratch.booked_before[key] and change))
    return DefragmentationPlan(moves=tuple(moves), freed=freed, opened=opened,
                               gpus_in_use_before=before,
                               gpus_in_use_after=before - len(freed) + len(opened))


def _drain(scratch: FleetScratch, holders: list[str], source: ScratchGpu,
           frozen: set[GpuKey]) -> tuple[_Drain, int] | None:
    """Move every holder off ``source``, or nothing (None) when one cannot move or the drain
    would leave more GPUs in use, or as many with nothing larger opened."""
    mark = scratch.mark()
    for holder in holders:
        move = scratch.move(holder, frozen, opens_above=source.total)
        if move is None:
            move = scratch.move_making_room(holder, frozen, larger_than=source.total)
        if move is None:
            scratch.undo(mark)
            return None
    # The holders' moves and those that made room for them, in order.
    moves = scratch.moves_since(mark)
    # What the drain changed on each GPU it touched: booked after, less the change, was before.
    changes = _changes(moves)
    freed = sorted(key for key, change in changes.items()
                   if not scratch.gpus[key].booked and change)
    opened = sorted(key for key, change in changes.items()
                    if scratch.gpus[key].booked == change and change)
    # As many as it frees is kept only when what it opens is larger (the next drains fill it).
    if len(freed) < len(opened) or (len(freed) == len(opened) and not any(
            scratch.gpus[key].total > source.total for key in opened)):
        scratch.undo(mark)
        return None
    return _Drain(moves, freed, opened), mark


def _changes(moves: list[Move]) -> dict[GpuKey, int]:
    """Bytes booked on each GPU the moves touch, after less before."""
    changes: dict[GpuKey, int] = {}
    for move in moves:
        for reservation in move.target.reservations:
            key = (reservation.node, reservation.gpu_uuid)
            changes[key] = changes.get(key, 0) + reservation.bytes
        for reservation in move.release:
            key = (reservation.node, reservation.gpu_uuid)
            changes[key] = changes.get(key, 0) - reservation.bytes
    return changes


def _best_prefix(drains: list[_Drain]) -> list[_Drain]:
    """The drains up to the one after which the fewest GPUs are in use (the first such)."""
    best, gain, cut = 0, 0, 0
    for i, drain in enumerate(drains):
        gain += len(drain.freed) - len(drain.opened)
        if gain > best:
            best, cut = gain, i + 1
    return drains[:cut]


def _share(request: PlacementRequest) -> int:
    return request.bytes_per_gpu * request.tensor_parallel_size * request.replicas
