"""Admitting a request against its tenant's limits, and settling it when it ends.

A request takes, in each of its scopes (``policy.scopes_for``), a slot for requests in flight,
one request of the minute's window, and a reservation of its prompt plus ``max_tokens`` in the
minute's and the UTC day's token windows. Refused by one, it gives back what it took. When it
ends, the reservation settles to the tokens the backend counted: the unused part is given back
(in the windows it was taken from, while they last), a shortfall is counted. So a tenant goes
over a token limit by at most what its requests in flight under-reserved.

The counters live in Redis (every gateway counts together); when Redis does not answer, the
gateway either counts in its own memory (fail open: each replica then enforces the limits on
its own) or refuses (fail closed), as ``LLMGW_LIMITS_FAILURE_MODE`` says. It tries Redis again
after ``retry_s``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from limits import RateLimitItem, RateLimitItemPerDay, RateLimitItemPerMinute

from gateway.errors import BadRequest, LimitsUnavailable, RateLimited
from gateway.quotas.counters import Counters, StoreUnavailable, memory_counters
from gateway.quotas.policy import Scope

log = logging.getLogger("gateway.quotas")
# A request in flight holds its slot this long unless renewed; the gateway renews its slots
# every third of it, so a killed gateway's slots free within one lease.
LEASE_SECONDS = 30.0
# No request holds a slot longer: one whose end was never seen (a response never started)
# frees it then.
MAX_HOLD_SECONDS = 3600.0


class FailureMode(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


@dataclass(frozen=True)
class _Check:
    """One thing a request takes in one scope: a slot, or ``cost`` in a window."""

    scope: Scope
    limit: str  # the limit's field name
    item: RateLimitItem | None  # None: a slot
    identifiers: tuple[str, ...]  # a window's; for a slot, (scope key, lease)
    cost: int


@dataclass
class Grant:
    """What one admitted request holds; ``settle`` once when it ends."""

    counters: Counters | None
    taken: list[_Check] = field(default_factory=list)
    admitted_at: float = 0.0
    settled: bool = False

    @property
    def slots(self) -> list[tuple[str, str]]:
        return [(c.identifiers[0], c.identifiers[1]) for c in self.taken if c.item is None]


TOKEN_LIMITS = ("tokens_per_minute", "daily_tokens")


def seconds_to_utc_midnight(now: float) -> float:
    today = dt.datetime.fromtimestamp(now, dt.UTC).date()
    midnight = dt.datetime.combine(today + dt.timedelta(days=1), dt.time(), dt.UTC)
    return midnight.timestamp() - now


class QuotaGate:
    def __init__(self, primary: Counters | None, mode: FailureMode,
                 on_store_state: Callable[[bool], None] = lambda up: None,
                 retry_s: float = 1.0, default_max_tokens: int = 16) -> None:
        self.primary = primary
        self.fallback = memory_counters()
        self.mode = mode
        self.on_store_state = on_store_state
        self.retry_s = retry_s
        self.default_max_tokens = default_max_tokens
        self._down_until = 0.0
        self._store_up = True
        # lease → (counters, scope key, when taken)
        self._leases: dict[str, tuple[Counters, str, float]] = {}

    # -- which store --------------------------------------------------------------------------

    def _store(self) -> Counters:
        if self.primary is None:  # no Redis configured: this gateway's own counts
            return self.fallback
        if time.monotonic() >= self._down_until:
            return self.primary
        if self.mode is FailureMode.CLOSED:
            raise LimitsUnavailable("the gateway cannot check this tenant's limits: its limit "
                                    "store (Redis) does not answer, and it is set to refuse "
                                    "then (LLMGW_LIMITS_FAILURE_MODE=closed); retry shortly")
        return self.fallback

    def _failed(self, error: StoreUnavailable) -> None:
        self._down_until = time.monotonic() + self.retry_s
        if self._store_up:
            log.warning("limit store unavailable (%s): %s", error,
                        "counting in this gateway's memory" if self.mode is FailureMode.OPEN
                        else "refusing limited tenants' requests")
        self._set_up(False)

    def _set_up(self, up: bool) -> None:
        if up != self._store_up:
            if up:
                log.warning("limit store answers again: counting in Redis")
            self._store_up = up
        self.on_store_state(up)

    # -- admission ----------------------------------------------------------------------------

    async def admit(self, scopes: list[Scope], prompt_tokens: int, max_tokens: int | None,
                    least_prompt_tokens: int | None = None) -> Grant:
        """Take what the request needs in every scope, or raise ``RateLimited`` naming the
        limit (nothing kept), ``BadRequest`` for a request no window could ever hold, or
        ``LimitsUnavailable`` (fail closed, store down).

        ``prompt_tokens`` is reserved (an exact count, or a bound from above); a request is
        refused as one that can never fit only on ``least_prompt_tokens`` (default: the
        same), so an estimate from above never refuses a request that would fit."""
        if not scopes:
            return Grant(None)
        output = self.default_max_tokens if max_tokens is None else max_tokens
        least = prompt_tokens if least_prompt_tokens is None else least_prompt_tokens
        for scope in scopes:
            _check_fits(scope, least + output, least, max_tokens)
        windows = [value for s in scopes for value in (s.limits.tokens_per_minute,
                                                       s.limits.daily_tokens)
                   if value is not None]
        if least < prompt_tokens and windows:
            # An estimate from above never reserves more than the smallest token window holds,
            # or a request that does fit would be refused for ever; settling corrects it.
            prompt_tokens = max(least, min(prompt_tokens, min(windows) - output))
        tokens = prompt_tokens + output
        store = self._store()
        try:
            grant = await self._take(store, scopes, tokens)
        except StoreUnavailable as error:
            self._failed(error)
            store = self._store()  # the fallback, or LimitsUnavailable
            grant = await self._take(store, scopes, tokens)
        else:
            if store is self.primary:
                self._set_up(True)
        return grant

    async def _take(self, store: Counters, scopes: list[Scope], tokens: int) -> Grant:
        """Every check of every scope at once (one round trip deep, not one per check); if
        any is refused, what the others took is given back."""
        now = time.time()
        checks = [check for scope in scopes for check in _checks(scope, tokens, now)]
        outcomes = await asyncio.gather(*(_run(store, check) for check in checks),
                                        return_exceptions=True)
        taken = [check for check, outcome in zip(checks, outcomes, strict=True)
                 if outcome is True]
        failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        refused = [check for check, outcome in zip(checks, outcomes, strict=True)
                   if outcome is False]
        if failed or refused:
            await _give_back(store, taken)
            if failed:
                raise failed[0]
            raise await _refusal(store, refused[0], now)
        grant = Grant(store, taken, admitted_at=now)
        taken_at = time.monotonic()
        for key, lease in grant.slots:
            self._leases[lease] = (store, key, taken_at)
        return grant

    # -- the end of a request ----------------------------------------------------------------

    async def settle(self, grant: Grant, used_tokens: int) -> None:
        """Free the request's slots and settle its reservations to ``used_tokens`` (the
        backend's count). Never raises: a store that fails here only loses this correction."""
        if grant.settled or grant.counters is None:
            grant.settled = True
            return
        grant.settled = True
        store = grant.counters
        for _, lease in grant.slots:
            self._leases.pop(lease, None)
        steps = [store.slots.release(key, lease) for key, lease in grant.slots]
        steps += [_settle_window(store, check, used_tokens, grant.admitted_at)
                  for check in grant.taken
                  if check.limit in TOKEN_LIMITS and check.item is not None]
        try:
            for outcome in await asyncio.gather(*steps, return_exceptions=True):
                if isinstance(outcome, BaseException):
                    raise outcome
        except StoreUnavailable as error:
            if store is self.primary:
                self._failed(error)
            log.warning("settling a request's limits failed (%s); its reservation stands until "
                        "its window ends", error)

    async def renew_leases(self) -> None:
        """Keep this gateway's slots of requests in flight from expiring."""
        by_store: dict[int, tuple[Counters, dict[str, str]]] = {}
        now = time.monotonic()
        for lease, (store, key, taken_at) in list(self._leases.items()):
            if now - taken_at > MAX_HOLD_SECONDS:
                del self._leases[lease]  # left to expire
                continue
            by_store.setdefault(id(store), (store, {}))[1][lease] = key
        for store, leases in by_store.values():
            try:
                await store.slots.renew(leases, LEASE_SECONDS)
            except StoreUnavailable as error:
                if store is self.primary:
                    self._failed(error)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(LEASE_SECONDS / 3)
            await self.renew_leases()


def _check_fits(scope: Scope, tokens: int, prompt_tokens: int, max_tokens: int | None) -> None:
    for limit, value in (("tokens_per_minute", scope.limits.tokens_per_minute),
                         ("daily_tokens", scope.limits.daily_tokens)):
        if value is not None and tokens > value:
            asked = "" if max_tokens is None else f" + max_tokens {max_tokens}"
            raise BadRequest(f"this request needs up to {tokens} tokens (prompt ~{prompt_tokens}"
                             f"{asked}), more than {scope.label}'s {limit} of {value} allows at "
                             "all; ask for fewer max_tokens or send a shorter prompt")


def _checks(scope: Scope, tokens: int, now: float) -> list[_Check]:
    limits, found = scope.limits, []
    if limits.concurrent_requests is not None:
        found.append(_Check(scope, "concurrent_requests", None, (scope.key, uuid.uuid4().hex),
                            limits.concurrent_requests))
    if limits.requests_per_minute is not None:
        found.append(_Check(scope, "requests_per_minute",
                            RateLimitItemPerMinute(limits.requests_per_minute),
                            ("rpm", scope.key), 1))
    if limits.tokens_per_minute is not None:
        found.append(_Check(scope, "tokens_per_minute",
                            RateLimitItemPerMinute(limits.tokens_per_minute),
                            ("tpm", scope.key), tokens))
    if limits.daily_tokens is not None:
        # The UTC date in the key: the day's window is the calendar day, not 24 hours from the
        # first request.
        found.append(_Check(scope, "daily_tokens", RateLimitItemPerDay(limits.daily_tokens),
                            ("day", scope.key, _utc_date(now)), tokens))
    return found


async def _run(store: Counters, check: _Check) -> bool:
    if check.item is None:
        key, lease = check.identifiers
        return await store.slots.acquire(key, check.cost, lease, LEASE_SECONDS)
    return await store.hit(check.item, check.identifiers, check.cost)


async def _refusal(store: Counters, check: _Check, now: float) -> RateLimited:
    scope, limit, item = check.scope, check.limit, check.item
    if item is None:
        return RateLimited(f"{scope.label} has {check.cost} request(s) in flight, its limit "
                           "(concurrent_requests); retry when one of them has ended", 1.0, limit)
    if limit == "daily_tokens":
        wait = seconds_to_utc_midnight(now)
    else:
        try:
            wait = _within(await store.reset_at(item, check.identifiers) - now, item)
        except StoreUnavailable:
            wait = float(item.get_expiry())
    if limit == "requests_per_minute":
        return RateLimited(f"{scope.label} has made {item.amount} request(s) this minute, its "
                           f"limit (requests_per_minute); retry in {_seconds(wait)}", wait, limit)
    period = "today (UTC)" if limit == "daily_tokens" else "this minute"
    return RateLimited(
        f"{scope.label} would go over its {limit} of {item.amount} {period} with this "
        f"request's {check.cost} token(s) (prompt + max_tokens, reserved until it ends); retry "
        f"in {_seconds(wait)}, or ask for fewer max_tokens", wait, limit)


async def _settle_window(store: Counters, check: _Check, used_tokens: int, admitted_at: float
                         ) -> None:
    assert check.item is not None
    delta = used_tokens - check.cost
    # Tokens used beyond the reservation count where they fall; the unused part goes back only
    # to the window it was taken from, if that window still runs.
    if delta > 0 or (delta < 0 and await _same_window(store, check, admitted_at)):
        await store.add(check.item, check.identifiers, delta)


async def _same_window(store: Counters, check: _Check, admitted_at: float) -> bool:
    """Whether the window a reservation was taken from still runs (read at settlement, off the
    request's path)."""
    assert check.item is not None
    if check.limit == "daily_tokens":
        return check.identifiers[-1] == _utc_date(time.time())
    ends = await store.reset_at(check.item, check.identifiers)
    # A window runs for its length from its first hit; Redis keeps the TTL in whole seconds.
    return ends - check.item.get_expiry() <= admitted_at + 1.0


async def _give_back(store: Counters, taken: list[_Check]) -> None:
    """Undo a partial admission (another check refused it); a failing store is left as is."""
    try:
        for check in taken:
            if check.item is None:
                await store.slots.release(*check.identifiers)
            else:
                await store.add(check.item, check.identifiers, -check.cost)
    except StoreUnavailable:
        log.warning("giving back a refused request's counts failed; they expire with their "
                    "windows")


def _utc_date(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).date().isoformat()


def _within(wait: float, item: RateLimitItem) -> float:
    # Redis keeps TTLs in whole seconds: the window's end read back can lie a fraction past it.
    return min(max(wait, 0.0), float(item.get_expiry()))


def _seconds(value: float) -> str:
    # Rounded up, as the Retry-After header is: the two say the same.
    return f"{max(1, math.ceil(value))} s"
