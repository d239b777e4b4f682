"""What to do about engines on faulty GPUs: a pure function from GPU readings, the engines that
hold GPUs and the moves under way to the next step of each move.

A move is: another engine of the alias on a node with healthy room (placement decides where), and
once that one is READY, the engine on the faulty GPU drains. The alias keeps serving throughout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from control_plane.deployments.orm import DeploymentState
from control_plane.gpus.monitor import NodeReadings
from control_plane.gpus.readings import GpuHealth


@dataclass(frozen=True)
class EngineOnGpus:
    """A wanted deployment and the GPUs its serving version has booked."""

    deployment_id: int
    node: str
    gpu_uuids: tuple[str, ...]
    state: DeploymentState
    # An operation is working on it: its next state is that operation's to decide.
    busy: bool


@dataclass(frozen=True)
class MoveUnderWay:
    deployment_id: int
    # None: no replacement started yet (no node had room) or it was deleted.
    replacement_state: DeploymentState | None = None
    replacement_node: str | None = None
    replacement_wanted: bool = True
    replacement_error: str | None = None


@dataclass(frozen=True)
class Evacuate:
    """Start (or try again) a replacement of the deployment on another node."""

    deployment_id: int
    faults: str


@dataclass(frozen=True)
class Finish:
    """The replacement serves: drain the engine on the faulty GPU."""

    deployment_id: int
    replacement_node: str


@dataclass(frozen=True)
class Wait:
    deployment_id: int
    detail: str


@dataclass(frozen=True)
class Forget:
    """The move is not needed any more."""

    deployment_id: int
    reason: str


Step = Evacuate | Finish | Wait | Forget


def faults_of(engine: EngineOnGpus, readings: Mapping[str, NodeReadings]) -> str | None:
    """Why the engine's GPUs are not fit to serve, or None when they are (or are not known: a
    node whose whole reading failed is the reconciler's to judge, not a GPU fault)."""
    polled = readings.get(engine.node)
    if polled is None or polled.error is not None:
        return None
    by_uuid = {gpu.uuid: gpu for gpu in polled.gpus}
    faults = []
    for uuid in engine.gpu_uuids:
        gpu = by_uuid.get(uuid)
        if gpu is None:
            faults.append(f"GPU {uuid} is gone from node {engine.node}'s reading")
        elif gpu.health is not GpuHealth.OK:
            faults.append(f"GPU {gpu.index} ({uuid}) of node {engine.node} is "
                          f"{gpu.health.value}" + (f": {gpu.detail}" if gpu.detail else ""))
    return "; ".join(faults) or None


def plan_evacuations(engines: Sequence[EngineOnGpus], readings: Mapping[str, NodeReadings],
                     moves: Mapping[int, MoveUnderWay]) -> list[Step]:
    """One step per engine on a faulty GPU and per move under way."""
    steps: list[Step] = []
    seen: set[int] = set()
    for engine in engines:
        seen.add(engine.deployment_id)
        move = moves.get(engine.deployment_id)
        faults = faults_of(engine, readings)
        movable = engine.state == DeploymentState.READY and not engine.busy
        if move is None or move.replacement_state is None:
            if faults is not None and movable:
                steps.append(Evacuate(engine.deployment_id, faults))
            elif move is not None:
                steps.append(Forget(engine.deployment_id, "its GPUs are healthy again"
                                    if faults is None else f"it is {engine.state}, not READY"))
            continue
        # Once a replacement is started the move finishes, even if the GPU recovers meanwhile:
        # a GPU that faulted once is not trusted again until an operator says so.
        if not move.replacement_wanted:
            steps.append(Forget(engine.deployment_id, f"its replacement on node "
                                f"{move.replacement_node} was removed"))
        elif move.replacement_state == DeploymentState.READY:
            if engine.busy:
                steps.append(Wait(engine.deployment_id, "an operation is working on it"))
            else:
                steps.append(Finish(engine.deployment_id, move.replacement_node or ""))
        elif move.replacement_state == DeploymentState.FAILED:
            # Not retried in a loop on other nodes: a load that fails there may fail anywhere.
            steps.append(Wait(engine.deployment_id, (
                f"its replacement on node {move.replacement_node} failed to load "
                f"({move.replacement_error}); it keeps serving on the faulty GPU: apply the "
                "replacement again or deploy the alias elsewhere")))
        else:
            steps.append(Wait(engine.deployment_id, f"its replacement on node "
                              f"{move.replacement_node} is {move.replacement_state}"))
    for deployment_id in moves.keys() - seen:
        steps.append(Forget(deployment_id, "it no longer holds GPUs (removed or unloaded)"))
    return steps
