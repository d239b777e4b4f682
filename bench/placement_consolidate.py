"""Consolidation, a trial: every single-GPU engine laid out again at once, as an operator would in
a maintenance window, with its cost.

``plan_defragmentation()`` drains one GPU at a time and stops where no GPU can be drained; at that
point a few percent is lost on each GPU, which no drain gets back. This planner asks whether
placing the single-GPU versions again all together, largest first, into the room the multi-GPU
versions leave, gets it back: it moves hundreds of engines at once, far more than a background
plan should. It lives in the benchmark, not in ``control_plane.placement``: measured on the
placement benchmark it did not earn a place in the product (docs/benchmarks.md, Placement: run
every 500 arrivals it left the mean GPUs in use where they were, because the plans every 50
arrivals already get most of it back and the next arrivals lose it again).

The layout: multi-GPU versions (and versions that cannot move: on the CPU, without a known
request, on GPUs the fleet no longer reads) stay where they are. The movable single-GPU versions
are lifted off and placed again, largest share first, each on the GPU in use where it leaves the
least room (its own GPU on a tie, so that it stays put), or else on an empty GPU, the largest first
(its own GPU among those of that size), under the placement rules (healthy, not excluded, room for
its booking on that GPU, on the nodes its request allows).

The moves are make-before-break and feasible in order: each books its target beside what is
booked at its turn, then releases the old reservation. Where the remaining moves form cycles (A
goes where B is, B where A is, neither fits first), one of them passes through an empty GPU the
layout leaves empty: two moves of that version, the first to the spare GPU. A plan that would not
leave fewer GPUs in use, or that costs more than its budget, is empty: a partial layout frees
nothing predictable. Deterministic: same state and requests, same plan.
"""

from __future__ import annotations

from collections.abc import Mapping

from control_plane.placement.accounting import engine_fit
from control_plane.placement.defragment import (
    DefragmentationPlan,
    FleetScratch,
    GpuKey,
    Move,
    MoveBudget,
    ScratchGpu,
    placement_on,
    plan_of,
)
from control_plane.placement.model import PlacementRequest, Reservation
from control_plane.placement.state import FleetState


def plan_consolidation(fleet: FleetState, requests: Mapping[str, PlacementRequest],
                       budget: MoveBudget) -> DefragmentationPlan:
    """Every movable single-GPU version placed again at once (above); the moves that get there,
    or no moves when the layout frees no GPU or costs more than ``budget``."""
    scratch = FleetScratch(fleet, requests)
    before = scratch.in_use()
    singles = sorted((h for h in scratch.held if scratch.single_bytes(h)),
                     key=lambda h: (-requests[h].bytes_per_gpu, h))
    current = {h: scratch.held[h][0] for h in singles}
    for holder in singles:
        scratch.remove(current[holder])
    wanted: dict[str, GpuKey] = {}
    laid: dict[str, Reservation] = {}
    for holder in singles:
        target = _best_gpu(scratch, requests[holder], (current[holder].node,
                                                       current[holder].gpu_uuid))
        if target is None:
            # Nowhere else: it keeps its GPU (it fitted there before; it fits there now).
            target = (current[holder].node, current[holder].gpu_uuid)
        gpu = scratch.gpus[target]
        placement = placement_on(requests[holder], node=target[0],
                                 gpus=[(gpu.index, target[1])], total=gpu.total)
        scratch.add(placement.reservations[0])
        wanted[holder], laid[holder] = target, placement.reservations[0]
    after = scratch.in_use()
    # The layout decided, the scratch goes back to the fleet as it is: the moves are ordered on it.
    for holder in singles:
        scratch.remove(laid[holder])
        scratch.add(current[holder])
    if after >= before:
        return plan_of(scratch, [], before)
    moves = _ordered(scratch, requests, current, {h: wanted[h] for h in singles
                                         if wanted[h] != (current[h].node, current[h].gpu_uuid)})
    if moves is None or sum(move.engines for move in moves) > budget.engines or (
            budget.bytes is not None and sum(move.bytes for move in moves) > budget.bytes):
        return plan_of(scratch, [], before)
    return plan_of(scratch, moves, before)


def _best_gpu(scratch: FleetScratch, request: PlacementRequest, own: GpuKey) -> GpuKey | None:
    """The GPU in use where ``request``'s engine leaves the least room (its own on a tie), else
    the largest empty GPU (its own first among those); None when none has room."""
    best_in_use: tuple[int, bool, GpuKey] | None = None
    best_empty: tuple[int, bool, GpuKey] | None = None
    for node in request.nodes or scratch.targets:
        for gpu in scratch.targets.get(node, ()):
            left = _room_left(request, gpu)
            if left < 0:
                continue
            if gpu.booked:
                rank = (left, gpu.key != own, gpu.key)
                if best_in_use is None or rank < best_in_use:
                    best_in_use = rank
            else:
                rank = (-gpu.total, gpu.key != own, gpu.key)
                if best_empty is None or rank < best_empty:
                    best_empty = rank
    chosen = best_in_use or best_empty
    return None if chosen is None else chosen[2]


def _room_left(request: PlacementRequest, gpu: ScratchGpu) -> int:
    """What ``gpu`` keeps usable once ``request``'s engine is booked on it; negative when it
    does not fit."""
    booking, usable = engine_fit(request.bytes_per_gpu, request.headroom_fraction, gpu.total)
    return usable - gpu.booked - gpu.foreign - booking


def _ordered(scratch: FleetScratch, requests: Mapping[str, PlacementRequest],
             current: Mapping[str, Reservation], wanted: dict[str, GpuKey]) -> list[Move] | None:
    """The moves that take each holder in ``wanted`` to its GPU, each fitting beside what is
    booked at its turn; a cycle passes one holder through a GPU that stays empty. None when even
    that cannot go on (no spare GPU has room)."""
    targets = set(wanted.values())
    spare = sorted((gpu for gpus in scratch.targets.values() for gpu in gpus if not gpu.booked
                    and gpu.key not in targets), key=lambda gpu: -gpu.total)
    pending = dict(sorted(wanted.items()))
    where = dict(current)
    stepped_aside: set[str] = set()
    moves: list[Move] = []

    def fits(holder: str, key: GpuKey) -> bool:
        return _room_left(requests[holder], scratch.gpus[key]) >= 0

    def move(holder: str, key: GpuKey) -> None:
        gpu = scratch.gpus[key]
        target = placement_on(requests[holder], node=key[0], gpus=[(gpu.index, key[1])],
                              total=gpu.total)
        release = where[holder]
        where[holder] = target.reservations[0]
        scratch.add(target.reservations[0])
        scratch.remove(release)
        moves.append(Move(holder=holder, release=(release,), target=target))

    while pending:
        ready = [h for h, key in pending.items() if fits(h, key)]
        for holder in ready:
            if fits(holder, pending[holder]):
                move(holder, pending.pop(holder))
        if ready:
            continue
        # A cycle: the smallest pending engine steps aside to a spare GPU, which frees room on
        # its own GPU for another; it reaches its target in a later round.
        # Each steps aside once at most: twice would change nothing.
        waiting = [h for h in pending if h not in stepped_aside]
        if not waiting:
            return None
        holder = min(waiting, key=lambda h: (requests[h].bytes_per_gpu, h))
        allowed = requests[holder].nodes
        aside = next((gpu.key for gpu in spare if (allowed is None or gpu.key[0] in allowed)
                      and fits(holder, gpu.key)), None)
        if aside is None:
            return None
        stepped_aside.add(holder)
        move(holder, aside)
    return moves

