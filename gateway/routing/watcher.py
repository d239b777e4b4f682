"""Keeps the routing table current by long-polling the control plane; keeps the last table when
the control plane is away (fail static) and says so."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.routing.table import EMPTY, RoutingTable, parse_table

log = logging.getLogger("gateway.routing")
RETRY_MIN_S = 0.5
RETRY_MAX_S = 10.0
# Between two reads that found no change: a control plane that answers a long poll at once
# (an older one, or a proxy in between) must not be polled in a tight loop.
UNCHANGED_PAUSE_S = 0.5


@dataclass
class WatchStatus:
    revision: str = ""
    reachable: bool = False
    last_success: float | None = None
    error: str = ""

    def seconds_since_confirmed(self) -> float | None:
        return None if self.last_success is None else time.monotonic() - self.last_success


class RoutingWatcher:
    def __init__(self, base_url: str, token: str | None, wait_s: float,
                 on_change: Any = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # The long poll waits wait_s on the server; the read timeout leaves room for it.
        self._client = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers,
                                         timeout=httpx.Timeout(5.0, read=wait_s + 10))
        self.wait_s = wait_s
        self.table: RoutingTable = EMPTY
        self.status = WatchStatus()
        self._on_change = on_change
        self.loaded = asyncio.Event()

    async def run(self) -> None:
        delay = RETRY_MIN_S
        while True:
            try:
                changed = await self.poll_once(self.wait_s if self.status.reachable else 0)
                delay = RETRY_MIN_S
                if not changed:
                    await asyncio.sleep(UNCHANGED_PAUSE_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep serving with the last table
                if self.status.reachable or not self.status.error:
                    log.warning("routing table: control plane unreachable (%s); serving the last "
                                "table (revision %s)", exc, self.status.revision or "none")
                self.status.reachable = False
                self.status.error = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(delay)
                delay = min(RETRY_MAX_S, delay * 2)

    async def poll_once(self, wait_s: float) -> bool:
        """One read of the table; True when it brought a new revision."""
        response = await self._client.get(
            "/api/v1/routing", params={"after": self.status.revision, "wait": round(wait_s)})
        if response.status_code != 200:
            raise RuntimeError(f"GET /api/v1/routing answered {response.status_code}: "
                               f"{response.text[:300]}")
        table = parse_table(response.json())
        self.status.reachable = True
        self.status.error = ""
        self.status.last_success = time.monotonic()
        changed = table.revision != self.status.revision
        if changed:
            log.info("routing table revision %s: %d models, %d tenants", table.revision[:12],
                     len(table.routes), len(table.tenants))
            self.table = table
            self.status.revision = table.revision
            if self._on_change is not None:
                self._on_change(table)
        self.loaded.set()
        return changed

    async def close(self) -> None:
        await self._client.aclose()
