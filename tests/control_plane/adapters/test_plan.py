"""The reconciler's adapter plan, table-driven: a pure function of what is wanted on a READY
deployment and what its engine lists."""

from __future__ import annotations

import pytest

from control_plane.adapters.orm import AdapterState as S
from control_plane.adapters.plan import (
    AdapterPlan,
    CarryAdapter,
    ForgetAdapter,
    LoadAdapter,
    MarkAdapterFailed,
    MarkAdapterLoaded,
    UnloadAdapter,
    WantedAdapter,
    plan_adapters,
)

SERVING = 2
RESTARTED = "not loaded in the engine (the node or the model restarted?)"
FAILED = "its last load failed; load it again"
BUSY = "an operation is working on it"


@pytest.mark.parametrize("wanted,loaded,busy,expected", [
    pytest.param(S.LOADED, {"a"}, (), AdapterPlan(()), id="loaded and there: nothing"),
    pytest.param(S.LOADED, set(), (), AdapterPlan((LoadAdapter(1, "a", RESTARTED),)),
                 id="loaded but gone after a restart: load again"),
    pytest.param(S.LOADING, set(), (), AdapterPlan((LoadAdapter(
        1, "a", "a load that did not finish"),)), id="a load left unfinished: load"),
    pytest.param(S.LOADING, {"a"}, (), AdapterPlan((MarkAdapterLoaded(1, "a"),)),
                 id="loading and there: loaded"),
    pytest.param(S.FAILED, set(), (), AdapterPlan((), (("a", FAILED),)),
                 id="failed: not retried in a loop"),
    pytest.param(S.FAILED, {"a"}, (), AdapterPlan((MarkAdapterLoaded(1, "a"),)),
                 id="failed but there after all: loaded"),
    pytest.param(S.UNLOADING, {"a"}, (), AdapterPlan((UnloadAdapter(1, "a"),)),
                 id="unloading and still there: unload"),
    pytest.param(S.UNLOADING, set(), (), AdapterPlan((ForgetAdapter(1, "a"),)),
                 id="unloading and gone: forget"),
    pytest.param(S.LOADED, set(), (1,), AdapterPlan((), (("a", BUSY),)),
                 id="an operation works on it: left alone"),
])
def test_one_adapter(wanted: S, loaded: set[str], busy: tuple[int, ...],
                     expected: AdapterPlan) -> None:
    assert plan_adapters(SERVING, [WantedAdapter(1, "a", SERVING, wanted)], loaded, busy) == \
        expected


@pytest.mark.parametrize("state", [S.LOADED, S.LOADING])
def test_an_adapter_of_the_version_before_a_swap_is_failed_with_the_reason(state: S) -> None:
    plan = plan_adapters(SERVING, [WantedAdapter(1, "a", 1, state)], set())
    (action,) = plan.actions
    assert isinstance(action, MarkAdapterFailed)
    assert action.reason.startswith("the deployment now serves version 2, and this adapter is "
                                    "registered under version 1")
    # Once failed it stays so; an unload of it still goes through.
    assert plan_adapters(SERVING, [WantedAdapter(1, "a", 1, S.FAILED)], set()) == AdapterPlan(())
    assert plan_adapters(SERVING, [WantedAdapter(1, "a", 1, S.UNLOADING)], {"a"}).actions == \
        (UnloadAdapter(1, "a"),)


@pytest.mark.parametrize("state", [S.LOADED, S.LOADING, S.FAILED])
def test_an_adapter_the_new_version_has_too_is_carried_over_a_swap(state: S) -> None:
    wanted = [WantedAdapter(1, "a", 1, state), WantedAdapter(2, "b", 1, S.LOADED)]
    plan = plan_adapters(SERVING, wanted, set(), registered={"a", "c"})
    assert plan.actions[0] == CarryAdapter(1, "a", SERVING)
    # "b" has no namesake under version 2: failed, as before.
    assert isinstance(plan.actions[1], MarkAdapterFailed) and plan.actions[1].name == "b"
    # One being unloaded or worked on is not carried.
    assert plan_adapters(SERVING, [WantedAdapter(1, "a", 1, S.UNLOADING)], set(),
                         registered={"a"}).actions == (ForgetAdapter(1, "a"),)
    assert plan_adapters(SERVING, [WantedAdapter(1, "a", 1, state)], set(), busy=[1],
                         registered={"a"}).actions == ()


def test_adapters_nobody_wants_here_are_left_alone() -> None:
    plan = plan_adapters(SERVING, [WantedAdapter(1, "a", SERVING, S.LOADED),
                                   WantedAdapter(2, "b", SERVING, S.LOADED)], {"a", "other"})
    assert plan == AdapterPlan((LoadAdapter(2, "b", RESTARTED),))
