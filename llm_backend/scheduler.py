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
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from llm_backend.errors import Unavailable
from llm_backend.fair_share import SHARED, FairQueue, VirtualCounters, Waiting

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
    # How much service each tenant received: who goes first inside a level (fair_share.py).
    counters: VirtualCounters = field(default_factory=VirtualCounters)
    _queues: dict[int, FairQueue[T]] = field(init=False)
    _tenant_of: dict[int, str] = field(init=False, default_factory=dict)
    _submitted: int = field(init=False, default=0)
    _running: Counter[int] = field(init=False, default_factory=Counter)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _closed: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {self.capacity}")
        if not 0 <= self.reserved < self.capacity:
            raise ValueError(f"reserved slots must be in 0..{self.capacity - 1}, got {self.reserved}")
        self._queues = {level: FairQueue(self.counters) for level in self.policies}

    @property
    def shared_capacity(self) -> int:
        """Slots that non-urgent levels may use."""
        return self.capacity - self.reserved

    def submit(self, item: T, level: int, timeout_s: float | None = None,
               tenant: str | None = None, weight: float = 1.0, prompt_tokens: int = 0) -> None:
        """Start ``item`` now if a slot allows, else queue it; raises ``QueueRejected`` if full.
        ``tenant`` (None: the shared one) and its ``weight`` decide its turn among the level's
        waiting requests; its ``prompt_tokens`` count as service once it starts."""
        policy = self.policies[level]
        now = self.clock()
        timeout = policy.timeout_for(timeout_s)
        deadline = now + timeout if timeout > 0 else math.inf
        who = SHARED if tenant is None else tenant
        with self._lock:
            if self._closed:
                raise QueueRejected("the model is unloading")
            queue = self._queues[level]
            if policy.max_queue_size and len(queue) >= policy.max_queue_size:
                raise QueueRejected(
                    f"priority level {level} queue is full ({policy.max_queue_size} waiting, "
                    "max_queue_size); retry later or at another level"
                )
            waiting_tenants = set().union(*(q.tenants() for q in self._queues.values()))
            self.counters.arrive(who, weight, waiting_tenants)
            self._submitted += 1
            waiting = Waiting(item, level, now, deadline, who, self._submitted, prompt_tokens)
            if not queue and self._fits(level):
                self._begin(waiting)
                return
            queue.append(waiting)

    def generated(self, item: T, tokens: int) -> None:
        """A started item produced ``tokens`` more output tokens: service for its tenant."""
        with self._lock:
            tenant = self._tenant_of.get(id(item))
            if tenant is not None:
                self.counters.generated(tenant, tokens)

    def release(self, level: int, item: T | None = None) -> None:
        """A started item finished: free its slot and start what may run next."""
        with self._lock:
            if self._running[level] <= 0:
                raise RuntimeError(f"release without start at priority level {level}")
            self._running[level] -= 1
            tenant = self._tenant_of.pop(id(item), None) if item is not None else None
            if tenant is not None:
                self.counters.finished(tenant)
            dropped = self._dispatch()
        for passed_over in dropped:
            self.reject(passed_over, QueueRejected("cancelled by the client"))

    def expire(self, is_cancelled: Callable[[T], bool] | None = None) -> None:
        """Refuse items past their queue timeout and drop those their clients cancelled."""
        now = self.clock()
        refused: list[tuple[T, QueueRejected]] = []
        with self._lock:
            for level, queue in self._queues.items():
                def doomed(waiting: Waiting[T], level: int = level) -> bool:
                    if now >= waiting.deadline:
                        waited_ms = (now - waiting.enqueued) * 1000
                        refused.append((waiting.item, QueueRejected(
                            f"timed out after {waited_ms:.0f} ms waiting in the priority level "
                            f"{level} queue (queue timeout); the engine is saturated"
                        )))
                        return True
                    if is_cancelled is not None and is_cancelled(waiting.item):
                        refused.append((waiting.item, QueueRejected("cancelled by the client")))
                        return True
                    return False

                queue.remove_where(doomed)
        for item, error in refused:
            self.reject(item, error)

    def close(self) -> list[T]:
        """Accept nothing more; return what was still waiting (the caller answers it)."""
        with self._lock:
            self._closed = True
            return [w.item for queue in self._queues.values() for w in queue.clear()]

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
        # Most urgent level first; within a level the tenant served least, FIFO per tenant; a
        # level that does not fit (the shared slots are taken) does not block a more urgent one
        # behind it.
        dropped: list[T] = []
        for level in sorted(self._queues):
            queue = self._queues[level]
            while queue and self._fits(level):
                waiting = queue.popleft()
                if self.cancelled is not None and self.cancelled(waiting.item):
                    dropped.append(waiting.item)
                    continue
                self._begin(waiting)
        return dropped

    def _begin(self, waiting: Waiting[T]) -> None:
        self._running[waiting.level] += 1
        self._tenant_of[id(waiting.item)] = waiting.tenant
        self.counters.started(waiting.tenant, waiting.prompt_tokens)
        self.start(waiting.item, waiting.level)
