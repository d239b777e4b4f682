"""The reconciler's plan: what it does on a node for each combination of desired and observed."""

from __future__ import annotations

import pytest

from control_plane.deployments.orm import DeploymentState as S
from control_plane.deployments.plan import (
    Desired,
    Load,
    MarkReady,
    MarkUnloaded,
    Plan,
    Unload,
    plan_node,
)
from control_plane.deployments.states import TRANSITIONS, sources_of


def desired(state: S = S.READY, version: int = 2, serving: int | None = 2,
            wanted: bool = True) -> Desired:
    return Desired(deployment_id=7, triton_name="m", version=version, wanted=wanted,
                   state=state, serving_version=serving)


@pytest.mark.parametrize("deployment,ready,expected", [
    # Serving what it should: nothing to do.
    (desired(), {"m": [2]}, ()),
    # The node lost it (tritonserver restarted empty): load it again.
    (desired(), {}, (Load(7, "m", 2, "not loaded on the node, wants version 2"),)),
    # It serves another version than the alias names (a swap was interrupted): load the alias's.
    (desired(), {"m": [1]}, (Load(7, "m", 2, "serves version(s) [1], wants 2"),)),
    # Ready there but recorded otherwise (the node came back, a load finished elsewhere).
    (desired(S.UNKNOWN), {"m": [2]}, (MarkReady(7, 2),)),
    (desired(S.LOADING, serving=None), {"m": [2]}, (MarkReady(7, 2),)),
    # A new deployment.
    (desired(S.PENDING, serving=None), {}, (Load(7, "m", 2, "not loaded on the node, wants "
                                                           "version 2"),)),
    # Being removed: unload while it is there, then record it gone.
    (desired(S.DRAINING, wanted=False), {"m": [2]}, (Unload(7, "m"),)),
    (desired(S.DRAINING, wanted=False), {}, (MarkUnloaded(7),)),
    (desired(S.UNLOADED, wanted=False, serving=None), {}, ()),
    # Other models on the node are not ours to touch.
    (desired(), {"m": [2], "someone-else": [1]}, ()),
])
def test_each_situation_gets_its_action(deployment: Desired, ready: dict[str, list[int]],
                                        expected: tuple[object, ...]) -> None:
    assert plan_node([deployment], ready).actions == expected


def test_a_failed_load_is_not_retried_in_a_loop() -> None:
    plan = plan_node([desired(S.FAILED, serving=None)], {})
    assert plan == Plan(actions=(), skipped=((7, "its last load failed; apply it again"),))


def test_deployments_an_operation_works_on_are_left_to_it() -> None:
    plan = plan_node([desired()], {"m": [1]}, busy={7})
    assert plan == Plan(actions=(), skipped=((7, "an operation is working on it"),))


def test_every_state_can_be_left_and_reached() -> None:
    for state in S:
        assert TRANSITIONS[state], f"{state} is a dead end"
        # PENDING is where a deployment starts; every other state is reached by a transition.
        assert bool(sources_of(state)) == (state != S.PENDING), state
    assert S.READY not in TRANSITIONS[S.PENDING]  # READY only after a load (or via LOADING)
