"""The evacuation plan on tables of readings, engines and moves: which engine moves, when the one
on the faulty GPU drains, and when a move is dropped."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from control_plane.deployments.orm import DeploymentState as S
from control_plane.evacuation.plan import (
    EngineOnGpus,
    Evacuate,
    Finish,
    Forget,
    MoveUnderWay,
    Step,
    Wait,
    faults_of,
    plan_evacuations,
)
from control_plane.gpus.monitor import NodeReadings
from control_plane.gpus.readings import GpuHealth, GpuReading

AT = datetime(2026, 12, 2, tzinfo=UTC)


def gpu(index: int, health: GpuHealth = GpuHealth.OK, detail: str = "") -> GpuReading:
    return GpuReading(index, f"GPU-{index}", "L4", 24 * 2**30, 0, 24 * 2**30,
                      health=health, detail=detail)


def node(*gpus: GpuReading, error: str | None = None) -> dict[str, NodeReadings]:
    return {"a": NodeReadings("a", AT, gpus, error)}


def engine(state: S = S.READY, busy: bool = False, uuids: tuple[str, ...] = ("GPU-0",)
           ) -> EngineOnGpus:
    return EngineOnGpus(7, "a", uuids, state, busy)


SICK = gpu(0, GpuHealth.UNHEALTHY, "uncorrectable ECC errors: 3")


@pytest.mark.parametrize(("readings", "engines", "moves", "expected"), [
    # A healthy GPU: nothing to do.
    (node(gpu(0)), [engine()], {}, []),
    # A GPU that reports a fault: its engine moves.
    (node(SICK), [engine()], {},
     [Evacuate(7, "GPU 0 (GPU-0) of node a is unhealthy: uncorrectable ECC errors: 3")]),
    # A GPU gone from a reading that otherwise succeeded counts as a fault.
    (node(gpu(1)), [engine()], {}, [Evacuate(7, "GPU GPU-0 is gone from node a's reading")]),
    # A fault on one GPU of a tensor-parallel pair moves the engine.
    (node(gpu(0), gpu(1, GpuHealth.LOST)),
     [engine(uuids=("GPU-0", "GPU-1"))], {}, [Evacuate(7, "GPU 1 (GPU-1) of node a is lost")]),
    # The whole node unreadable is not a GPU fault (the reconciler judges the node).
    (node(error="InventoryUnavailable: no driver"), [engine()], {}, []),
    ({}, [engine()], {}, []),
    # Not READY, or an operation at work on it: left alone.
    (node(SICK), [engine(S.LOADING)], {}, []),
    (node(SICK), [engine(busy=True)], {}, []),
    # No node had room last time: try again.
    (node(SICK), [engine()], {7: MoveUnderWay(7)}, [Evacuate(7, faults_of(
        engine(), node(SICK)) or "")]),
    # No room was found and the GPU recovered: the move is dropped.
    (node(gpu(0)), [engine()], {7: MoveUnderWay(7)}, [Forget(7, "its GPUs are healthy again")]),
    # A replacement loading: wait; READY: drain the faulty one.
    (node(SICK), [engine()], {7: MoveUnderWay(7, S.LOADING, "b")},
     [Wait(7, "its replacement on node b is LOADING")]),
    (node(SICK), [engine()], {7: MoveUnderWay(7, S.READY, "b")}, [Finish(7, "b")]),
    # Once a replacement is started the move finishes even if the GPU recovers.
    (node(gpu(0)), [engine()], {7: MoveUnderWay(7, S.READY, "b")}, [Finish(7, "b")]),
    # ... but not while an operation works on the faulty one.
    (node(SICK), [engine(busy=True)], {7: MoveUnderWay(7, S.READY, "b")},
     [Wait(7, "an operation is working on it")]),
    # Someone removed the replacement: the move is dropped.
    (node(SICK), [engine()], {7: MoveUnderWay(7, S.DRAINING, "b", replacement_wanted=False)},
     [Forget(7, "its replacement on node b was removed")]),
    # The engine went (removed, unloaded): its move goes too.
    (node(SICK), [], {7: MoveUnderWay(7, S.READY, "b")},
     [Forget(7, "it no longer holds GPUs (removed or unloaded)")]),
])
def test_plan(readings: dict[str, NodeReadings], engines: list[EngineOnGpus],
              moves: dict[int, MoveUnderWay], expected: list[Step]) -> None:
    assert plan_evacuations(engines, readings, moves) == expected


def test_a_failed_replacement_is_reported_not_retried_elsewhere() -> None:
    steps = plan_evacuations([engine()], node(SICK), {
        7: MoveUnderWay(7, S.FAILED, "b", replacement_error="loading version 1 failed: OOM")})
    assert len(steps) == 1 and isinstance(steps[0], Wait)
    assert "replacement on node b failed to load (loading version 1 failed: OOM)" in \
        steps[0].detail
    assert "apply the replacement again" in steps[0].detail
