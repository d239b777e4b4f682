"""Counters behind the limits: fixed windows from the ``limits`` library (requests and tokens per
minute, tokens per day) and slots for requests in flight, held as leases that expire, so a
gateway that dies frees its slots within one lease. ``memory_counters`` keeps them in this
process; ``redis_store`` in Redis, shared by every gateway."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Protocol

from limits import RateLimitItem
from limits.aio.storage import MemoryStorage, Storage
from limits.aio.strategies import FixedWindowRateLimiter


class StoreUnavailable(Exception):
    """The shared store did not answer (Redis down, refused, too slow)."""


class Slots(Protocol):
    async def acquire(self, key: str, limit: int, lease: str, ttl_s: float) -> bool: ...

    async def release(self, key: str, lease: str) -> None: ...

    async def renew(self, leases: Mapping[str, str], ttl_s: float) -> None: ...


class MemorySlots:
    def __init__(self) -> None:
        self._held: dict[str, dict[str, float]] = {}

    async def acquire(self, key: str, limit: int, lease: str, ttl_s: float) -> bool:
        now = time.time()
        held = {k: v for k, v in self._held.get(key, {}).items() if v > now}
        if len(held) >= limit:
            self._held[key] = held
            return False
        held[lease] = now + ttl_s
        self._held[key] = held
        return True

    async def release(self, key: str, lease: str) -> None:
        self._held.get(key, {}).pop(lease, None)

    async def renew(self, leases: Mapping[str, str], ttl_s: float) -> None:
        expiry = time.time() + ttl_s
        for lease, key in leases.items():
            if lease in self._held.get(key, {}):
                self._held[key][lease] = expiry


class Counters:
    """One store's windows and slots. A refused window hit has counted itself (fixed windows
    increment, then compare), so it is taken back at once."""

    def __init__(self, name: str, storage: Storage, slots: Slots) -> None:
        self.name = name
        self.storage = storage
        self.windows = FixedWindowRateLimiter(storage)
        self.slots = slots

    async def hit(self, item: RateLimitItem, identifiers: tuple[str, ...], cost: int) -> bool:
        if await self.windows.hit(item, *identifiers, cost=cost):
            return True
        await self.add(item, identifiers, -cost)
        return False

    async def add(self, item: RateLimitItem, identifiers: tuple[str, ...], amount: int) -> None:
        """Count ``amount`` more (or, negative, less) in the window, without a limit check."""
        await self.storage.incr(item.key_for(*identifiers), item.get_expiry(), amount=amount)

    async def reset_at(self, item: RateLimitItem, identifiers: tuple[str, ...]) -> float:
        """When the current window ends (epoch seconds)."""
        stats = await self.windows.get_window_stats(item, *identifiers)
        return float(stats.reset_time)


def memory_counters() -> Counters:
    return Counters("memory", MemoryStorage(), MemorySlots())
