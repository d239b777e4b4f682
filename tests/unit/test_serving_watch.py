"""ServingWatch: when a backend decides that Triton has stopped serving its version."""

from __future__ import annotations

import pytest

from llm_backend.serving_watch import ServingWatch, may_stop


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(readiness: list[bool | Exception], checks: int = 2) -> list[bool]:
    """``left()`` once a second (one check each), with Triton answering ``readiness`` in turn."""
    clock, answered = Clock(), iter(readiness)

    def is_ready() -> bool:
        value = next(answered)
        if isinstance(value, Exception):
            raise value
        return value

    watch = ServingWatch(is_ready, clock, interval_s=1.0, checks=checks)
    seen = []
    for _ in readiness:
        seen.append(watch.left())
        clock.now += 1.0
    return seen


@pytest.mark.parametrize(("readiness", "left"), [
    # Serving all along.
    ([True, True, True], [False, False, False]),
    # Replaced or unloaded: two not-ready answers in a row after being ready.
    ([True, False, False], [False, False, True]),
    # Still loading (initialize has not returned): not ready is not "left".
    ([False, False, False], [False, False, False]),
    ([False, False, True, False, False], [False, False, False, False, True]),
    # One odd answer in between does not stop a serving engine.
    ([True, False, True, False, True], [False] * 5),
    # A failed check counts for nothing either way.
    ([True, False, RuntimeError("stub message queue busy"), False],
     [False, False, False, True]),
    ([True, RuntimeError("timeout"), RuntimeError("timeout")], [False, False, False]),
])
def test_left_after_ready_and_then_not_ready_checks_in_a_row(readiness, left):
    assert run(readiness) == left


def test_left_stays_true_once_decided():
    assert run([True, False, False, True, True]) == [False, False, True, True, True]


def test_asks_triton_at_most_once_per_interval():
    clock, calls = Clock(), []

    def is_ready() -> bool:
        calls.append(clock.now)
        return True

    watch = ServingWatch(is_ready, clock, interval_s=1.0)
    for _ in range(40):  # the backend's ticker: every 50 ms
        watch.left()
        clock.now += 0.05
    assert calls == pytest.approx([0.0, 1.0])


def test_a_single_check_can_decide():
    assert run([True, False], checks=1) == [False, True]


def test_checks_below_one_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        ServingWatch(lambda: True, Clock(), checks=0)


@pytest.mark.parametrize(("left_for_s", "idle", "quiet_for_s", "stop"), [
    # Nothing runs or waits and nothing came for the quiet time: stop.
    (3.0, True, 2.0, True),
    # A request came a moment ago (Triton routed it here just before the swap): serve it.
    (3.0, True, 0.5, False),
    # Requests still run or wait.
    (3.0, False, 10.0, False),
    # The drain time is up: stop whatever still runs (cut, as finalize would).
    (30.0, False, 0.0, True),
])
def test_may_stop_once_idle_and_quiet_or_at_the_drain_timeout(left_for_s, idle, quiet_for_s,
                                                               stop):
    assert may_stop(left_for_s, idle, quiet_for_s, drain_timeout_s=30.0, quiet_s=2.0) is stop
