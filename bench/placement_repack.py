"""Repacking several versions at once, across GPU kinds, with a MIP solved by HiGHS: a trial.

``plan_defragmentation()`` moves one version at a time and leaves what needs several moved
together: a version of tensor parallelism 8 on a node of 80 GB GPUs that a node of 141 GB GPUs
would take if the small engines on it moved elsewhere first (docs/benchmarks.md). This planner
repacks small neighbourhoods of nodes instead, a few per plan: one node that wastes the most GPUs
counted in the fleet's largest (its GPUs in use, less its bookings in units of the largest GPU),
the nodes in use with the most room, and one empty node of the largest GPUs. Every version whose
engines are all on the neighbourhood's usable GPUs is placed again by a MIP over those GPUs, the
rest stays as booked; the MIP minimises the GPUs in use plus ``move_cost`` per engine reloaded,
starts from the current placement and stops at its time limit. A version either keeps every GPU
it has or leaves all of them (its engines move together, never onto a GPU they hold).

The moves are ordered so that each books its target beside what is booked at its turn, before
its old engines are released; moves that never fit (a cycle that needs room to pass through)
are dropped, and a neighbourhood's moves are kept only if, so carried out, they leave fewer
GPUs in use. A version moves at most once per plan.

It lives in the benchmark, not in ``control_plane.placement``: the domain imports no solver
(``pyproject.toml``'s import contract), and it did not earn the runtime dependency (see
docs/benchmarks.md, Placement).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import highspy
import numpy as np

from bench.placement_optimum import MipModel
from control_plane.placement.accounting import engine_fit, usable_bytes
from control_plane.placement.defragment import DefragmentationPlan, Move, placement_on
from control_plane.placement.model import Device, PlacementRequest, Reservation
from control_plane.placement.state import FleetState

# A GPU as the ledger files it: (node, uuid).
GpuKey = tuple[str, str]


@dataclass(frozen=True)
class RepackSettings:
    """How much one plan looks at and may spend."""

    # Neighbourhoods solved per plan, and the solver's time limit for each.
    rounds: int = 3
    seconds: float = 2.0
    # Per neighbourhood: nodes that waste the most, nodes in use with the most room (and one
    # empty node of the largest GPUs).
    sources: int = 1
    rooms: int = 3
    # In GPUs per engine reloaded: 0.05 moves 20 engines to free one GPU at most.
    move_cost: float = 0.05


@dataclass
class RepackStats:
    """What the plans cost the solver and what they found, summed over plans."""

    rounds: int = 0
    improved: int = 0
    solver_s: list[float] = field(default_factory=list)
    columns: list[int] = field(default_factory=list)
    moves_dropped: int = 0


@dataclass
class _Gpu:
    key: GpuKey
    index: int
    total: int
    # Memory in use that is none of our loaded engines: it stays put.
    foreign: int
    booked: int = 0
    holders: set[str] = field(default_factory=set)


class _Fleet:
    """The GPUs and who holds what, changed as the plan's moves are decided."""

    def __init__(self, fleet: FleetState, requests: Mapping[str, PlacementRequest]) -> None:
        self.requests = requests
        self.gpus: dict[GpuKey, _Gpu] = {}
        # Per node, its GPUs that may take an engine (readable, healthy, not excluded).
        self.usable: dict[str, list[_Gpu]] = {}
        for view in fleet.nodes:
            if view.error is not None:
                continue
            books = fleet.ledger.node(view.name)
            for reading, verdict in zip(view.gpus, fleet.reading_verdicts(view), strict=True):
                book = books.get(reading.uuid)
                used, active = reading.memory_used_bytes or 0, book.active if book else 0
                gpu = _Gpu((view.name, reading.uuid), reading.index,
                           reading.memory_total_bytes or 0, max(0, used - active))
                self.gpus[gpu.key] = gpu
                if verdict is None:
                    self.usable.setdefault(view.name, []).append(gpu)
        self.usable_keys = {gpu.key for gpus in self.usable.values() for gpu in gpus}
        self.held: dict[str, list[Reservation]] = {}
        for reservation in fleet.ledger.reservations():
            self.held.setdefault(reservation.holder, []).append(reservation)
            self._add(reservation)
        self.booked_before = {key: gpu.booked for key, gpu in self.gpus.items()}
        self.moved: set[str] = set()

    def in_use(self) -> int:
        return sum(1 for gpu in self.gpus.values() if gpu.booked)

    def movable(self, holder: str, nodes: set[str]) -> bool:
        """A GPU engine placed with a known request, all on usable GPUs of ``nodes``, not moved
        yet by this plan (a second move would release what the first has not loaded yet)."""
        request = self.requests.get(holder)
        return request is not None and request.device is Device.GPU and \
            holder not in self.moved and all(
                r.node in nodes and (r.node, r.gpu_uuid) in self.usable_keys
                for r in self.held[holder])

    def apply(self, move: Move) -> None:
        for reservation in move.target.reservations:
            self._add(reservation)
        for reservation in move.release:
            self._remove(reservation)
        self.held[move.holder] = list(move.target.reservations)
        self.moved.add(move.holder)

    def _add(self, reservation: Reservation) -> None:
        gpu = self.gpus.get((reservation.node, reservation.gpu_uuid))
        if gpu is not None:
            gpu.booked += reservation.bytes
            gpu.holders.add(reservation.holder)

    def _remove(self, reservation: Reservation) -> None:
        gpu = self.gpus.get((reservation.node, reservation.gpu_uuid))
        if gpu is not None:
            gpu.booked -= reservation.bytes
            gpu.holders.discard(reservation.holder)


def plan_repack(fleet: FleetState, requests: Mapping[str, PlacementRequest],
                settings: RepackSettings, *, turn: int = 0,
                stats: RepackStats | None = None) -> DefragmentationPlan:
    """Moves, in an order that never over-commits, that leave fewer GPUs in use; ``turn``
    (the plan's number) rotates the neighbourhoods from one plan to the next."""
    stats = stats if stats is not None else RepackStats()
    scratch = _Fleet(fleet, requests)
    before = scratch.in_use()
    moves: list[Move] = []
    for round_ in range(settings.rounds):
        nodes = _neighbourhood(scratch, settings, turn * settings.rounds + round_)
        found = _repack(scratch, nodes, settings, stats)
        stats.rounds += 1
        stats.improved += bool(found)
        for move in found:
            scratch.apply(move)
        moves.extend(found)
    changes = _changes(moves)
    booked = scratch.booked_before
    freed = tuple(sorted(k for k, change in changes.items() if booked[k] and not booked[k] + change))
    opened = tuple(sorted(k for k, change in changes.items() if not booked[k] and change))
    return DefragmentationPlan(moves=tuple(moves), freed=freed, opened=opened,
                               gpus_in_use_before=before,
                               gpus_in_use_after=before - len(freed) + len(opened))


def _neighbourhood(scratch: _Fleet, settings: RepackSettings, turn: int) -> list[str]:
    """One node of the most wasteful (by turn), the nodes in use with the most room (GPU memory
    counted in the largest GPU's units, so room on large GPUs first), one empty node."""
    largest = max((gpu.total for gpu in scratch.gpus.values()), default=1)
    waste: dict[str, float] = {}
    room: dict[str, float] = {}
    for name, gpus in scratch.usable.items():
        in_use = [gpu for gpu in gpus if gpu.booked]
        waste[name] = len(in_use) - sum(gpu.booked for gpu in in_use) / largest
        room[name] = sum((gpu.total - gpu.booked - gpu.foreign) * gpu.total / largest
                         for gpu in gpus) if in_use else 0.0
    wasteful = [name for name in sorted(waste, key=lambda n: (-waste[n], n)) if waste[name] > 0.5]
    chosen: list[str] = []
    pool = wasteful[:8 * settings.sources]
    if pool:
        first = (turn * settings.sources) % len(pool)
        chosen.extend(dict.fromkeys((pool * 2)[first:first + settings.sources]))
    for name in sorted((n for n in room if room[n]), key=lambda n: (-room[n], n)):
        if len(chosen) >= settings.sources + settings.rooms:
            break
        if name not in chosen:
            chosen.append(name)
    empty = sorted((name for name in scratch.usable if not room[name] and
                    not any(gpu.booked for gpu in scratch.usable[name])),
                   key=lambda n: (-max(gpu.total for gpu in scratch.usable[n]), n))
    return chosen + empty[:1]


class _Program(MipModel):
    """The MIP's columns (binary) and rows, with the current placement as its start."""

    def __init__(self) -> None:
        super().__init__()
        self.start: list[float] = []

    def binary(self, start: bool, cost: float = 0.0) -> int:
        self.start.append(1.0 if start else 0.0)
        return self.column(1.0, cost)

    def solve(self, seconds: float) -> list[float] | None:
        solver = self.highs(seconds, threads=1)
        start = highspy.HighsSolution()
        start.col_value = self.start
        start.value_valid = True
        solver.setSolution(start)
        solver.run()
        values = list(solver.getSolution().col_value)
        return values if len(values) == len(self.cost) else None

    def value(self, values: Sequence[float]) -> float:
        return float(np.dot(self.cost, values))


def _repack(scratch: _Fleet, nodes: list[str], settings: RepackSettings,
            stats: RepackStats) -> list[Move]:
    """The moves that place the neighbourhood's versions again, or none if they free nothing."""
    selected = set(nodes)
    requests, held = scratch.requests, scratch.held
    free = sorted({holder for name in nodes for gpu in scratch.usable[name]
                   for holder in gpu.holders if scratch.movable(holder, selected)})
    if not free:
        return []
    kept = set(free)
    # Per GPU, what stays booked on it whatever the MIP does; and the headroom it must keep
    # (the largest asked by a version that may land there).
    fixed = {gpu.key: gpu.foreign + sum(r.bytes for holder in gpu.holders if holder not in kept
                                        for r in held[holder] if (r.node, r.gpu_uuid) == gpu.key)
             for name in nodes for gpu in scratch.usable[name]}
    headroom = max(requests[holder].headroom_fraction for holder in free)
    program = _Program()
    in_use: dict[GpuKey, int] = {}
    load: dict[GpuKey, list[tuple[int, float]]] = {}
    for name in nodes:
        for gpu in scratch.usable[name]:
            in_use[gpu.key] = program.binary(bool(gpu.booked), cost=1.0)
            load[gpu.key] = []
            if fixed[gpu.key] or any(holder not in kept for holder in gpu.holders):
                program.row([(in_use[gpu.key], 1.0)], 1.0, 1.0)
    share: dict[tuple[str, GpuKey], int] = {}
    for holder in free:
        request = requests[holder]
        needed = request.tensor_parallel_size * request.replicas
        current = {(r.node, r.gpu_uuid) for r in held[holder]}
        choices: list[tuple[int, float]] = []
        for name in request.nodes or nodes:
            if name not in selected:
                continue
            sizes: dict[int, list[_Gpu]] = {}
            for gpu in scratch.usable[name]:
                sizes.setdefault(gpu.total, []).append(gpu)
            # One node, GPUs of one size: a column for each such group that can hold it.
            for total, gpus in sizes.items():
                booking, usable = engine_fit(request.bytes_per_gpu, request.headroom_fraction,
                                             total)
                fits = [gpu for gpu in gpus if booking <= usable - fixed[gpu.key]]
                if len(fits) < needed:
                    continue
                chosen = program.binary(current <= {gpu.key for gpu in fits})
                terms = []
                for gpu in fits:
                    column = share[(holder, gpu.key)] = program.binary(gpu.key in current)
                    terms.append((column, 1.0))
                    load[gpu.key].append((column, float(booking)))
                program.row([*terms, (chosen, -float(needed))], 0.0, 0.0)
                choices.append((chosen, 1.0))
        program.row(choices, 1.0, 1.0)
        # It keeps every GPU it has (and costs nothing) or leaves all of them.
        own = [share[(holder, key)] for key in sorted(current) if (holder, key) in share]
        if len(own) == len(current):
            for column in own[1:]:
                program.row([(column, 1.0), (own[0], -1.0)], 0.0, 0.0)
            program.cost[own[0]] -= settings.move_cost * request.replicas
        else:
            for column in own:
                program.upper[column] = 0.0
    for key, terms in load.items():
        gpu = scratch.gpus[key]
        room = usable_bytes(gpu.total, headroom) - fixed[key]
        program.row([*terms, (in_use[key], -float(room))], -np.inf, 0.0)
    started = time.perf_counter()
    values = program.solve(settings.seconds)
    stats.solver_s.append(time.perf_counter() - started)
    stats.columns.append(len(program.cost))
    # Half a GPU better at least: a solution no better than the start moves nothing.
    if values is None or program.value(values) > program.value(program.start) - 0.5:
        return []
    wanted = []
    for holder in free:
        current = {(r.node, r.gpu_uuid) for r in held[holder]}
        new = sorted((key for (h, key), column in share.items()
                      if h == holder and values[column] > 0.5),
                     key=lambda key: scratch.gpus[key].index)
        if not new or set(new) == current or len({key[0] for key in new}) != 1:
            continue
        target = placement_on(requests[holder], node=new[0][0],
                              gpus=[(scratch.gpus[key].index, key[1]) for key in new],
                              total=scratch.gpus[new[0]].total)
        wanted.append(Move(holder, tuple(held[holder]), target))
    moves = _ordered(scratch, wanted)
    stats.moves_dropped += len(wanted) - len(moves)
    changes = _changes(moves)
    booked = {key: scratch.gpus[key].booked for key in changes}
    freed = sum(1 for key, change in changes.items() if booked[key] and not booked[key] + change)
    opened = sum(1 for key, change in changes.items() if not booked[key] and change)
    return moves if freed > opened else []


def _ordered(scratch: _Fleet, wanted: list[Move]) -> list[Move]:
    """``wanted`` in an order where each target fits beside what is booked at its turn (then its
    old engines go); the moves that never fit are dropped."""
    booked = Counter({key: gpu.booked + gpu.foreign for key, gpu in scratch.gpus.items()})
    pending, done = list(wanted), []
    progress = True
    while pending and progress:
        progress = False
        for move in list(pending):
            headroom = scratch.requests[move.holder].headroom_fraction
            if all(booked[(r.node, r.gpu_uuid)] + r.bytes
                   <= usable_bytes(scratch.gpus[(r.node, r.gpu_uuid)].total, headroom)
                   for r in move.target.reservations):
                for reservation in move.target.reservations:
                    booked[(reservation.node, reservation.gpu_uuid)] += reservation.bytes
                for reservation in move.release:
                    booked[(reservation.node, reservation.gpu_uuid)] -= reservation.bytes
                done.append(move)
                pending.remove(move)
                progress = True
    return done


def _changes(moves: Sequence[Move]) -> dict[GpuKey, int]:
    """Bytes booked on each GPU the moves touch, after less before."""
    changes: Counter[GpuKey] = Counter()
    for move in moves:
        for reservation in move.target.reservations:
            changes[(reservation.node, reservation.gpu_uuid)] += reservation.bytes
        for reservation in move.release:
            changes[(reservation.node, reservation.gpu_uuid)] -= reservation.bytes
    return dict(changes)
