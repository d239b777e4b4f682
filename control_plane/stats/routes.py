"""REST endpoint of serving statistics (readers)."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from control_plane.auth.dependencies import Reader
from control_plane.dependencies import DbSession
from control_plane.error_handlers import error_responses
from control_plane.errors import InvalidRequest
from control_plane.stats import service
from control_plane.stats.poller import NodeMetricsPoller
from control_plane.stats.schemas import ModelStatsOut

router = APIRouter(tags=["stats"], responses=error_responses(401, 403, 422, 503))

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$")
_UNIT_SECONDS = {None: 1, "s": 1, "m": 60, "h": 3600}


def window_seconds(given: str, keep_s: float) -> float:
    """``300``, ``300s``, ``5m`` or ``1h``, up to how long readings are kept."""
    match = _DURATION.match(given)
    if match is None:
        raise InvalidRequest(f"window '{given}' is not a duration; give seconds (300) or a "
                             "number with s, m or h (5m, 1h)")
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if not 0 < seconds <= keep_s:
        raise InvalidRequest(f"window '{given}' is outside 0 < window <= {keep_s:g} s (readings "
                             "are kept that long: LLMCP_STATS_KEEP_SECONDS)")
    return seconds


@router.get("/models/{name}/stats", responses=error_responses(404))
def model_stats(name: Annotated[str, Path(max_length=64)], request: Request, session: DbSession,
                _: Reader,
                alias: Annotated[str | None, Query(
                    max_length=64, description="only this alias's deployments")] = None,
                window: Annotated[str, Query(
                    max_length=16, description="300, 300s, 5m or 1h")] = "5m") -> ModelStatsOut:
    """Request rate, errors, tokens per second, queue time, TTFT and inter-token latency (p50,
    p95) over the window, per deployment, per version and in total; and what waits and runs
    now, by priority level. From the nodes' metrics, read every LLMCP_STATS_POLL_INTERVAL_SECONDS."""
    poller: NodeMetricsPoller = request.app.state.stats_poller
    seconds = window_seconds(window, poller.keep_s)
    return ModelStatsOut.of(service.model_stats(session, poller, name, alias, seconds))
