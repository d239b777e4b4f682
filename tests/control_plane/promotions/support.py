"""Helpers of the promotion tests."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx
from fastapi.testclient import TestClient

from tests.control_plane.deployments.support import wait_until


def promote(http: TestClient | httpx.Client, headers: dict[str, str], **body: Any
            ) -> dict[str, Any]:
    """Start a promotion and wait for its end."""
    started = http.post("/api/v1/models/m/promotions", headers=headers, json=body)
    assert started.status_code == 202, started.text
    location = started.headers["Location"]

    def ended() -> dict[str, Any] | None:
        promotion: dict[str, Any] = http.get(location, headers=headers).json()
        return promotion if promotion["state"] in ("succeeded", "failed") else None

    promotion = wait_until(ended, f"the end of {location}", timeout=900)
    timings = ", ".join(f"{s['name']} {_seconds(s)}" for s in promotion["steps"])
    print(f"promotion of {promotion['version']}: {promotion['state']}; {timings}")
    return promotion


def _seconds(step: dict[str, Any]) -> str:
    if not step.get("started_at") or not step.get("finished_at"):
        return "-"
    started, ended = (datetime.fromisoformat(step[k]) for k in ("started_at", "finished_at"))
    return f"{(ended - started).total_seconds():.1f} s"
