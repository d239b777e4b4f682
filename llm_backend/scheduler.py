"""Admission: which waiting request the engine takes next, and when a waiting request is refused.

Why the backend keeps its own priority queue instead of leaving waiting requests in Triton's:
a request can only wait in Triton's queue while ``execute()`` blocks, and a blocked ``execute()``
holds one request that the next urgent one cannot pass; vLLM never preempts a running request to
admit a more urgent one. So an urgent request behind a full engine would wait for a long
generation to finish. Here it takes a reserved engine slot at once (README, "Design notes").

The queue enforces per priority level the queue policies the model config declares for it
(``queue_config.py``: ``max_queue_size``, ``default_timeout_microseconds``,
``allow_timeout_override``, as in Triton's ``ModelQueuePolicy``).

Fair share preempts (``preempt`` set): a tenant with nothing running that arrives while every slot
is taken takes a slot from the tenant holding the most, at its level or a less urgent one, so it
never waits for someone else's long generations to end. The victim goes back to the head of its
tenant's queue and resumes where it stopped (``engine.py``); its tenant keeps at least one slot,
so two tenants never take slots from each other back and forth.
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
# A request is preempted at most this many times: each costs it a pause in its stream and a
# re-read of its prompt and what it generated (mostly from vLLM's prefix cache). Victims are
# spread over the tenant's requests, so a short newcomer every second does not use one up.
MAX_PREEMPTIONS = 8


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
class Running(Generic[T]):
    """A started request: what it was while waiting (to queue it again if it is preempted)."""

    waiting: Waiting[T]
    started: int  # start order: the most recently started is preempted first (least work lost)
    preemptions: int = 0
    # Told to stop so another tenant's request can run; its slot is already given away.
    preempted: bool = False


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
    # Stop the first (running) item and start the second in its slot; None: never preempt.
    preempt: Callable[[T, T], None] | None = None
    # Whether a running item can be stopped now and resumed later.
    preemptible: Callable[[T], bool] = lambda item: True
    _queues: dict[int, FairQueue[T]] = field(init=False)
    _started: dict[int, Running[T]] = field(init=False, default_factory=dict)
    # Per tenant: started requests not told to stop (the slots it holds).
    _holding: Counter[str] = field(init=False, default_factory=Counter)
    _starts: int = field(init=False, default=0)
    _preemptions: Counter[str] = field(init=False, default_factory=Counter)
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
            # A tenant's own waiting requests go first: only its first may take a slot.
            victim = None if who in queue.tenants() else self._victim_for(waiting)
            if victim is not None:
                self._begin(waiting, replacing=victim)
                return
            queue.append(waiting)

    def generated(self, item: T, tokens: int) -> None:
        """A started item produced ``tokens`` more output tokens: service for its tenant."""
        with self._lock:
            running = self._started.get(id(item))
            if running is not None:
                self.counters.generated(running.waiting.tenant, tokens)
                self._preempt_for_the_slotless()

    def _preempt_for_the_slotless(self) -> None:
        """A tenant waiting with nothing running whose service was not yet below the holder's
        when it arrived (it had just been served) takes a slot once the holder's grows past it:
        not only at arrival. Called on every output chunk: the common case (no such tenant, or
        no holder served more) costs a look at the waiting tenants only."""
        if self.preempt is None:
            return
        for level in sorted(self._queues):
            queue = self._queues[level]
            for tenant in queue.tenants():
                if self._holding[tenant] or not self._may_be_owed(tenant):
                    continue
                head = queue.head(tenant)
                victim = self._victim_for(head)
                if victim is None or (self.cancelled is not None and self.cancelled(head.item)):
                    continue
                # A def, not a lambda with a default: mypy cannot type a lambda's default.
                def is_head(waiting: Waiting[T], head: Waiting[T] = head) -> bool:
                    return waiting is head

                queue.remove_where(is_head)
                self._begin(head, replacing=victim, preemptions=head.preemptions)
                return  # one at a time: the holdings changed

    def _may_be_owed(self, tenant: str) -> bool:
        """Whether some tenant holding two or more slots has had at least ``tenant``'s service."""
        mine = self.counters.of(tenant)
        return any(count >= 2 and self.counters.of(holder) >= mine
                   for holder, count in self._holding.items())

    def release(self, level: int, item: T | None = None, stopped_early: bool = False) -> None:
        """A started item ended: free its slot and start what may run next. ``stopped_early``:
        it ended because it was preempted, before it finished; it waits again, first of its
        tenant's, and resumes when its turn comes."""
        with self._lock:
            if self._running[level] <= 0:
                raise RuntimeError(f"release without start at priority level {level}")
            self._running[level] -= 1
            running = self._pop_started(level, item)
            if running is not None:
                if not running.preempted:
                    self._holding[running.waiting.tenant] -= 1
                self.counters.finished(running.waiting.tenant)
                if stopped_early and running.preempted:
                    self._requeue(running)
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

    def tenant_snapshot(self) -> dict[str, tuple[int, int, int]]:
        """Per tenant seen so far: (running, waiting, preempted so far); ``SHARED`` is ``""``."""
        with self._lock:
            waiting = Counter(w.tenant for queue in self._queues.values() for w in queue)
            tenants = set(self._holding) | set(waiting) | set(self._preemptions) | set(
                self.counters.weights)
            return {t: (self._holding[t], waiting[t], self._preemptions[t]) for t in tenants}

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
                self._begin(waiting, preemptions=waiting.preemptions)
        return dropped

    def _begin(self, waiting: Waiting[T], replacing: Running[T] | None = None,
               preemptions: int = 0) -> None:
        self._running[waiting.level] += 1
        self._starts += 1
        self._started[id(waiting.item)] = Running(waiting, self._starts, preemptions)
        self._holding[waiting.tenant] += 1
        self.counters.started(waiting.tenant, waiting.prompt_tokens)
        if replacing is None:
            self.start(waiting.item, waiting.level)
            return
        # The victim keeps counting as running until it has stopped (release): nothing else
        # starts in between, so the engine never holds more than its slots plus this one.
        if self.preempt is None:
            raise RuntimeError("a victim was chosen with preemption off")
        replacing.preempted = True
        self._holding[replacing.waiting.tenant] -= 1
        self._preemptions[replacing.waiting.tenant] += 1
        self.preempt(replacing.waiting.item, waiting.item)

    def _victim_for(self, waiting: Waiting[T]) -> Running[T] | None:
        """The running request ``waiting`` may take the slot of, if any: only for a tenant with
        nothing running, from the tenant holding the most slots (at least two), at the same or
        a less urgent level, whose service is not below the newcomer's (the newcomer is owed
        service, as the fair queue would say). Of that tenant's requests: the one preempted
        least, then the latest started (the least work to redo)."""
        if self.preempt is None:
            return None
        holding = self._holding
        if holding[waiting.tenant]:
            return None
        newcomer = self.counters.of(waiting.tenant)
        candidates = [
            r for r in self._started.values()
            if not r.preempted and r.waiting.level >= waiting.level
            and r.waiting.tenant != waiting.tenant and holding[r.waiting.tenant] >= 2
            and r.preemptions < MAX_PREEMPTIONS
            and self.counters.of(r.waiting.tenant) >= newcomer and self.preemptible(r.waiting.item)
        ]
        if not candidates:
            return None
        return max(candidates, key=lambda r: (holding[r.waiting.tenant],
                                              self.counters.of(r.waiting.tenant),
                                              -r.preemptions, r.started))

    def _pop_started(self, level: int, item: T | None) -> Running[T] | None:
        if item is not None:
            return self._started.pop(id(item), None)
        # A caller that does not say which item ended: the oldest at that level.
        oldest = min((r for r in self._started.values() if r.waiting.level == level),
                     key=lambda r: r.started, default=None)
        return None if oldest is None else self._started.pop(id(oldest.waiting.item))

    def _requeue(self, running: Running[T]) -> None:
        """Put a preempted request back first in its tenant's line. It keeps its place and never
        times out (it has streamed already); its prompt was charged when it first started."""
        waiting = running.waiting
        waiting.deadline = math.inf
        waiting.prompt_tokens = 0
        waiting.preemptions = running.preemptions + 1
        self._queues[waiting.level].appendleft(waiting)
