"""The shared counters in Redis: ``limits``' Redis storage (redis-py) for the windows, and a
sorted set per scope for the slots of requests in flight (member: the request's lease, score:
when it expires), taken by one Lua script so two gateways never both get the last slot. Every
Redis error comes out as ``StoreUnavailable``."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from limits import RateLimitItem
from limits.storage import storage_from_string
from redis import asyncio as redis_asyncio
from redis.exceptions import RedisError

from gateway.quotas.counters import Counters, StoreUnavailable

T = TypeVar("T")
PREFIX = "llmgw"
# Drop the expired leases, then take a slot if one is free; the key itself expires once every
# lease in it would have.
_ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  return 1
end
return 0
"""


async def _guarded(call: Callable[[], Awaitable[T]]) -> T:
    try:
        return await call()
    except (RedisError, OSError, TimeoutError) as exc:
        raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc


class RedisSlots:
    def __init__(self, client: redis_asyncio.Redis) -> None:
        self.client = client
        self._acquire = client.register_script(_ACQUIRE)

    @staticmethod
    def _key(key: str) -> str:
        return f"{PREFIX}:inflight:{key}"

    async def acquire(self, key: str, limit: int, lease: str, ttl_s: float) -> bool:
        now = time.time()
        taken = await _guarded(lambda: self._acquire(
            keys=[self._key(key)], args=[now, limit, now + ttl_s, lease, int(ttl_s * 1000)]))
        return bool(taken)

    async def release(self, key: str, lease: str) -> None:
        await _guarded(lambda: self.client.zrem(self._key(key), lease))

    async def renew(self, leases: Mapping[str, str], ttl_s: float) -> None:
        if not leases:
            return
        expiry = time.time() + ttl_s

        async def send() -> Any:
            async with self.client.pipeline(transaction=False) as pipe:
                for lease, key in leases.items():
                    # XX: a lease released meanwhile is not brought back.
                    pipe.zadd(self._key(key), {lease: expiry}, xx=True)
                    pipe.pexpire(self._key(key), int(ttl_s * 1000))
                return await pipe.execute()

        await _guarded(send)


class RedisCounters(Counters):
    async def hit(self, item: RateLimitItem, identifiers: tuple[str, ...], cost: int) -> bool:
        return await _guarded(lambda: super(RedisCounters, self).hit(item, identifiers, cost))

    async def add(self, item: RateLimitItem, identifiers: tuple[str, ...], amount: int) -> None:
        await _guarded(lambda: super(RedisCounters, self).add(item, identifiers, amount))

    async def reset_at(self, item: RateLimitItem, identifiers: tuple[str, ...]) -> float:
        return await _guarded(lambda: super(RedisCounters, self).reset_at(item, identifiers))


def redis_counters(url: str, timeout_s: float) -> tuple[RedisCounters, redis_asyncio.Redis]:
    """Counters in the Redis at ``url`` (redis://host:port/db); each call gives up after
    ``timeout_s``, so a hung Redis costs a request that long at most."""
    options = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    storage = storage_from_string(f"async+{url}", implementation="redispy", key_prefix=PREFIX,
                                  **options)
    client = redis_asyncio.Redis.from_url(url, **options)
    return RedisCounters("redis", storage, RedisSlots(client)), client
