"""Usage use cases: count a gateway's report (once, whatever it sends again), and read a tenant's
usage grouped by model, hour or day. Each takes the caller's session; the caller commits."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from control_plane.db import utcnow
from control_plane.errors import InvalidRequest
from control_plane.usage.orm import TenantUsage, UsageReport
from control_plane.usage.schemas import (
    GroupBy,
    TenantUsageOut,
    UsageEntry,
    UsageReportIn,
    UsageReportOut,
    UsageRow,
)

MAX_RANGE = dt.timedelta(days=400)


def hour_of(moment: dt.datetime) -> dt.datetime:
    moment = moment.astimezone(dt.UTC) if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
    return moment.replace(minute=0, second=0, microsecond=0)


def record(session: Session, report: UsageReportIn) -> UsageReportOut:
    """Add the report's counts; a report whose id was counted before changes nothing."""
    if session.get(UsageReport, report.id) is not None:
        return UsageReportOut(id=report.id, counted=False, entries=len(report.entries))
    try:
        with session.begin_nested():
            session.add(UsageReport(id=report.id, gateway=report.gateway,
                                    entries=len(report.entries)))
            session.flush()
    except IntegrityError:  # the same report, delivered twice at once: the other counts it
        return UsageReportOut(id=report.id, counted=False, entries=len(report.entries))
    for entry in _merged(report.entries):
        _add(session, entry)
    return UsageReportOut(id=report.id, counted=True, entries=len(report.entries))


def _merged(entries: Iterable[UsageEntry]) -> list[UsageEntry]:
    by_key: dict[tuple[str, str, dt.datetime], UsageEntry] = {}
    for entry in entries:
        key = (entry.tenant, entry.model, hour_of(entry.hour))
        found = by_key.get(key)
        if found is None:
            by_key[key] = entry.model_copy(update={"hour": key[2]})
        else:
            by_key[key] = _sum(found, entry)
    return [by_key[key] for key in sorted(by_key)]  # one lock order for every writer


def _with_refusals(refusals: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    merged = dict(refusals)
    for reason, count in more.items():
        merged[reason] = merged.get(reason, 0) + count
    return merged


def _sum(a: UsageEntry, b: UsageEntry) -> UsageEntry:
    return a.model_copy(update={"requests": a.requests + b.requests,
                                "prompt_tokens": a.prompt_tokens + b.prompt_tokens,
                                "output_tokens": a.output_tokens + b.output_tokens,
                                "refusals": _with_refusals(a.refusals, b.refusals)})


def _find(session: Session, entry: UsageEntry) -> TenantUsage | None:
    return session.scalars(select(TenantUsage).where(
        TenantUsage.tenant == entry.tenant, TenantUsage.model == entry.model,
        TenantUsage.hour == entry.hour).with_for_update()).one_or_none()


def _add(session: Session, entry: UsageEntry) -> None:
    row = _find(session, entry)
    if row is None:
        try:
            with session.begin_nested():
                session.add(TenantUsage(tenant=entry.tenant, model=entry.model, hour=entry.hour,
                                        requests=entry.requests,
                                        prompt_tokens=entry.prompt_tokens,
                                        output_tokens=entry.output_tokens,
                                        refusals=dict(entry.refusals)))
                session.flush()
            return
        except IntegrityError:  # another report created the row meanwhile: add to it
            row = _find(session, entry)
            assert row is not None
    row.requests += entry.requests
    row.prompt_tokens += entry.prompt_tokens
    row.output_tokens += entry.output_tokens
    row.refusals = _with_refusals(row.refusals, entry.refusals)
    row.updated_at = utcnow()
    session.flush()


def tenant_usage(session: Session, tenant: str, since: dt.datetime | None,
                 until: dt.datetime | None, group_by: GroupBy) -> TenantUsageOut:
    """The tenant's usage in [since, until) (default: the last 24 hours), grouped."""
    until = hour_of(until) + dt.timedelta(hours=1) if until else \
        hour_of(utcnow()) + dt.timedelta(hours=1)
    since = hour_of(since) if since else until - dt.timedelta(hours=25)
    if since >= until:
        raise InvalidRequest(f"since ({since.isoformat()}) is not before until "
                             f"({until.isoformat()})")
    if until - since > MAX_RANGE:
        raise InvalidRequest(f"the range is over {MAX_RANGE.days} days; ask for a shorter one")
    rows = session.scalars(select(TenantUsage).where(
        TenantUsage.tenant == tenant, TenantUsage.hour >= since, TenantUsage.hour < until)
        .order_by(TenantUsage.hour, TenantUsage.model)).all()
    groups: dict[object, UsageRow] = {}
    total = UsageRow(requests=0, prompt_tokens=0, output_tokens=0, refusals={})
    for row in rows:
        hour = row.hour if row.hour.tzinfo else row.hour.replace(tzinfo=dt.UTC)
        if group_by is GroupBy.MODEL:
            key: object = row.model
            empty = UsageRow(model=row.model, requests=0, prompt_tokens=0, output_tokens=0,
                             refusals={})
        elif group_by is GroupBy.HOUR:
            key = hour
            empty = UsageRow(hour=hour, requests=0, prompt_tokens=0, output_tokens=0,
                             refusals={})
        else:
            key = hour.date().isoformat()
            empty = UsageRow(day=str(key), requests=0, prompt_tokens=0, output_tokens=0,
                             refusals={})
        for target in (groups.setdefault(key, empty), total):
            target.requests += row.requests
            target.prompt_tokens += row.prompt_tokens
            target.output_tokens += row.output_tokens
            target.refusals = _with_refusals(target.refusals, row.refusals)
    ordered = [groups[key] for key in sorted(groups, key=str)]
    return TenantUsageOut(tenant=tenant, since=since, until=until, group_by=group_by,
                          rows=ordered, totals=total)


def has_usage(session: Session, tenant: str) -> bool:
    return session.scalar(select(TenantUsage.id).where(TenantUsage.tenant == tenant)
                          .limit(1)) is not None
