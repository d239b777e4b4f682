"""Tables of usage: counts per tenant, model and UTC hour, and the reports already counted (so a
report a gateway sends again is never counted twice)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from control_plane.db import Base, UTCDateTime, utcnow


class TenantUsage(Base):
    """One tenant's use of one model in one hour. Keyed by the tenant's name, not its row: the
    history outlives a deleted tenant."""

    __tablename__ = "tenant_usage"
    __table_args__ = (UniqueConstraint("tenant", "model", "hour"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(64))
    hour: Mapped[datetime] = mapped_column(UTCDateTime)  # the hour's start, UTC
    requests: Mapped[int] = mapped_column(BigInteger, default=0)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    # {"requests_per_minute": 3, ...}: requests refused, by the limit that refused them.
    refusals: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class UsageReport(Base):
    """A report already counted, by the id its gateway gave it."""

    __tablename__ = "usage_reports"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    gateway: Mapped[str] = mapped_column(String(128))
    entries: Mapped[int] = mapped_column(Integer)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
