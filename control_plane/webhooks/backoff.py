"""When a failed delivery is tried again: exponential backoff with full jitter, up to a limit.

Full jitter (a delay drawn uniformly from zero to the exponential ceiling) spreads the retries of
many deliveries to one receiver that was down, instead of sending them all again in one burst at
each step when it comes back.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    base_s: float
    max_s: float

    def exhausted(self, attempts: int) -> bool:
        """True once ``attempts`` attempts have failed and no further one is made."""
        return attempts >= self.max_attempts

    def ceiling(self, attempts: int) -> float:
        """The longest wait after the ``attempts``-th failed attempt (1, 2, …)."""
        # The exponent is capped before it is raised: 2.0 ** 1100 is an OverflowError.
        return min(self.max_s, self.base_s * 2.0 ** min(max(attempts - 1, 0), 64))

    def delay(self, attempts: int,
              uniform: Callable[[float, float], float] = random.uniform) -> float:
        """Seconds to wait before the next attempt, after ``attempts`` failed ones."""
        return uniform(0.0, self.ceiling(attempts))
