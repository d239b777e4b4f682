"""Usage per tenant, model and UTC hour, counted by the gateway and reported to the control plane
(``POST /api/v1/usage``) every ``flush_s``: requests, the backend's prompt and generated token
counts, and refusals by limit. Each report has an id of its own and is sent again, unchanged,
until the control plane has it; the control plane counts an id once, so nothing is counted
twice. What a killed gateway loses is what it had not reported yet: at most ``flush_s`` of usage
(plus reports the control plane did not take, kept up to ``max_pending``)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

log = logging.getLogger("gateway.usage")
Post = Callable[[dict[str, Any]], Awaitable[None]]


class ReportRefused(Exception):
    """The control plane did not take a report (down, or the token lacks the report scope)."""


@dataclass
class _Counts:
    requests: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    refusals: dict[str, int] = field(default_factory=dict)


class UsageRecorder:
    def __init__(self, post: Post, gateway: str, flush_s: float, max_pending: int = 1000,
                 on_lost: Callable[[int], None] = lambda n: None) -> None:
        self.post = post
        self.gateway = gateway
        self.flush_s = flush_s
        self.max_pending = max_pending
        self.on_lost = on_lost
        self._current: dict[tuple[str, str, str], _Counts] = {}
        self._pending: list[dict[str, Any]] = []
        self._lock = asyncio.Lock()
        self._failing = False

    @staticmethod
    def _hour() -> str:
        now = dt.datetime.now(dt.UTC)
        return now.replace(minute=0, second=0, microsecond=0).isoformat()

    def _counts(self, tenant: str, model: str) -> _Counts:
        return self._current.setdefault((tenant, model, self._hour()), _Counts())

    def served(self, tenant: str, model: str, prompt_tokens: int, output_tokens: int) -> None:
        counts = self._counts(tenant, model)
        counts.requests += 1
        counts.prompt_tokens += prompt_tokens
        counts.output_tokens += output_tokens

    def refused(self, tenant: str, model: str, reason: str) -> None:
        counts = self._counts(tenant, model)
        counts.refusals[reason] = counts.refusals.get(reason, 0) + 1

    async def flush(self) -> None:
        """Report what was counted since the last report; reports not yet taken go first."""
        async with self._lock:
            if self._current:
                entries = [{"tenant": tenant, "model": model, "hour": hour,
                            "requests": c.requests, "prompt_tokens": c.prompt_tokens,
                            "output_tokens": c.output_tokens, "refusals": c.refusals}
                           for (tenant, model, hour), c in self._current.items()]
                self._current = {}
                self._pending.append({"id": uuid.uuid4().hex, "gateway": self.gateway,
                                      "entries": entries})
                if len(self._pending) > self.max_pending:
                    lost = self._pending.pop(0)
                    self.on_lost(len(lost["entries"]))
                    log.error("usage report %s dropped: %d reports wait for the control plane",
                              lost["id"], self.max_pending)
            while self._pending:
                report = self._pending[0]
                try:
                    await self.post(report)
                except (httpx.HTTPError, ReportRefused) as exc:
                    if not self._failing:
                        log.warning("usage not reported yet (%s); kept, sent again", exc)
                    self._failing = True
                    return
                self._pending.pop(0)
                if self._failing:
                    log.warning("usage reports reach the control plane again")
                self._failing = False

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_s)
            await self.flush()


def http_poster(client: httpx.AsyncClient, control_plane_url: str, token: str | None) -> Post:
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def post(report: dict[str, Any]) -> None:
        response = await client.post(f"{control_plane_url}/api/v1/usage", json=report,
                                     headers=headers, timeout=10.0)
        if response.status_code != 200:
            raise ReportRefused(f"the control plane answered {response.status_code}: "
                                f"{response.text[:300]}")

    return post
