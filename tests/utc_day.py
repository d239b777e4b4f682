"""Keeping a test that counts in a day's token window inside one UTC day: the window is the
calendar day (its key holds the UTC date), so a test whose requests straddle midnight counts
them in two windows and sees a budget that was never spent."""

from __future__ import annotations

import time

from gateway.quotas.admission import seconds_to_utc_midnight


def within_one_utc_day(seconds: float) -> None:
    """Return when the next ``seconds`` fall inside one UTC day: at once, or after waiting out
    a midnight that is nearer than that."""
    left = seconds_to_utc_midnight(time.time())
    if left < seconds:
        time.sleep(left + 1.0)
