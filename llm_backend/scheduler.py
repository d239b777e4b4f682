"""Admission: which waiting request the engine takes next, and when a waiting request is refused.

Why the backend keeps its own priority queue instead of leaving waiting requests in Triton's:
a request can only wait in Triton's queue while ``execute()`` blocks, and a blocked ``execute()``
holds one request that the next urgent one cannot pass; vLLM never preempts a running request to
admit a more urgent one. So an urgent request behind a full engine would wait for a long
generation to finish. Here it takes a reserved engine slot at once (README, "Design notes").

The queue enforces per priority level the queue policies the model config declares for it
(``queue_config.py``: ``max_queue_size``, ``default_timeout_microseconds``,
``allow_timeout_override``, as in Triton's ``ModelQueuePolicy``).
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from llm_backend.errors import Unavailable

T = TypeVar("T")


class QueueRejected(Unavailable):
    """A waiting request was refused: its level's queue is full, or it waited too long."""


@dataclass(frozen=True)
class QueuePolicy:
    """One priority level's queue policy, as in Triton's ``ModelQueuePolicy``."""

    max_queue_size: int = 0  # 0: unbounded
    default_timeout_s: float = 0.0  # 0: no timeout
    allow_timeout_override: bool = False

    @classmethod
    def from_config(cls, raw: dict[str, Any] | None) -> QueuePolicy:
        raw = raw or {}
        action = raw.get("timeout_action", "REJECT")
        if action not in ("REJECT", 0):
            raise ValueError(
                f"queue policy timeout_action {action!r} is not supported by this backend; use REJECT"
            )
        return cls(
            max_queue_size=int(raw.get("max_queue_size") or 0),
            default_timeout_s=int(raw.get("default_timeout_microseconds") or 0) / 1e6,
            allow_timeout_override=bool(raw.get("allow_timeout_override", False)),
        )

    def timeout_for(self, requested_s: float | None) -> float:
        """The queue timeout that applies. As in Triton's queue, a request may only shorten the
        level's default timeout, and only where the policy allows it."""
        if (requested_s and self.allow_timeout_override and self.default_timeout_s
                and requested_s < self.default_timeout_s):
            return requested_s
        return self.default_timeout_s


@dataclass
class _Waiting(Generic[T]):
    item: T
    level: int
    enqueued: float
    deadline: float


@dataclass
class AdmissionScheduler(Generic[T]):
    """Priority queue in front of the engine, with slots reserved for urgent levels.

    ``capacity`` is how many requests the engine runs at once (its ``max_num_seqs``); levels at or
    below ``urgent_level`` may use all of it, other levels at most ``capacity - reserved``, so a
    free slot is always ready for an urgent request.
    """

    capacity: int
    reserved: int
    urgent_level: int
    policies: dict[int, QueuePolicy]
    start: Callable[[T, int], None]
    reject: Callable[[T, QueueRejected], None]
    # Whether a waiting item's client has gone; checked when its turn comes, so a slot is never
    # given to a request nobody waits for.
    cancelled: Callable[[T], bool] | None = None
    clock: Callable[[], float] = time.monotonic
    _queues: dict[int, deque[_Waiting[T]]] = field(init=False)
    _running: Counter[int] = field(init=False, default_factory=Counter)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _closed: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {self.capacity}")
        if not 0 <= self.reserved < self.capacity:
            raise ValueError(f"reserved slots must be in 0..{self.capacity - 1}, got {self.reserved}")
        self._queues = {level: deque() for level in self.policies}

    @property
    def shared_capacity(self) -> int:
        """Slots that non-urgent levels may use."""
        return self.capacity - self.reserved

    def submit(self, item: T, level: int, timeout_s: float | None = None) -> None:
        """Start ``item`` now if a slot allows, else queue it; raises ``QueueRejected`` if full."""
        policy = self.policies[level]
        now = self.clock()
        timeout = policy.timeout_for(timeout_s)
        deadline = now + timeout if timeout > 0 else math.inf
        with self._lock:
            if self._closed:
                raise QueueRejected("the model is unloading")
            queue = self._queues[level]
            if not queue and self._fits(level):
                self._running[level] += 1
                self.start(item, level)
                return
            if policy.max_queue_size and len(queue) >= policy.max_queue_size:
                raise QueueRejected(
                    f"priority level {level} queue is full ({policy.max_queue_size} waiting, "
                    "max_queue_size); retry later or at another level"
                )
            queue.append(_Waiting(item, level, now, deadline))

    def release(self, level: int) -> None:
        """A started item finished: free its slot and start what may run next."""
        with self._lock:
            if self._running[level] <= 0:
                raise RuntimeError(f"release without start at priority level {level}")
            self._running[level] -= 1
            dropped = self._dispatch()
        for item in dropped:
            self.reject(item, QueueRejected("cancelled by the client"))

    def expire(self, is_cancelled: Callable[[T], bool] | None = None) -> None:
        """Refuse items past their queue timeout and drop those their clients cancelled."""
        now = self.clock()
        refused: list[tuple[T, QueueRejected]] = []
        with self._lock:
            for level, queue in self._queues.items():
                kept: deque[_Waiting[T]] = deque()
                for waiting in queue:
                    if now >= waiting.deadline:
                        waited_ms = (now - waiting.enqueued) * 1000
                        refused.append((waiting.item, QueueRejected(
                            f"timed out after {waited_ms:.0f} ms waiting in the priority level "
                            f"{level} queue (queue timeout); the engine is saturated"
                        )))
                    elif is_cancelled is not None and is_cancelled(waiting.item):
                        refused.append((waiting.item, QueueRejected("cancelled by the client")))
                    else:
                        kept.append(waiting)
                self._queues[level] = kept
        for item, error in refused:
            self.reject(item, error)

    def close(self) -> list[T]:
        """Accept nothing more; return what was still waiting (the caller answers it)."""
        with self._lock:
            self._closed = True
            left = [w.item for queue in self._queues.values() for w in queue]
            for queue in self._queues.values():
                queue.clear()
            return left

    def snapshot(self) -> tuple[dict[int, int], dict[int, int]]:
        """(running, waiting) per priority level."""
        with self._lock:
            running = {level: self._running[level] for level in self._queues}
            waiting = {level: len(queue) for level, queue in self._queues.items()}
            return running, waiting

    @property
    def running(self) -> int:
        with self._lock:
            return sum(self._running.values())

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing runs; False if ``timeout`` seconds pass first."""
        deadline = self.clock() + timeout
        while self.running:
            if self.clock() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _fits(self, level: int) -> bool:
        running = sum(self._running.values())
        limit = self.capacity if level <= self.urgent_level else self.shared_capacity
        return running < limit

    def _dispatch(self) -> list[T]:
        """Start what fits; returns the cancelled items passed over (rejected by the caller,
        outside the lock)."""
        # Most urgent level first, FIFO within a level; a level that does not fit (the shared
        # slots are taken) does not block a more urgent one behind it.
        dropped: list[T] = []
        for level in sorted(self._queues):
            queue = self._queues[level]
            while queue and self._fits(level):
                waiting = queue.popleft()
                if self.cancelled is not None and self.cancelled(waiting.item):
                    dropped.append(waiting.item)
                    continue
                self._running[level] += 1
                self.start(waiting.item, level)
        return dropped
