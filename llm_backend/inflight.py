"""Back-pressure: at most ``capacity`` requests are handed to the engine at once.

``execute()`` blocks in ``acquire`` while the engine is full, which keeps the Triton instance busy;
further requests then wait in Triton's queue, where priority levels and queue timeouts apply.
"""

from __future__ import annotations

import threading
import time
from collections import Counter


class InflightLimiter:
    """A counting gate with per-priority counts for the in-flight gauges."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"in-flight capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._cond = threading.Condition()
        self._by_priority: Counter[int] = Counter()
        self._waiting: Counter[int] = Counter()
        self._closed = False

    @property
    def inflight(self) -> int:
        with self._cond:
            return sum(self._by_priority.values())

    def snapshot(self) -> tuple[dict[int, int], dict[int, int]]:
        """(in flight, waiting for a slot) per priority level."""
        with self._cond:
            return dict(self._by_priority), dict(self._waiting)

    def acquire(self, priority: int) -> bool:
        """Wait for a slot; False once the limiter is closed (the model is unloading)."""
        with self._cond:
            self._waiting[priority] += 1
            try:
                while not self._closed and sum(self._by_priority.values()) >= self.capacity:
                    self._cond.wait()
                if self._closed:
                    return False
                self._by_priority[priority] += 1
                return True
            finally:
                self._waiting[priority] -= 1

    def release(self, priority: int) -> None:
        with self._cond:
            if self._by_priority[priority] <= 0:
                raise RuntimeError(f"release without acquire at priority {priority}")
            self._by_priority[priority] -= 1
            self._cond.notify_all()

    def close(self) -> None:
        """Refuse new slots and wake every waiter."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is in flight; False if ``timeout`` seconds pass first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while sum(self._by_priority.values()) > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True
