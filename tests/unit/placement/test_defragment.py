"""plan_defragmentation(): moves that free whole GPUs, feasible in order, within the budget.

Each plan is checked by carrying it out on a copy of the fleet (fleet.carry_out): every
move's target fits beside what is booked at its turn (make-before-break, headroom kept), the
GPUs the plan says it frees hold nothing afterwards, and the count of GPUs in use is what it says.
"""

from __future__ import annotations

import ast
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from control_plane.placement.defragment import (
    DefragmentationPlan,
    MoveBudget,
    plan_defragmentation,
    plan_room,
)
from control_plane.placement.model import Device, NodeView, Placement, PlacementRequest
from control_plane.placement.place import place_on_fleet
from control_plane.placement.state import FleetState

from .fleet import carry_out, fleet_of, gpu, in_use, node, random_fleet, request, spread_fleet

UNLIMITED = MoveBudget(engines=1000)


def test_engines_scattered_on_small_gpus_move_together() -> None:
    # Three 10 GiB engines, one per GPU of a node: two move beside the third, two GPUs freed.
    asked = [request(10, holder=f"m{i}/prod@a:v1") for i in range(3)]
    state, requests = spread_fleet([node("a", [80, 80, 80])],
                                   [(one, "a", (i,)) for i, one in enumerate(asked)])
    plan = plan_defragmentation(state, requests, UNLIMITED)
    booked = carry_out(state, plan)
    assert (plan.gpus_in_use_before, plan.gpus_in_use_after) == (3, 1)
    assert len(plan.moves) == plan.engines == 2 and not plan.opened
    assert all(not booked[key] for key in plan.freed) and len(in_use(booked)) == 1
    assert plan.bytes == sum(r.bytes for m in plan.moves for r in m.target.reservations) > 0


def test_a_packed_fleet_gets_no_moves() -> None:
    # Each GPU holds one engine that no other GPU has room for: nothing can be freed.
    asked = [request(60, holder=f"m{i}/prod@a:v1") for i in range(3)]
    state, requests = fleet_of([node("a", [80, 80, 80])], asked)
    plan = plan_defragmentation(state, requests, UNLIMITED)
    assert plan.moves == () and plan.freed == () and plan.gpus_in_use_after == 3


def test_an_empty_fleet_gets_no_moves() -> None:
    plan = plan_defragmentation(FleetState([node("a", [80, 80])]), {}, UNLIMITED)
    assert plan == DefragmentationPlan()


def test_small_gpus_are_emptied_onto_a_larger_one() -> None:
    # Four 20 GiB engines alone on 24 GiB GPUs fit one 141 GiB GPU: one opened, four freed.
    asked = [request(20, holder=f"m{i}/prod@a:v1") for i in range(4)]
    state, requests = spread_fleet([node("a", [24] * 4), node("b", [141])],
                                   [(one, "a", (i,)) for i, one in enumerate(asked)])
    plan = plan_defragmentation(state, requests, UNLIMITED)
    booked = carry_out(state, plan)
    assert plan.opened == (("b", "GPU-b-0"),) and len(plan.freed) == 4
    assert in_use(booked) == {("b", "GPU-b-0")} and plan.gpus_in_use_after == 1


def test_opening_a_gpu_the_same_size_is_never_proposed() -> None:
    # Moving the one engine to an empty GPU of its own size frees nothing.
    state, requests = spread_fleet([node("a", [24, 24])], [(request(20), "a", (0,))])
    assert plan_defragmentation(state, requests, UNLIMITED).moves == ()


@pytest.mark.parametrize("engines", [0, 1, 2, 3])
def test_the_budget_bounds_the_engines_moved(engines: int) -> None:
    asked = [request(10, holder=f"m{i}/prod@a:v1") for i in range(4)]
    state, requests = spread_fleet([node("a", [80] * 4)],
                                   [(one, "a", (i,)) for i, one in enumerate(asked)])
    plan = plan_defragmentation(state, requests, MoveBudget(engines=engines))
    carry_out(state, plan)
    assert plan.engines == min(engines, 3)
    assert plan.gpus_in_use_after == 4 - min(engines, 3)


def test_the_budget_bounds_the_bytes_loaded_again() -> None:
    asked = [request(10, holder=f"m{i}/prod@a:v1") for i in range(4)]
    state, requests = spread_fleet([node("a", [80] * 4)],
                                   [(one, "a", (i,)) for i, one in enumerate(asked)])
    one_move = plan_defragmentation(state, requests, MoveBudget(1)).bytes
    plan = plan_defragmentation(state, requests, MoveBudget(10, bytes=2 * one_move))
    assert plan.engines == 2 and plan.bytes <= 2 * one_move


def test_a_version_moves_with_all_its_engines_onto_one_node() -> None:
    # Two replicas on a's GPUs 0 and 1 go together to b, whose GPUs are in use with room.
    pair = request(20, replicas=2, holder="pair/prod@a:v1")
    others = [request(40, holder=f"m{i}/prod@b:v1") for i in range(2)]
    state, requests = spread_fleet([node("a", [80, 80]), node("b", [80, 80])],
                                   [(pair, "a", (0, 1)), (others[0], "b", (0,)),
                                    (others[1], "b", (1,))])
    plan = plan_defragmentation(state, requests, UNLIMITED)
    carry_out(state, plan)
    assert [m.holder for m in plan.moves] == ["pair/prod@a:v1"]
    (move,) = plan.moves
    assert move.target.node == "b" and move.target.engines == ((0,), (1,)) and move.engines == 2
    assert set(plan.freed) == {("a", "GPU-a-0"), ("a", "GPU-a-1")}


def test_gpus_that_share_a_version_are_drained_together() -> None:
    # X (tp 2) on a's GPUs 0-1 and Y (tp 2) on 1-2: no GPU of a empties unless both move, and
    # they do, in one drain, onto b's two GPUs already in use: three GPUs freed, none opened.
    x = request(8, tp=2, holder="x/prod@a:v1")
    y = request(8, tp=2, holder="y/prod@a:v1")
    held = [request(30, holder=f"w{i}/prod@b:v1") for i in range(2)]
    state, requests = spread_fleet([node("a", [24] * 3), node("b", [80, 80])],
                                   [(x, "a", (0, 1)), (y, "a", (1, 2)),
                                    (held[0], "b", (0,)), (held[1], "b", (1,))])
    plan = plan_defragmentation(state, requests, UNLIMITED)
    booked = carry_out(state, plan)
    assert sorted(m.holder for m in plan.moves) == [x.holder, y.holder]
    assert set(plan.freed) == {("a", f"GPU-a-{i}") for i in range(3)} and not plan.opened
    assert in_use(booked) == {("b", "GPU-b-0"), ("b", "GPU-b-1")}


def test_the_smallest_gpus_are_drained_first() -> None:
    # The budget allows one drain: the 24 GiB GPU's two engines go to the 141 GiB GPU, rather
    # than the 80 GiB GPU's one (its engines go where a larger GPU holds them).
    small = [request(5, holder=f"s{i}/prod@a:v1") for i in range(2)]
    large = request(10, holder="l/prod@b:v1")
    full = request(100, holder="f/prod@c:v1")
    state, requests = spread_fleet([node("a", [24]), node("b", [80]), node("c", [141])],
                                   [(small[0], "a", (0,)), (small[1], "a", (0,)),
                                    (large, "b", (0,)), (full, "c", (0,))])
    plan = plan_defragmentation(state, requests, MoveBudget(engines=2))
    carry_out(state, plan)
    assert plan.freed == (("a", "GPU-a-0"),) and plan.engines == 2


def test_room_is_made_on_larger_gpus_for_a_version_on_several() -> None:
    # X (tp 2, 15 GiB a GPU) alone on a's two 24 GiB GPUs fits no node as things stand: b's GPU 0
    # lacks 9 GiB. Y (10 GiB, the smallest that covers it) moves off it to c, then X to b: a's
    # two GPUs freed, none opened.
    # GPU by GPU, no drain frees anything: c's V takes b's last room, and W then stays.
    x = request(15, tp=2, holder="x/prod@a:v1")
    w, y = request(60, holder="w/prod@b:v1"), request(10, holder="y/prod@b:v1")
    t, v = request(50, holder="t/prod@b:v1"), request(10, holder="v/prod@c:v1")
    state, requests = spread_fleet([node("a", [24, 24]), node("b", [80, 80]), node("c", [80])],
                                   [(x, "a", (0, 1)), (w, "b", (0,)), (y, "b", (0,)),
                                    (t, "b", (1,)), (v, "c", (0,))])
    plan = plan_defragmentation(state, requests, UNLIMITED)
    booked = carry_out(state, plan)
    assert [m.holder for m in plan.moves][:2] == [y.holder, x.holder]
    assert plan.moves[0].target.node == "c" and plan.moves[1].target.node == "b"
    assert {("a", "GPU-a-0"), ("a", "GPU-a-1")} <= set(plan.freed) and not plan.opened
    assert len(in_use(booked)) == plan.gpus_in_use_after == 3


def test_room_made_may_open_smaller_gpus_when_the_drain_frees_more() -> None:
    # X (tp 8, 40 GiB a GPU) alone on s's eight 48 GiB GPUs fits no node as things stand: each of
    # b's 141 GiB GPUs holds 100 GiB and lacks 6. Its two 5 GiB engines move off each, the
    # smallest first, to e's empty 48 GiB GPUs (nine to one), then X to b: eight GPUs freed for
    # two opened. Moved off largest first, or onto larger GPUs only, nothing could move.
    x = request(40, tp=8, holder="x/prod@s:v1")
    placed = [(x, "s", tuple(range(8)))]
    for i in range(8):
        placed += [(request(90, holder=f"big{i}/prod@b:v1"), "b", (i,)),
                   (request(5, holder=f"small{i}a/prod@b:v1"), "b", (i,)),
                   (request(5, holder=f"small{i}b/prod@b:v1"), "b", (i,))]
    state, requests = spread_fleet([node("s", [48] * 8), node("b", [141] * 8),
                                    node("e", [48, 48])], placed)
    plan = plan_defragmentation(state, requests, UNLIMITED)
    booked = carry_out(state, plan)
    moved = {m.holder: m.target.node for m in plan.moves}
    assert moved[x.holder] == "b" and not any(h.startswith("big") for h in moved)
    assert {node for h, node in moved.items() if h.startswith("small")} == {"e"}
    assert len(moved) == 17
    assert set(plan.freed) == {("s", f"GPU-s-{i}") for i in range(8)}
    assert set(plan.opened) == {("e", "GPU-e-0"), ("e", "GPU-e-1")}
    assert len(in_use(booked)) == plan.gpus_in_use_after == 10


def test_room_is_made_for_a_refused_request() -> None:
    # 70 GiB fits no GPU: c's lacks 4 GiB, h's 16. V (10 GiB) moves off c's to h's, then it fits.
    v = request(10, holder="v/prod@c:v1")
    s1, s2 = request(40, holder="s1/prod@h:v1"), request(40, holder="s2/prod@h:v1")
    state, requests = spread_fleet([node("c", [80]), node("h", [141])],
                                   [(v, "c", (0,)), (s1, "h", (0,)), (s2, "h", (0,))])
    refused = request(70, holder="r/prod@c:v1")
    assert not isinstance(place_on_fleet(refused, state), Placement)
    plan = plan_room(state, requests, refused, UNLIMITED)
    assert plan is not None and [m.holder for m in plan.moves] == [v.holder]
    carry_out(state, plan)
    for move in plan.moves:
        state.book(move.target.reservations)
        state.release(move.release)
    placed = place_on_fleet(refused, state)
    assert isinstance(placed, Placement) and placed.node == "c"
    # The plan counts its moves alone: c's GPU is empty until the request takes it.
    assert (plan.gpus_in_use_before, plan.gpus_in_use_after) == (2, 1)


def test_no_room_plan_when_none_can_be_made() -> None:
    asked = [request(60, holder=f"m{i}/prod@a:v1") for i in range(2)]
    state, requests = fleet_of([node("a", [80, 80])], asked)
    assert plan_room(state, requests, request(60, holder="r/prod@a:v1"), UNLIMITED) is None


def tied_plan() -> list[tuple[str, str, tuple[tuple[int, ...], ...]]]:
    """A plan that has to choose between two equal versions: W1 or W2 (10 GiB each, the
    smallest) moves off b's GPU 0 to c to make room for X (tp 2, off a's small GPUs); one is
    enough."""
    x = request(15, tp=2, holder="x/prod@a:v1")
    w1, w2 = request(10, holder="w1/prod@b:v1"), request(10, holder="w2/prod@b:v1")
    t, y = request(50, holder="t/prod@b:v1"), request(50, holder="y/prod@b:v1")
    v = request(10, holder="v/prod@c:v1")
    state, requests = spread_fleet([node("a", [24, 24]), node("b", [80, 80]), node("c", [80])],
                                   [(x, "a", (0, 1)), (w1, "b", (0,)), (w2, "b", (0,)),
                                    (t, "b", (0,)), (y, "b", (1,)), (v, "c", (0,))])
    plan = plan_defragmentation(state, requests, UNLIMITED)
    carry_out(state, plan)
    return [(m.holder, m.target.node, m.target.engines) for m in plan.moves]


def test_the_same_fleet_gets_the_same_plan_in_every_process() -> None:
    # A set of holders iterates in an order that changes with the process's hash seed: an
    # operator rerunning a plan, or a second replica computing it, must get the same moves.
    code = "from placement.test_defragment import tied_plan; print(tied_plan())"
    plans = {subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1],
                            env={**os.environ, "PYTHONHASHSEED": str(seed)}, check=True,
                            capture_output=True, text=True).stdout for seed in range(8)}
    assert len(plans) == 1, plans
    moves = [(holder, target) for holder, target, _ in ast.literal_eval(plans.pop())]
    assert moves[:2] == [("w1/prod@b:v1", "c"), ("x/prod@a:v1", "b")]


def test_excluded_unhealthy_and_other_nodes_are_never_targets() -> None:
    base = request(10, holder="m0/prod@a:v1")
    pinned = PlacementRequest(**{**base.__dict__, "holder": "m1/prod@a:v1", "nodes": ("a",)})
    views = [node("a", [80, 80]), node("b", [80, 80], excluded=(0,)),
             NodeView(name="c", gpus=(gpu(0, 80, node="c"),), error="unreadable")]
    state, requests = spread_fleet(views, [(base, "a", (0,)), (pinned, "a", (1,)),
                                           (request(10, holder="x/prod@b:v1"), "b", (0,))])
    plan = plan_defragmentation(state, requests, UNLIMITED)
    targets = {(r.node, r.gpu_uuid) for m in plan.moves for r in m.target.reservations}
    assert not targets & {("b", "GPU-b-0"), ("c", "GPU-c-0")}
    assert all(r.node == "a" for m in plan.moves if m.holder == pinned.holder
               for r in m.target.reservations)
    carry_out(state, plan)


def test_versions_without_a_request_or_on_the_cpu_stay_put() -> None:
    asked = [request(10, holder=f"m{i}/prod@a:v1") for i in range(2)]
    state, requests = spread_fleet([node("a", [80, 80])],
                                   [(one, "a", (i,)) for i, one in enumerate(asked)])
    assert plan_defragmentation(state, {}, UNLIMITED).moves == ()
    on_cpu = {h: PlacementRequest(**{**r.__dict__, "device": Device.CPU})
              for h, r in requests.items()}
    assert plan_defragmentation(state, on_cpu, UNLIMITED).moves == ()


def test_the_plan_reads_the_fleet_and_changes_nothing() -> None:
    asked = [request(10, holder=f"m{i}/prod@a:v1") for i in range(3)]
    state, requests = spread_fleet([node("a", [80, 80, 80])],
                                   [(one, "a", (i,)) for i, one in enumerate(asked)])
    before = sorted(state.ledger.reservations(), key=repr)
    first = plan_defragmentation(state, requests, UNLIMITED)
    assert sorted(state.ledger.reservations(), key=repr) == before
    assert plan_defragmentation(state, requests, UNLIMITED) == first


@pytest.mark.parametrize("seed", range(30))
def test_random_fleets_get_plans_that_are_feasible_and_free_what_they_say(seed: int) -> None:
    rng = random.Random(seed)
    state, requests = random_fleet(rng, nodes=5, versions=60)
    budget = MoveBudget(engines=rng.choice([1, 3, 10, 100]))
    plan = plan_defragmentation(state, requests, budget)
    booked = carry_out(state, plan)
    assert plan.engines <= budget.engines
    assert all(not booked[key] for key in plan.freed)
    assert len(in_use(booked)) == plan.gpus_in_use_after <= plan.gpus_in_use_before
    assert (plan.gpus_in_use_after < plan.gpus_in_use_before) == bool(plan.moves)
    assert len({m.holder for m in plan.moves}) == len(plan.moves)
