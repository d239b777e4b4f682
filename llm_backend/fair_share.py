"""Fair share between tenants inside one priority level: the Virtual Token Counter of Sheng et
al., "Fairness in Serving Large Language Models" (OSDI 2024, arXiv 2401.00588).

Every tenant has a counter of the service it received: each prompt token counts ``INPUT_WEIGHT``,
each generated token ``OUTPUT_WEIGHT``, divided by the tenant's weight. Of the requests waiting at
a level, the next to start is the oldest of the tenant whose counter is lowest. A tenant that
arrives with nothing waiting or running has its counter lifted to the lowest counter of the
tenants that are active, so time spent away is not banked as credit to crowd the others out
with later. Requests without a tenant count as one tenant, ``SHARED``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

INPUT_WEIGHT = 1.0
# Generating a token costs the engine more than reading one (the paper's w_q = 2 w_p).
OUTPUT_WEIGHT = 2.0
SHARED = ""

T = TypeVar("T")


@dataclass
class Waiting(Generic[T]):
    item: T
    level: int
    enqueued: float
    deadline: float
    tenant: str = SHARED
    order: int = 0  # submission order, the tie-breaker
    prompt_tokens: int = 0  # service charged when it starts
    preemptions: int = 0  # how often it was stopped for another tenant and queued again


class VirtualCounters:
    """The service each tenant received, in weighted tokens; not thread-safe (the scheduler
    holds its lock around every call)."""

    def __init__(self) -> None:
        self.counters: dict[str, float] = {}
        self.weights: dict[str, float] = {}
        self.running: dict[str, int] = {}

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, 1.0)

    def arrive(self, tenant: str, weight: float, active: set[str]) -> None:
        """A request of ``tenant`` arrives; ``active``: tenants with requests waiting (this
        tenant's included when it has any)."""
        self.weights[tenant] = weight
        busy = {t for t in active if t != tenant} | {t for t, n in self.running.items()
                                                        if n > 0 and t != tenant}
        if tenant in active or self.running.get(tenant, 0) > 0:
            return  # already in the competition: its counter stands
        if not busy:
            # Nobody else is waiting or running: past service decides nothing any more.
            self.counters = {tenant: 0.0}
            return
        self.counters[tenant] = max(self.counters.get(tenant, 0.0), self._lowest(busy))

    def _lowest(self, tenants: set[str]) -> float:
        return min((self.counters.get(t, 0.0) for t in tenants), default=0.0)

    def started(self, tenant: str, prompt_tokens: int) -> None:
        self.running[tenant] = self.running.get(tenant, 0) + 1
        self.charge(tenant, prompt_tokens * INPUT_WEIGHT)

    def generated(self, tenant: str, tokens: int) -> None:
        self.charge(tenant, tokens * OUTPUT_WEIGHT)

    def finished(self, tenant: str) -> None:
        self.running[tenant] = max(0, self.running.get(tenant, 0) - 1)

    def charge(self, tenant: str, weighted_tokens: float) -> None:
        self.counters[tenant] = self.counters.get(tenant, 0.0) + \
            weighted_tokens / self.weight(tenant)

    def of(self, tenant: str) -> float:
        return self.counters.get(tenant, 0.0)


class FairQueue(Generic[T]):
    """One level's waiting requests: first in, first out per tenant; across tenants, the one
    served least goes first (ties: the oldest)."""

    def __init__(self, counters: VirtualCounters) -> None:
        self.counters = counters
        self._by_tenant: dict[str, deque[Waiting[T]]] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[Waiting[T]]:
        for queue in self._by_tenant.values():
            yield from queue

    def tenants(self) -> set[str]:
        return set(self._by_tenant)

    def head(self, tenant: str) -> Waiting[T]:
        """The request of ``tenant`` that would go first (it must have one waiting)."""
        return self._by_tenant[tenant][0]

    def append(self, waiting: Waiting[T]) -> None:
        self._by_tenant.setdefault(waiting.tenant, deque()).append(waiting)
        self._size += 1

    def appendleft(self, waiting: Waiting[T]) -> None:
        """Queue ``waiting`` first in its tenant's line (a preempted request, resuming)."""
        self._by_tenant.setdefault(waiting.tenant, deque()).appendleft(waiting)
        self._size += 1

    def popleft(self) -> Waiting[T]:
        tenant = min(self._by_tenant, key=lambda t: (self.counters.of(t),
                                                     self._by_tenant[t][0].order))
        queue = self._by_tenant[tenant]
        waiting = queue.popleft()
        if not queue:
            del self._by_tenant[tenant]
        self._size -= 1
        return waiting

    def remove_where(self, doomed: Callable[[Waiting[T]], bool]) -> list[Waiting[T]]:
        """Take out and return every waiting request ``doomed`` picks, keeping the order of the
        rest."""
        removed: list[Waiting[T]] = []
        for tenant in list(self._by_tenant):
            kept: deque[Waiting[T]] = deque()
            for waiting in self._by_tenant[tenant]:
                (removed if doomed(waiting) else kept).append(waiting)
            if kept:
                self._by_tenant[tenant] = kept
            else:
                del self._by_tenant[tenant]
        self._size -= len(removed)
        return removed

    def clear(self) -> list[Waiting[T]]:
        left = list(self)
        self._by_tenant.clear()
        self._size = 0
        return left
