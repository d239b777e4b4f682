"""The autoscaler's decision on synthetic series: each rule, and the reason it gives."""

from __future__ import annotations

import pytest

from control_plane.autoscaling.decision import Action, Observation, decide
from control_plane.autoscaling.policy import ScalingMetric, ScalingPolicy

WAITING = ScalingPolicy(min_engines=1, max_engines=3, metric=ScalingMetric.WAITING_PER_ENGINE,
                        target=4, scale_up_window_s=30, scale_down_window_s=120, cooldown_s=60)


def series(values: list[float | None], engines: int = 1, every: float = 10.0,
           end: float = 1000.0) -> list[Observation]:
    """Readings every ``every`` s, the last at ``end``."""
    start = end - every * (len(values) - 1)
    return [Observation(start + i * every, engines, v) for i, v in enumerate(values)]


CASES = [
    # (name, engines, observations, last change, busy, action, desired, words in the reason)
    ("a queue over the target for the whole up window adds one engine",
     1, series([2, 12, 12, 12, 12]), None, None, Action.SCALE_UP, 2,
     ["stayed above 4", "30 s scale-up window", "at least 3"]),
    ("a spike shorter than the up window adds nothing",
     1, series([2, 2, 2, 12, 12]), None, None, Action.HOLD, 1, ["within the target"]),
    ("within the tolerance nothing changes",
     2, series([4.3] * 14, engines=2), None, None, Action.HOLD, 2, ["within the target"]),
    ("a cooldown after the last change holds even a long queue",
     1, series([12] * 5), 980.0, None, Action.HOLD, 1, ["cooling down for 40 s"]),
    ("an idle alias loses one engine after the whole down window",
     3, series([0] * 14, engines=3), None, None, Action.SCALE_DOWN, 2,
     ["stayed below 4", "120 s scale-down window"]),
    ("a lull shorter than the down window removes nothing",
     3, series([12] * 6 + [0] * 8, engines=3), None, None, Action.HOLD, 3,
     ["within the target"]),
    ("never above the maximum",
     3, series([40] * 5, engines=3), None, None, Action.HOLD, 3, ["maximum is 3"]),
    ("never below the minimum",
     1, series([0] * 14), None, None, Action.HOLD, 1, ["minimum is 1"]),
    ("below the minimum (a node lost) adds one at once, cooldown or not",
     0, series([0] * 2, engines=0), 999.0, None, Action.SCALE_UP, 1, ["below the policy's"]),
    ("above the maximum (the policy lowered) removes one",
     4, series([0] * 2, engines=4), None, None, Action.SCALE_DOWN, 3, ["above the policy's"]),
    ("readings younger than the up window decide nothing",
     1, series([12, 12]), None, None, Action.HOLD, 1, ["no complete readings"]),
    ("an unreadable node's gap decides nothing",
     1, series([12, 12, None, 12, 12]), None, None, Action.HOLD, 1, ["no complete readings"]),
    ("a running operation or promotion holds every change",
     1, series([12] * 5), None, "a promotion of m is running", Action.HOLD, 1,
     ["held: a promotion of m is running"]),
]


@pytest.mark.parametrize(("name", "engines", "observations", "last_change", "busy", "action",
                          "desired", "words"), CASES, ids=[case[0] for case in CASES])
def test_decision(name: str, engines: int, observations: list[Observation],
                  last_change: float | None, busy: str | None, action: Action, desired: int,
                  words: list[str]) -> None:
    decision = decide(WAITING, engines, observations, 1000.0, last_change, busy)
    assert (decision.action, decision.desired) == (action, desired), decision.reason
    for word in words:
        assert word in decision.reason, decision.reason
    assert decision.inputs["metric"] == "waiting_per_engine" and decision.inputs["target"] == 4


def test_a_latency_target_scales_in_proportion_to_the_engines_serving() -> None:
    ttft = ScalingPolicy(min_engines=1, max_engines=8, metric=ScalingMetric.TTFT_P95,
                         target=1.0, scale_up_window_s=20, scale_down_window_s=60,
                         cooldown_s=0)
    assert ttft.recommended(2, 3.0) == 6
    assert ttft.recommended(4, 0.4) == 2
    assert ttft.recommended(4, 1.05) == 4  # within 10 %
    decision = decide(ttft, 2, series([3.0] * 3, engines=2), 1000.0, None)
    assert (decision.action, decision.desired) == (Action.SCALE_UP, 3)
    assert decision.inputs["scale_up_recommendation"] == 6
    assert decision.inputs["latest"] == 3.0
