"""Exponential backoff with full jitter, capped, and a limit on attempts."""

from __future__ import annotations

import pytest

from control_plane.webhooks.backoff import RetryPolicy

POLICY = RetryPolicy(max_attempts=8, base_s=1.0, max_s=300.0)


@pytest.mark.parametrize(("attempts", "ceiling"), [
    (1, 1.0), (2, 2.0), (3, 4.0), (8, 128.0), (9, 256.0), (10, 300.0), (10_000, 300.0)])
def test_the_ceiling_doubles_with_each_failure_up_to_the_maximum(attempts: int, ceiling: float
                                                                 ) -> None:
    assert POLICY.ceiling(attempts) == ceiling


def test_the_delay_is_drawn_between_zero_and_the_ceiling() -> None:
    drawn: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        drawn.append((low, high))
        return high / 2

    assert POLICY.delay(3, uniform) == 2.0
    assert drawn == [(0.0, 4.0)]
    assert all(0.0 <= POLICY.delay(5) <= 16.0 for _ in range(100))


@pytest.mark.parametrize(("attempts", "exhausted"), [(0, False), (7, False), (8, True),
                                                     (9, True)])
def test_exhausted_after_max_attempts(attempts: int, exhausted: bool) -> None:
    assert POLICY.exhausted(attempts) is exhausted
