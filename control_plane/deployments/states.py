"""Which deployment state may follow which: every change is applied only from an expected state."""

from __future__ import annotations

from collections.abc import Mapping

from control_plane.deployments.orm import DeploymentState as S

TRANSITIONS: Mapping[S, frozenset[S]] = {
    S.PENDING: frozenset({S.LOADING, S.DRAINING, S.UNKNOWN}),
    S.LOADING: frozenset({S.READY, S.FAILED, S.UNKNOWN}),
    # READY → LOADING: a swap to another version, or a reload after the node lost the model.
    S.READY: frozenset({S.LOADING, S.DRAINING, S.UNKNOWN}),
    S.FAILED: frozenset({S.LOADING, S.DRAINING, S.UNKNOWN}),
    S.DRAINING: frozenset({S.UNLOADED, S.UNKNOWN}),
    S.UNLOADED: frozenset({S.LOADING}),
    # Seen again: ready as it was, or lost and loaded again, or going.
    S.UNKNOWN: frozenset({S.READY, S.LOADING, S.DRAINING, S.UNLOADED}),
}


def sources_of(target: S) -> frozenset[S]:
    """The states a deployment may move to ``target`` from."""
    return frozenset(state for state, targets in TRANSITIONS.items() if target in targets)
