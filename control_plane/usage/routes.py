"""REST endpoints of usage: gateways report (``report`` scope), readers read."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query

from control_plane.auth.dependencies import Reader, Reporter
from control_plane.dependencies import DbSession
from control_plane.error_handlers import error_responses
from control_plane.errors import TenantNotFound
from control_plane.tenants import service as tenants
from control_plane.usage import service
from control_plane.usage.schemas import GroupBy, TenantUsageOut, UsageReportIn, UsageReportOut

router = APIRouter(tags=["usage"], responses=error_responses(401, 403, 422, 503))


@router.post("/usage")
def report_usage(body: UsageReportIn, session: DbSession, _: Reporter) -> UsageReportOut:
    """A gateway's counts since its last report. Sending a report again (same id) is safe: it
    is counted once."""
    return service.record(session, body)


@router.get("/tenants/{name}/usage", responses=error_responses(404))
def tenant_usage(name: Annotated[str, Path(max_length=64)], session: DbSession, _: Reader,
                 since: Annotated[datetime | None, Query(
                     description="from this UTC hour (default: 24 hours ago)")] = None,
                 until: Annotated[datetime | None, Query(
                     description="up to and including this UTC hour (default: now)")] = None,
                 group_by: GroupBy = GroupBy.MODEL) -> TenantUsageOut:
    """Requests, prompt and generated tokens, and refusals by limit, grouped by model, hour or
    UTC day. A deleted tenant's usage stays readable by its name."""
    try:
        tenants.get_tenant(session, name)
    except TenantNotFound:
        if not service.has_usage(session, name):
            raise
    return service.tenant_usage(session, name, since, until, group_by)
