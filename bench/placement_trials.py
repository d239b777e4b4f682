"""Placement trials: what more planning buys on the placement benchmark's stream, and what it costs.

The placement benchmark (``bench/placement.py``) plans moves every 50 arrivals, 200 engines at
most, and its ratio to the offline optimum is sampled at three snapshots, 25 arrivals after a
plan. These trials run the same seeded stream through the same ``run_ours()`` with:
- plans more often and smaller (every 25 arrivals, 100 engines; every 10, 40 engines);
- the benchmark's plans and, every 500 arrivals, a consolidation (``bench/placement_consolidate.py``:
  every single-GPU version laid out again at once).

For each: the GPUs in use at every arrival (mean, and against the memory bound with headroom),
at the three snapshots against an offline first-fit decreasing of the versions live there (the
solver's start; the proven bound lies 1-2 % below it, ``bench/results/placement.json``), the
engines moved, and the GPUs in use by how many arrivals have passed since the last consolidation,
beside the run without it. No MIP is solved here: the benchmark does that for its own run.

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
    first_fit_decreasing,
    run_ours,
    snapshot_arrivals,
)
from bench.placement_stream import GPUS_PER_NODE, NODE_KINDS, Fleet, make_versions
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
                          "first_fit_decreasing_gpus": packed[1] if packed else None})
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


if __name__ == "__main__":
    main()
