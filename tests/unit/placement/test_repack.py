"""bench/placement_repack.py: a MIP repack of neighbourhoods, feasible in order, within its time.

Plans are checked as test_defragment checks them: carried out in order on a copy of the
fleet's bookings with arithmetic written there, every target fitting at its turn.
"""

from __future__ import annotations

import random
import time

import pytest

from bench.placement_repack import RepackSettings, RepackStats, plan_repack
from control_plane.placement.defragment import MoveBudget, plan_defragmentation

from .fleet import carry_out, in_use, node, random_fleet, request, spread_fleet

SETTINGS = RepackSettings(rounds=2, seconds=2.0)


def test_it_frees_gpus_where_draining_one_at_a_time_cannot() -> None:
    # A, tensor parallel 2, fills two 48 GiB GPUs; the 141 GiB GPUs would take it beside B and D
    # once C and E leave them for the room next to F and G. No drain that moves only what is on
    # the GPUs drained frees anything; the defragmentation planner, which makes room that way
    # too, frees the same two.
    a = request(40, tp=2, holder="a/prod@s:v1")
    b, c, d, e = (request(size, holder=f"{name}/prod@l:v1")
                  for name, size in (("b", 70), ("c", 30), ("d", 70), ("e", 30)))
    f, g = (request(40, holder=f"{name}/prod@m:v1") for name in ("f", "g"))
    state, requests = spread_fleet(
        [node("s", [48, 48]), node("l", [141, 141]), node("m", [80, 80])],
        [(a, "s", (0, 1)), (b, "l", (0,)), (c, "l", (0,)), (d, "l", (1,)), (e, "l", (1,)),
         (f, "m", (0,)), (g, "m", (1,))])
    drained = plan_defragmentation(state, requests, MoveBudget(engines=100))
    assert (drained.gpus_in_use_before, drained.gpus_in_use_after) == (6, 4)
    plan = plan_repack(state, requests, SETTINGS)
    booked = carry_out(state, plan)
    assert (plan.gpus_in_use_before, plan.gpus_in_use_after) == (6, 4)
    assert set(plan.freed) == {("s", "GPU-s-0"), ("s", "GPU-s-1")} and plan.opened == ()
    assert in_use(booked) == {("l", "GPU-l-0"), ("l", "GPU-l-1"),
                              ("m", "GPU-m-0"), ("m", "GPU-m-1")}
    # C and E make room before A moves in: the order is what makes it feasible.
    assert [move.holder for move in plan.moves][-1] == a.holder


def test_a_packed_fleet_keeps_its_placement() -> None:
    asked = [request(60, holder=f"m{i}/prod@a:v1") for i in range(3)]
    state, requests = spread_fleet([node("a", [80, 80, 80])],
                                   [(one, "a", (i,)) for i, one in enumerate(asked)])
    plan = plan_repack(state, requests, SETTINGS)
    assert plan.moves == () and plan.gpus_in_use_after == plan.gpus_in_use_before == 3


def test_versions_without_a_request_stay_put() -> None:
    asked = [request(10, holder=f"m{i}/prod@a:v1") for i in range(3)]
    state, _ = spread_fleet([node("a", [80, 80, 80])],
                            [(one, "a", (i,)) for i, one in enumerate(asked)])
    assert plan_repack(state, {}, SETTINGS).moves == ()


def test_each_round_stops_at_its_time_limit() -> None:
    rng = random.Random(7)
    state, requests = random_fleet(rng, nodes=8, versions=120)
    stats = RepackStats()
    started = time.perf_counter()
    plan_repack(state, requests, RepackSettings(rounds=3, seconds=0.2), stats=stats)
    assert stats.rounds == 3 and all(seconds < 1.0 for seconds in stats.solver_s)
    assert time.perf_counter() - started < 10


@pytest.mark.parametrize("seed", range(12))
def test_random_fleets_get_plans_that_are_feasible_in_order(seed: int) -> None:
    rng = random.Random(seed)
    state, requests = random_fleet(rng, nodes=5, versions=60)
    before = sorted(state.ledger.reservations(), key=repr)
    plan = plan_repack(state, requests, RepackSettings(rounds=3, seconds=0.3))
    assert sorted(state.ledger.reservations(), key=repr) == before
    booked = carry_out(state, plan)
    assert all(not booked[key] for key in plan.freed)
    assert len(in_use(booked)) == plan.gpus_in_use_after <= plan.gpus_in_use_before
    assert (plan.gpus_in_use_after < plan.gpus_in_use_before) == bool(plan.moves)
    assert len({move.holder for move in plan.moves}) == len(plan.moves)
