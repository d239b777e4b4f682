"""The autoscaler's decision: a pure function from a policy and recent readings to a plan with
its reasons, so every choice is explained and every rule tests on a synthetic series.

Like Kubernetes' HPA: each reading recommends a number of engines; a scale-up takes the smallest
recommendation over the scale-up window (a short spike adds nothing), a scale-down the largest
over the longer scale-down window (a short lull removes nothing), then a cooldown follows every
change. One engine is added or removed at a time: on these machines a load takes a minute or more,
and the next decision sees its effect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from control_plane.autoscaling.policy import ScalingPolicy


class Action(StrEnum):
    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"
    HOLD = "hold"


@dataclass(frozen=True)
class Observation:
    """The metric at ``at`` (seconds, any clock shared with ``now``) while ``engines`` served;
    ``value`` None: no reading could be taken."""

    at: float
    engines: int
    value: float | None


@dataclass(frozen=True)
class Decision:
    action: Action
    engines: int
    desired: int
    reason: str
    inputs: dict[str, Any] = field(default_factory=dict)


def decide(policy: ScalingPolicy, engines: int, observations: Sequence[Observation], now: float,
           last_change_at: float | None, busy: str | None = None) -> Decision:
    """What to do now with ``engines`` serving; ``busy`` names what already acts on the alias
    (a scaling operation, a promotion), which holds every change but the bounds'."""
    latest = observations[-1].value if observations else None
    inputs: dict[str, Any] = {"metric": policy.metric.value, "target": policy.target,
                              "latest": latest, "min_engines": policy.min_engines,
                              "max_engines": policy.max_engines}

    def plan(action: Action, desired: int, reason: str) -> Decision:
        return Decision(action, engines, desired, reason, inputs)

    if busy is not None:
        return plan(Action.HOLD, engines, f"held: {busy}")
    if engines < policy.min_engines:
        return plan(Action.SCALE_UP, engines + 1,
                    f"{engines} engine(s) is below the policy's minimum {policy.min_engines}")
    if engines > policy.max_engines:
        return plan(Action.SCALE_DOWN, engines - 1,
                    f"{engines} engine(s) is above the policy's maximum {policy.max_engines}")
    if last_change_at is not None and now - last_change_at < policy.cooldown_s:
        left = policy.cooldown_s - (now - last_change_at)
        inputs["cooldown_left_s"] = round(left, 1)
        return plan(Action.HOLD, engines, f"cooling down for {left:.0f} s more after the last "
                                          "change")

    up = _window(observations, now, policy.scale_up_window_s)
    down = _window(observations, now, policy.scale_down_window_s)
    if up is None:
        return plan(Action.HOLD, engines, "no complete readings of the "
                                          f"{policy.scale_up_window_s:g} s scale-up window yet "
                                          "(too recent, or a node's metrics were unreadable)")
    up_recommendation = min(policy.recommended(o.engines, o.value) for o in up
                            if o.value is not None)
    inputs["scale_up_recommendation"] = up_recommendation
    if up_recommendation > engines:
        if engines >= policy.max_engines:
            return plan(Action.HOLD, engines,
                        f"{policy.metric.value} wants {up_recommendation} engine(s) but the "
                        f"policy's maximum is {policy.max_engines}")
        return plan(Action.SCALE_UP, engines + 1,
                    f"{policy.metric.value} stayed above {policy.target:g} for the "
                    f"{policy.scale_up_window_s:g} s scale-up window (latest {latest:g}; it "
                    f"recommends at least {up_recommendation} engine(s))")
    if down is None:
        return plan(Action.HOLD, engines, f"{policy.metric.value} is within the target; the "
                                          f"{policy.scale_down_window_s:g} s scale-down window "
                                          "is not covered yet")
    down_recommendation = max(policy.recommended(o.engines, o.value) for o in down
                              if o.value is not None)
    inputs["scale_down_recommendation"] = down_recommendation
    if down_recommendation < engines:
        if engines <= policy.min_engines:
            return plan(Action.HOLD, engines,
                        f"{policy.metric.value} would do with {down_recommendation} engine(s) "
                        f"but the policy's minimum is {policy.min_engines}")
        return plan(Action.SCALE_DOWN, engines - 1,
                    f"{policy.metric.value} stayed below {policy.target:g} for the "
                    f"{policy.scale_down_window_s:g} s scale-down window (at most "
                    f"{down_recommendation} engine(s) needed)")
    return plan(Action.HOLD, engines, f"{policy.metric.value} is within the target "
                                      f"({latest:g} against {policy.target:g})")


def _window(observations: Sequence[Observation], now: float, seconds: float
            ) -> list[Observation] | None:
    """The readings of the last ``seconds``, or None if they do not cover that long (the
    oldest reading kept must be at least that old) or one of them has no value."""
    if not observations or observations[0].at > now - seconds:
        return None
    inside = [o for o in observations if o.at >= now - seconds]
    if not inside or any(o.value is None for o in inside):
        return None
    return inside
