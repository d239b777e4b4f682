"""Placement trials: what more planning buys on the placement benchmark's stream, and what it costs.

The placement benchmark (``bench/placement.py``) plans moves every 50 arrivals, 200 engines at
most, and its ratio to the offline optimum is sampled at three snapshots, 25 arrivals after a
plan. These trials run the same seeded stream through the same ``run_ours()`` with:
- plans more often and smaller (every 25 arrivals, 100 engines; every 10, 40 engines);
- the benchmark's plans and, every 500 arrivals, a consolidation (``bench/placement_consolidate.py``:
  every single-GPU version laid out again at once).

For each: the GPUs in use at every arrival (mean, and against the memory bound with headroom),
at the three snapshots against an offline first-fit decreasing of the versions live there (the
solver's start; the proven bound lies 1-2 % below it, ``bench/results/placement.json``) and, for
both layouts, where the GPUs go (per GPU kind: GPUs in use, the share of their usable memory
booked, and the room left on them; where the engines of tensor-parallel or replicated versions
run), the engines moved, and the GPUs in use by how many arrivals have passed since the last
consolidation, beside the run without it. No MIP is solved here: the benchmark does that for its own run.

    .venv/bin/python -m bench.placement_trials
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from typing import Any

from bench.common import percentile, print_table, write_results
from bench.placement import (
    Defragmenting,
    Placed,
    first_fit_decreasing,
    run_ours,
    snapshot_arrivals,
)
from bench.placement_stream import GPUS_PER_NODE, HEADROOM, NODE_KINDS, Fleet, make_versions
from control_plane.placement.accounting import usable_bytes
from control_plane.placement.defragment import MoveBudget

VERSIONS = 5000
PEAK_DEMAND = 0.80
AT_SNAPSHOTS = -1
# (name, plans every, engines per plan, consolidation every or None, after arrival modulo it;
# AT_SNAPSHOTS: after each snapshot's arrival instead)
TRIALS = [
    ("plans every 50 arrivals, 200 engines (the benchmark's)", 50, 200, None, 0),
    ("plans every 25 arrivals, 100 engines", 25, 100, None, 0),
    ("plans every 10 arrivals, 40 engines", 10, 40, None, 0),
    ("the benchmark's plans; consolidation every 500 arrivals", 50, 200, 500, 25),
    # The snapshots are taken after the arrival's plans: the most a consolidation can show there.
    ("the benchmark's plans; consolidation at each snapshot (its best case)", 50, 200,
     AT_SNAPSHOTS, 0),
]
# The trial whose GPUs in use are followed by arrivals since its last consolidation.
FOLLOWED = 500
# Arrivals left out of the phase table: the fleet filling up, before the first consolidations.
RAMP_UP = 500


def trial(spec: tuple[str, int, int, int | None, int], count: int = VERSIONS) -> dict[str, Any]:
    name, every, engines, consolidate, consolidate_offset = spec
    fleet_bytes = sum(total * nodes * GPUS_PER_NODE for _, total, nodes in NODE_KINDS)
    versions, _ = make_versions(count, PEAK_DEMAND, fleet_bytes)
    snapshot_at = snapshot_arrivals(count)
    at_snapshots = consolidate == AT_SNAPSHOTS
    defragmenting = Defragmenting(
        every, MoveBudget(engines), offset=every // 2, make_room=True,
        consolidate_every=None if at_snapshots else consolidate,
        consolidate_offset=consolidate_offset,
        consolidate_at=snapshot_at if at_snapshots else frozenset())
    started = time.perf_counter()
    run = run_ours(versions, snapshot_at=snapshot_at,
                   defragmenting=defragmenting)
    fleet = Fleet.build()
    snapshots: list[dict[str, Any]] = []
    for arrival, live in sorted(run.snapshots.items()):
        packed = first_fit_decreasing(live, fleet)
        snapshots.append({"arrival": arrival, "ours_gpus": run.in_use[arrival],
                          "first_fit_decreasing_gpus": packed[1] if packed else None,
                          "ours_by_kind": by_kind(live, fleet),
                          "first_fit_decreasing_by_kind": by_kind(packed[0], fleet)
                          if packed else None})
    plans = (run.defragmentation, run.room, run.consolidation)
    return {
        "trial": name, "plans_every": every, "engines_per_plan": engines,
        "consolidate_every": None if at_snapshots else consolidate,
        "consolidate_at": sorted(snapshot_at) if at_snapshots else None,
        "consolidate_offset": consolidate_offset,
        "seconds": time.perf_counter() - started,
        "in_use": run.in_use,
        "gpus_in_use_mean": sum(run.in_use) / len(run.in_use),
        "ratio_to_memory_bound_less_headroom_mean": sum(
            u / b if b else 1.0 for u, b in zip(run.in_use, run.bound_headroom, strict=True)
        ) / len(run.in_use),
        "snapshots": snapshots,
        "snapshot_ratio_to_first_fit_decreasing_mean": sum(
            s["ours_gpus"] / s["first_fit_decreasing_gpus"] for s in snapshots) / len(snapshots),
        "engines_moved": sum(p.engines_moved for p in plans),
        "engines_moved_per_arrival": sum(p.engines_moved for p in plans) / count,
        "plan_ms_p50": percentile(run.defragmentation.planning_s, 0.50) * 1000,
        "plan_ms_max": max(run.defragmentation.planning_s) * 1000,
        "consolidation": {"plans": run.consolidation.plans,
                          "engines_moved": run.consolidation.engines_moved,
                          "gpus_freed": run.consolidation.gpus_freed} if consolidate else None,
        "refused": run.refused, "moves_infeasible": run.moves_infeasible,
        "over_commits": run.over_commits,
    }


GIB = 2**30


def by_kind(placed: Placed, fleet: Fleet) -> dict[str, dict[str, float]]:
    """Per GPU kind: GPUs in use, the share of their usable memory booked, the room left on them
    (GiB, in all and on those with at least 10 GiB left), and the engines of versions on several
    GPUs there: where a layout spends GPUs that another does not."""
    booked: dict[tuple[str, str], int] = {}
    multi: dict[str, int] = {}
    for reservations, _ in placed:
        for reservation in reservations:
            key = (reservation.node, reservation.gpu_uuid)
            booked[key] = booked.get(key, 0) + reservation.bytes
            if len(reservations) > 1:
                kind = fleet.kind_of[reservation.node]
                multi[kind] = multi.get(kind, 0) + 1
    usable = {kind: usable_bytes(total, HEADROOM) for kind, total, _ in NODE_KINDS}
    lefts: dict[str, list[int]] = {}
    for (node, _), bytes_booked in booked.items():
        kind = fleet.kind_of[node]
        lefts.setdefault(kind, []).append(usable[kind] - bytes_booked)
    kinds: dict[str, dict[str, float]] = {}
    for kind, _, _ in NODE_KINDS:
        if left := lefts.get(kind):
            kinds[kind] = {
                "gpus_in_use": len(left),
                "booked_of_usable": 1 - sum(left) / (usable[kind] * len(left)),
                "room_left_gib": sum(left) / GIB,
                "room_left_on_gpus_with_10_gib_or_more_gib": sum(x for x in left
                                                                 if x >= 10 * GIB) / GIB,
                "engines_of_versions_on_several_gpus": multi.get(kind, 0)}
    return kinds


def since_consolidation(with_it: dict[str, Any], without: dict[str, Any],
                        buckets: int = 5) -> list[dict[str, Any]]:
    """Mean GPUs in use by arrivals since the last consolidation (after the first 500
    arrivals, the ramp-up), with and without it."""
    every, offset = with_it["consolidate_every"], with_it["consolidate_offset"]
    sums: dict[int, list[float]] = {}
    for i, (ours, theirs) in enumerate(zip(with_it["in_use"], without["in_use"], strict=True)):
        if i < RAMP_UP:
            continue
        bucket = ((i - offset) % every) * buckets // every
        totals = sums.setdefault(bucket, [0.0, 0.0, 0.0])
        totals[0] += ours
        totals[1] += theirs
        totals[2] += 1
    width = every // buckets
    return [{"arrivals_since": f"{b * width}-{(b + 1) * width - 1}",
             "with_consolidation": s[0] / s[2], "without": s[1] / s[2]}
            for b, s in sorted(sums.items())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--versions", type=int, default=VERSIONS)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    with ProcessPoolExecutor(args.processes) as pool:
        results = list(pool.map(partial(trial, count=args.versions), TRIALS))
    print_table(
        f"Placement trials on the benchmark's stream ({args.versions} versions; FFD: an offline "
        "first-fit decreasing at the snapshot)",
        ["trial", "GPUs in use mean", "ratio to memory bound (headroom)",
         "snapshots ours/FFD", "snapshot ratio mean", "engines moved", "per arrival",
         "plan ms p50", "refused", "infeasible", "over-commits"],
        [[r["trial"], r["gpus_in_use_mean"], r["ratio_to_memory_bound_less_headroom_mean"],
          " ".join(f"{s['ours_gpus']}/{s['first_fit_decreasing_gpus']}" for s in r["snapshots"]),
          r["snapshot_ratio_to_first_fit_decreasing_mean"], r["engines_moved"],
          r["engines_moved_per_arrival"], r["plan_ms_p50"], r["refused"],
          r["moves_infeasible"], r["over_commits"]] for r in results])
    benchmarks = results[0]
    print_table(
        f"Where the GPUs go at the snapshots, {benchmarks['trial']} (per GPU kind: in use, booked "
        "share of usable memory, room left in GiB (on GPUs with >= 10 GiB left), engines of "
        "versions on several GPUs)",
        ["arrival", "layout", *(kind for kind, _, _ in NODE_KINDS)],
        [[s["arrival"], layout, *(_kind_cell(s[key], kind) for kind, _, _ in NODE_KINDS)]
         for s in benchmarks["snapshots"]
         for layout, key in (("ours", "ours_by_kind"), ("FFD", "first_fit_decreasing_by_kind"))
         if s[key] is not None])
    consolidated = next(r for r in results if r["consolidate_every"] == FOLLOWED)
    baseline = next(r for r in results if r["plans_every"] == consolidated["plans_every"]
                    and r["engines_per_plan"] == consolidated["engines_per_plan"]
                    and not r["consolidate_every"])
    phases = since_consolidation(consolidated, baseline)
    print_table("Consolidations (plans that would free no GPU move nothing, and count)",
                ["trial", "plans", "engines moved", "GPUs freed"],
                [[r["trial"], r["consolidation"]["plans"], r["consolidation"]["engines_moved"],
                  r["consolidation"]["gpus_freed"]] for r in results if r["consolidation"]])
    print_table("GPUs in use by arrivals since the last consolidation (after arrival 500)",
                ["arrivals since", "with consolidation", "without"],
                [[p["arrivals_since"], p["with_consolidation"], p["without"]] for p in phases])
    for r in results:
        del r["in_use"]
    write_results("placement_trials", {"versions": args.versions, "peak_demand": PEAK_DEMAND,
                                       "trials": results, "since_consolidation": phases})


def _kind_cell(kinds: dict[str, dict[str, float]], kind: str) -> str:
    if kind not in kinds:
        return "-"
    k = kinds[kind]
    return (f"{k['gpus_in_use']:.0f}, {k['booked_of_usable']:.1%}, "
            f"{k['room_left_gib']:.0f} ({k['room_left_on_gpus_with_10_gib_or_more_gib']:.0f}), "
            f"{k['engines_of_versions_on_several_gpus']:.0f}")


if __name__ == "__main__":
    main()
