"""What checking a tenant's limits costs the gateway per request: admitting (slot, request window,
token reservations in the minute and the day) and settling, against a real Redis of the
benchmark's own, for a tenant with all four limits, with 1 and with 16 requests at once. Also the
same with Redis stopped (fail open: this process's memory), which is what a gateway pays while
Redis is away. The issue's goal is stated for the gateway's added latency (p50, p99); this is
that latency, measured at the quota gate, where all of it is spent.

    make bench-limits        (or: .venv/bin/python -m bench.limits --requests 2000)
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import print_table, write_results
from gateway.quotas.admission import FailureMode, QuotaGate
from gateway.quotas.policy import Limits, scopes_for
from gateway.quotas.redis_store import redis_counters
from tests.redis_server import RedisServer

LIMITS = Limits(requests_per_minute=10**9, tokens_per_minute=10**12, concurrent_requests=10**6,
                daily_tokens=10**12)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def measure(gate: QuotaGate, requests: int, concurrency: int) -> dict[str, Any]:
    scopes = scopes_for(f"bench-{uuid.uuid4().hex[:8]}", LIMITS, {"m": LIMITS}, "m")
    admit_ms: list[float] = []
    settle_ms: list[float] = []
    remaining = requests

    async def client() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            started = time.perf_counter()
            grant = await gate.admit(scopes, 40, 64)
            admitted = time.perf_counter()
            await gate.settle(grant, 80)
            admit_ms.append((admitted - started) * 1000)
            settle_ms.append((time.perf_counter() - admitted) * 1000)

    wall = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    wall = time.perf_counter() - wall
    return {"requests": len(admit_ms), "concurrency": concurrency,
            "admit_p50_ms": round(percentile(admit_ms, 0.5), 3),
            "admit_p99_ms": round(percentile(admit_ms, 0.99), 3),
            "settle_p50_ms": round(percentile(settle_ms, 0.5), 3),
            "settle_p99_ms": round(percentile(settle_ms, 0.99), 3),
            "checks_per_second": round(len(admit_ms) / wall, 1)}


async def run(requests: int, directory: Path) -> dict[str, Any]:
    server = RedisServer(directory)
    server.start()
    results = []
    try:
        counters, client = redis_counters(server.url, 0.25)
        gate = QuotaGate(counters, FailureMode.OPEN)
        await measure(gate, 200, 4)  # warm-up: connections, Lua script load
        for concurrency in (1, 16):
            results.append({"store": "redis", **await measure(gate, requests, concurrency)})
        server.stop()
        down = QuotaGate(redis_counters(server.url, 0.25)[0], FailureMode.OPEN, retry_s=1.0)
        for concurrency in (1, 16):
            results.append({"store": "redis down: memory (fail open)",
                            **await measure(down, requests, concurrency)})
        await client.aclose()
    finally:
        server.stop()
    return {"limits": {"requests_per_minute": LIMITS.requests_per_minute,
                       "scopes": "tenant + tenant on model, all four limits each"},
            "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        data = asyncio.run(run(args.requests, Path(directory)))
    print_table("limit checks per request (admit = before the node sees it; settle = after)",
                ["store", "concurrency", "admit p50 ms", "admit p99 ms", "settle p50 ms",
                 "settle p99 ms", "checks/s"],
                [[r["store"], r["concurrency"], r["admit_p50_ms"], r["admit_p99_ms"],
                  r["settle_p50_ms"], r["settle_p99_ms"], r["checks_per_second"]]
                 for r in data["results"]])
    write_results("limits", data)


if __name__ == "__main__":
    main()
