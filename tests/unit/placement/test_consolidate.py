"""bench/placement_consolidate.py: the single-GPU versions laid out again at once, in moves feasible in order.

Each plan is checked by carrying it out on a copy of the fleet (fleet.carry_out): every move's
target fits beside what is booked at its turn (make-before-break, headroom kept), and the count of
GPUs in use afterwards is what the plan says.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from bench.placement_consolidate import _ordered, plan_consolidation
from control_plane.placement.defragment import (
    DefragmentationPlan,
    FleetScratch,
    MoveBudget,
    plan_defragmentation,
)
from control_plane.placement.model import Device, NodeView, PlacementRequest
from control_plane.placement.state import FleetState

from .fleet import carry_out, gpu, in_use, node, random_fleet, request, spread_fleet

UNLIMITED = MoveBudget(engines=1000)


def stuck_fleet() -> tuple[FleetState, dict[str, PlacementRequest]]:
    """Four 80 GiB GPUs, each with a 36 GiB and a 10 GiB engine: no GPU has room for another
    36 GiB engine, so no GPU can be drained; laid out again, two 36s share a GPU and the four
    10s take one, three GPUs in all."""
    large = [request(36, holder=f"large{i}/prod@a:v1") for i in range(4)]
    small = [request(10, holder=f"small{i}/prod@a:v1") for i in range(4)]
    return spread_fleet([node("a", [80, 80, 80, 80])],
                        [(one, "a", (i,)) for i, one in enumerate(large)]
                        + [(one, "a", (i,)) for i, one in enumerate(small)])


def test_a_fleet_no_drain_can_improve_is_laid_out_again_on_fewer_gpus() -> None:
    state, requests = stuck_fleet()
    assert plan_defragmentation(state, requests, UNLIMITED).moves == ()
    plan = plan_consolidation(state, requests, UNLIMITED)
    booked = carry_out(state, plan)
    assert (plan.gpus_in_use_before, plan.gpus_in_use_after) == (4, 3)
    assert len(in_use(booked)) == 3 and len(plan.freed) == 1 and not plan.opened
    assert all(not booked[key] for key in plan.freed)
    # Only what had to move moved: two large engines keep their GPUs.
    assert plan.engines == len(plan.moves) < 8
    assert plan.bytes == sum(m.target.reservations[0].bytes for m in plan.moves) > 0


def test_a_packed_fleet_gets_no_moves() -> None:
    asked = [request(60, holder=f"m{i}/prod@a:v1") for i in range(3)]
    state, requests = spread_fleet([node("a", [80, 80, 80])],
                                   [(one, "a", (i,)) for i, one in enumerate(asked)])
    plan = plan_consolidation(state, requests, UNLIMITED)
    assert plan.moves == () and plan.gpus_in_use_after == plan.gpus_in_use_before == 3


def test_a_plan_over_budget_is_empty_not_partial() -> None:
    state, requests = stuck_fleet()
    whole = plan_consolidation(state, requests, UNLIMITED)
    assert whole.engines > 1
    short = plan_consolidation(state, requests,
                               MoveBudget(engines=whole.engines - 1))
    assert short.moves == () and short.gpus_in_use_after == short.gpus_in_use_before == 4
    bytes_short = plan_consolidation(state, requests,
                                     MoveBudget(engines=1000, bytes=whole.bytes - 1))
    assert bytes_short.moves == ()


def test_multi_gpu_pinned_excluded_and_unknown_versions_are_respected() -> None:
    pinned = request(10, nodes=("a",), holder="pinned/prod@a:v1")
    pair = request(30, tp=2, holder="pair/prod@b:v1")
    unknown = request(10, holder="unknown/prod@b:v1")
    on_cpu = PlacementRequest(**{**request(10, holder="cpu/prod@b:v1").__dict__,
                                 "device": Device.CPU})
    views = [node("a", [80, 80]), node("b", [80, 80, 80], excluded=(2,)),
             NodeView(name="c", gpus=(gpu(0, 80, node="c"),), error="unreadable")]
    state, requests = spread_fleet(views, [
        (pinned, "a", (0,)), (request(10, holder="m/prod@a:v1"), "a", (1,)),
        (pair, "b", (0, 1)), (unknown, "b", (0,)), (on_cpu, "b", (1,))])
    del requests[unknown.holder]
    plan = plan_consolidation(state, requests, UNLIMITED)
    carry_out(state, plan)
    moved = {m.holder for m in plan.moves}
    assert moved and not moved & {pair.holder, unknown.holder, on_cpu.holder}
    targets = {(r.node, r.gpu_uuid) for m in plan.moves for r in m.target.reservations}
    assert not targets & {("b", "GPU-b-2"), ("c", "GPU-c-0")}
    assert all(r.node == "a" for m in plan.moves if m.holder == pinned.holder
               for r in m.target.reservations)


def test_a_cycle_passes_one_engine_through_a_spare_gpu() -> None:
    # A wants B's GPU and B wants A's: neither fits first, so one steps aside to the empty GPU.
    a, b = request(50, holder="a/prod@a:v1"), request(50, holder="b/prod@a:v1")
    state, requests = spread_fleet([node("a", [80, 80, 80])],
                                   [(a, "a", (0,)), (b, "a", (1,))])
    scratch = FleetScratch(state, requests)
    current = {h: scratch.held[h][0] for h in requests}
    moves = _ordered(scratch, requests, current,
                     {a.holder: ("a", "GPU-a-1"), b.holder: ("a", "GPU-a-0")})
    assert moves is not None and len(moves) == 3
    assert [m.holder for m in moves].count(a.holder) == 2  # the smaller name on a tie of size
    assert moves[0].target.reservations[0].gpu_uuid == "GPU-a-2"
    booked = carry_out(state, DefragmentationPlan(moves=tuple(moves)))
    assert not booked[("a", "GPU-a-2")]
    last = {m.holder: m.target.reservations[0].gpu_uuid for m in moves}
    assert last == {a.holder: "GPU-a-1", b.holder: "GPU-a-0"}
    # Each move releases what the one before of the same version booked.
    assert moves[2].release == moves[0].target.reservations


def test_a_cycle_with_no_spare_gpu_gets_no_moves() -> None:
    a, b = request(50, holder="a/prod@a:v1"), request(50, holder="b/prod@a:v1")
    state, requests = spread_fleet([node("a", [80, 80])], [(a, "a", (0,)), (b, "a", (1,))])
    scratch = FleetScratch(state, requests)
    current = {h: scratch.held[h][0] for h in requests}
    assert _ordered(scratch, requests, current,
                    {a.holder: ("a", "GPU-a-1"), b.holder: ("a", "GPU-a-0")}) is None


def test_a_version_pinned_to_its_node_never_steps_aside_onto_another() -> None:
    # The only spare GPU is on node b, where the pinned version may not go: no way through.
    a = request(50, nodes=("a",), holder="a/prod@a:v1")
    b = request(50, nodes=("a",), holder="b/prod@a:v1")
    state, requests = spread_fleet([node("a", [80, 80]), node("b", [80])],
                                   [(a, "a", (0,)), (b, "a", (1,))])
    scratch = FleetScratch(state, requests)
    current = {h: scratch.held[h][0] for h in requests}
    assert _ordered(scratch, requests, current,
                    {a.holder: ("a", "GPU-a-1"), b.holder: ("a", "GPU-a-0")}) is None


def test_the_plan_reads_the_fleet_and_changes_nothing() -> None:
    state, requests = stuck_fleet()
    before = sorted(state.ledger.reservations(), key=repr)
    first = plan_consolidation(state, requests, UNLIMITED)
    assert sorted(state.ledger.reservations(), key=repr) == before
    assert plan_consolidation(state, requests, UNLIMITED) == first


@pytest.mark.parametrize("seed", range(30))
def test_random_fleets_get_plans_that_are_feasible_and_free_what_they_say(seed: int) -> None:
    rng = random.Random(seed)
    state, requests = random_fleet(rng, nodes=5, versions=60)
    plan = plan_consolidation(state, requests, UNLIMITED)
    booked = carry_out(state, plan)
    assert len(in_use(booked)) == plan.gpus_in_use_after <= plan.gpus_in_use_before
    assert (plan.gpus_in_use_after < plan.gpus_in_use_before) == bool(plan.moves)
    assert all(not booked[key] for key in plan.freed)
    # Only single-GPU versions move, each at most twice (once through a spare GPU).
    moves_of = Counter(m.holder for m in plan.moves)
    assert all(requests[h].tensor_parallel_size * requests[h].replicas == 1 for h in moves_of)
    assert max(moves_of.values(), default=0) <= 2
