"""Tenant limits against a real Redis (a redis-server of the tests' own, stopped and started by
them): each limit refused at the right point with when to retry, reservations settled to the
backend's count, two gateways sharing one limit, and Redis going away in each failure mode."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.errors import BadRequest, LimitsUnavailable, RateLimited
from gateway.quotas.admission import FailureMode, QuotaGate, seconds_to_utc_midnight
from gateway.quotas.policy import Limits, Scope, scopes_for
from gateway.quotas.redis_store import redis_counters
from tests.redis_server import RedisServer
from tests.utc_day import within_one_utc_day


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


def gate(server: RedisServer, mode: FailureMode = FailureMode.OPEN,
         states: list[bool] | None = None, retry_s: float = 0.2) -> QuotaGate:
    counters, _ = redis_counters(server.url, 0.25)
    return QuotaGate(counters, mode, on_store_state=(states.append if states is not None
                                                     else lambda up: None), retry_s=retry_s)


def scope(**limits: int) -> list[Scope]:
    tenant = f"t-{uuid.uuid4().hex[:8]}"  # counters of the test's own
    return scopes_for(tenant, Limits(**limits), {}, "m")


def run(coroutine):  # type: ignore[no-untyped-def]
    return asyncio.run(coroutine)


def test_requests_per_minute_refuse_the_next_with_when_the_window_ends(
        redis_server: RedisServer) -> None:
    async def body() -> None:
        quotas, scopes = gate(redis_server), scope(requests_per_minute=3)
        for _ in range(3):
            await quotas.settle(await quotas.admit(scopes, 5, 10), 15)
        with pytest.raises(RateLimited) as refused:
            await quotas.admit(scopes, 5, 10)
        assert refused.value.limit == "requests_per_minute"
        assert 0 < refused.value.retry_after_s <= 60
        assert "has made 3 request(s) this minute" in refused.value.message
        assert refused.value.headers()["Retry-After"].isdigit()
        # The refused request took nothing: still refused, not counted twice.
        with pytest.raises(RateLimited):
            await quotas.admit(scopes, 5, 10)

    run(body())


def test_tokens_are_reserved_then_settled_to_what_was_used(redis_server: RedisServer) -> None:
    async def body() -> None:
        quotas, scopes = gate(redis_server), scope(tokens_per_minute=100)
        first = await quotas.admit(scopes, 20, 50)  # reserves 70
        with pytest.raises(RateLimited) as refused:
            await quotas.admit(scopes, 20, 20)  # 70 + 40 > 100 while the first is in flight
        assert refused.value.limit == "tokens_per_minute"
        assert "with this request's 40 token(s)" in refused.value.message
        await quotas.settle(first, 25)  # it used 25: 45 go back
        second = await quotas.admit(scopes, 20, 20)  # 25 + 40 <= 100
        await quotas.settle(second, 40)
        third = await quotas.admit(scopes, 10, 20)  # 65 + 30 <= 100
        await quotas.settle(third, 60)  # more than reserved: the excess is counted
        with pytest.raises(RateLimited):
            await quotas.admit(scopes, 1, 1)  # 125 used this minute

    run(body())


def test_a_request_no_window_can_hold_is_a_bad_request(redis_server: RedisServer) -> None:
    async def body() -> None:
        quotas, scopes = gate(redis_server), scope(tokens_per_minute=100, daily_tokens=1000)
        with pytest.raises(BadRequest) as refused:
            await quotas.admit(scopes, 60, 50)
        assert "more than tenant" in refused.value.message and "tokens_per_minute of 100" in \
            refused.value.message
        # Judged on the least the prompt can be, so an estimate from above never refuses.
        grant = await quotas.admit(scopes, 5000, 50, least_prompt_tokens=40)
        await quotas.settle(grant, 60)

    run(body())


def test_concurrent_requests_hold_a_slot_until_they_end(redis_server: RedisServer) -> None:
    async def body() -> None:
        quotas, scopes = gate(redis_server), scope(concurrent_requests=2)
        held = [await quotas.admit(scopes, 1, 1) for _ in range(2)]
        with pytest.raises(RateLimited) as refused:
            await quotas.admit(scopes, 1, 1)
        assert refused.value.limit == "concurrent_requests"
        assert "has 2 request(s) in flight" in refused.value.message
        await quotas.settle(held[0], 2)
        await quotas.settle(held[0], 2)  # settling twice frees nothing more
        again = await quotas.admit(scopes, 1, 1)
        with pytest.raises(RateLimited):
            await quotas.admit(scopes, 1, 1)
        await quotas.settle(again, 2)
        await quotas.settle(held[1], 2)

    run(body())


def test_daily_tokens_retry_at_utc_midnight(redis_server: RedisServer) -> None:
    within_one_utc_day(10)

    async def body() -> None:
        quotas, scopes = gate(redis_server), scope(daily_tokens=50)
        await quotas.settle(await quotas.admit(scopes, 10, 30), 40)
        with pytest.raises(RateLimited) as refused:
            await quotas.admit(scopes, 10, 10)
        assert refused.value.limit == "daily_tokens"
        assert abs(refused.value.retry_after_s - seconds_to_utc_midnight(time.time())) < 5
        assert "today (UTC)" in refused.value.message

    run(body())


def test_a_refusal_in_one_scope_gives_back_what_the_others_took(
        redis_server: RedisServer) -> None:
    async def body() -> None:
        quotas = gate(redis_server)
        tenant = f"t-{uuid.uuid4().hex[:8]}"
        scopes = scopes_for(tenant, Limits(requests_per_minute=5, concurrent_requests=5),
                            {"m": Limits(tokens_per_minute=30)}, "m")
        assert [s.label for s in scopes] == [f"tenant '{tenant}'",
                                             f"tenant '{tenant}' on model 'm'"]
        grant = await quotas.admit(scopes, 10, 10)
        for _ in range(3):  # each refused by the model's tokens, taking nothing of the tenant's
            with pytest.raises(RateLimited) as refused:
                await quotas.admit(scopes, 10, 10)
            assert "on model 'm'" in refused.value.message
        await quotas.settle(grant, 20)
        # 1 request of the 5 per minute used, so 4 more pass (tokens permitting: 1 + 1 each).
        other = scopes_for(tenant, Limits(requests_per_minute=5, concurrent_requests=5), {},
                           "other")
        for _ in range(4):
            await quotas.settle(await quotas.admit(other, 1, 1), 2)
        with pytest.raises(RateLimited):
            await quotas.admit(other, 1, 1)

    run(body())


def test_two_gateways_enforce_one_limit_together(redis_server: RedisServer) -> None:
    async def body() -> None:
        first, second, scopes = gate(redis_server), gate(redis_server), scope(
            requests_per_minute=4, concurrent_requests=1)
        held = await first.admit(scopes, 1, 1)
        with pytest.raises(RateLimited):
            await second.admit(scopes, 1, 1)  # the slot is taken on the other gateway
        await first.settle(held, 2)
        for quotas in (second, first, second):
            await quotas.settle(await quotas.admit(scopes, 1, 1), 2)
        with pytest.raises(RateLimited) as refused:
            await first.admit(scopes, 1, 1)  # 4 of 4 this minute, across both
        assert refused.value.limit == "requests_per_minute"

    run(body())


def test_slots_of_a_gateway_that_died_free_within_one_lease(
        redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.quotas import admission

    monkeypatch.setattr(admission, "LEASE_SECONDS", 1.0)

    async def body() -> None:
        dead, alive, scopes = gate(redis_server), gate(redis_server), scope(
            concurrent_requests=1)
        await dead.admit(scopes, 1, 1)  # never settled, never renewed: its gateway is gone
        with pytest.raises(RateLimited):
            await alive.admit(scopes, 1, 1)
        await asyncio.sleep(1.2)
        kept = await alive.admit(scopes, 1, 1)
        # A live gateway renews its slots: still held after the lease.
        await asyncio.sleep(0.6)
        await alive.renew_leases()
        await asyncio.sleep(0.6)
        with pytest.raises(RateLimited):
            await dead.admit(scopes, 1, 1)
        await alive.settle(kept, 2)

    run(body())


def test_redis_down_fails_open_to_this_gateways_memory_then_comes_back(
        tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.start()
    states: list[bool] = []

    async def body() -> None:
        quotas, scopes = gate(server, FailureMode.OPEN, states), scope(requests_per_minute=2)
        await quotas.settle(await quotas.admit(scopes, 1, 1), 2)
        server.stop()
        started = time.monotonic()
        # Counted in this gateway's memory now: its own 2 per minute.
        for _ in range(2):
            await quotas.settle(await quotas.admit(scopes, 1, 1), 2)
        with pytest.raises(RateLimited):
            await quotas.admit(scopes, 1, 1)
        assert time.monotonic() - started < 2, "a dead Redis costs little per request"
        assert states[-1] is False
        server.start()
        await asyncio.sleep(0.3)  # past retry_s: Redis is tried again
        # This Redis came back empty (it keeps nothing on disk): counting starts again there.
        for _ in range(2):
            await quotas.settle(await quotas.admit(scopes, 1, 1), 2)
        assert states[-1] is True
        with pytest.raises(RateLimited):
            await quotas.admit(scopes, 1, 1)

    try:
        run(body())
    finally:
        server.stop()


def test_redis_down_fails_closed_with_503_until_it_answers(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.start()

    async def body() -> None:
        quotas, scopes = gate(server, FailureMode.CLOSED), scope(requests_per_minute=100)
        await quotas.settle(await quotas.admit(scopes, 1, 1), 2)
        server.stop()
        with pytest.raises(LimitsUnavailable) as refused:
            await quotas.admit(scopes, 1, 1)
        assert refused.value.http_status == 503 and "LLMGW_LIMITS_FAILURE_MODE=closed" in \
            refused.value.message
        with pytest.raises(LimitsUnavailable):
            await quotas.admit(scopes, 1, 1)
        # A tenant without limits never needs the store.
        assert (await quotas.admit([], 1, 1)).counters is None
        server.start()
        await asyncio.sleep(0.3)
        await quotas.settle(await quotas.admit(scopes, 1, 1), 2)

    try:
        run(body())
    finally:
        server.stop()


def test_without_redis_each_gateway_counts_alone() -> None:
    async def body() -> None:
        quotas = QuotaGate(None, FailureMode.CLOSED)
        scopes = scope(requests_per_minute=1)
        await quotas.settle(await quotas.admit(scopes, 1, 1), 2)
        with pytest.raises(RateLimited):
            await quotas.admit(scopes, 1, 1)

    run(body())
