"""The reconciler's plan for one node: a pure function from desired and observed state to actions.

No I/O here, so every decision can be asserted on directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from control_plane.deployments.orm import DeploymentState


@dataclass(frozen=True)
class Desired:
    """One deployment on the node, as the database says it should be."""

    deployment_id: int
    triton_name: str
    version: int  # the alias's current version
    wanted: bool
    state: DeploymentState
    serving_version: int | None


@dataclass(frozen=True)
class Load:
    deployment_id: int
    triton_name: str
    version: int
    reason: str


@dataclass(frozen=True)
class Unload:
    deployment_id: int
    triton_name: str


@dataclass(frozen=True)
class MarkReady:
    deployment_id: int
    version: int


@dataclass(frozen=True)
class MarkUnloaded:
    deployment_id: int


Action = Load | Unload | MarkReady | MarkUnloaded


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    # Deployments left alone, and why (an operation is working on them, a failed load waits for
    # an operator): shown so a plan explains itself.
    skipped: tuple[tuple[int, str], ...] = ()


def plan_node(desired: Sequence[Desired], ready: Mapping[str, Iterable[int]],
              busy: Iterable[int] = ()) -> Plan:
    """What to do on one node.

    ``ready`` maps each Triton model name the node serves to its ready versions; ``busy`` holds
    deployments an operation is working on right now, which the plan leaves to it.
    """
    busy = set(busy)
    actions: list[Action] = []
    skipped: list[tuple[int, str]] = []
    for deployment in desired:
        versions = set(ready.get(deployment.triton_name, ()))
        if deployment.deployment_id in busy:
            skipped.append((deployment.deployment_id, "an operation is working on it"))
            continue
        if not deployment.wanted:
            if versions:
                actions.append(Unload(deployment.deployment_id, deployment.triton_name))
            elif deployment.state != DeploymentState.UNLOADED:
                actions.append(MarkUnloaded(deployment.deployment_id))
            continue
        if versions == {deployment.version}:
            if deployment.state != DeploymentState.READY or \
                    deployment.serving_version != deployment.version:
                actions.append(MarkReady(deployment.deployment_id, deployment.version))
            continue
        if deployment.state == DeploymentState.FAILED and \
                deployment.serving_version != deployment.version and not versions:
            # A load that failed is not retried in a loop; PUT the deployment again to retry.
            skipped.append((deployment.deployment_id, "its last load failed; apply it again"))
            continue
        reason = (f"serves version(s) {sorted(versions)}, wants {deployment.version}" if versions
                  else f"not loaded on the node, wants version {deployment.version}")
        actions.append(Load(deployment.deployment_id, deployment.triton_name, deployment.version,
                            reason))
    return Plan(tuple(actions), tuple(skipped))
