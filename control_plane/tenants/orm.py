"""Tables of tenants and of their inference API keys (hashed)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Integer, String, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from control_plane.db import Base, UTCDateTime, utcnow

# Stands alone in allowed_models: every model, including ones registered later.
ALL_MODELS = "*"


class PriorityOverLimit(StrEnum):
    """What the gateway does with a request for a level more urgent than the tenant may use."""

    REFUSE = "refuse"
    LOWER = "lower"


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    # Model names (each allows the model and every alias of it, M and M.<alias>), or ["*"].
    allowed_models: Mapped[list[str]] = mapped_column(JSON)
    # The most urgent level the tenant may use (1 is the most urgent level there is).
    max_priority_level: Mapped[int] = mapped_column(Integer)
    # None: a request that names no level gets the model's default.
    default_priority_level: Mapped[int | None] = mapped_column(Integer)
    priority_over_limit: Mapped[str] = mapped_column(String(16))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    # control_plane.tenants.limits.TenantLimits as JSON (only the limits set), and per model.
    limits: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict,
                                                   server_default=text("'{}'"))
    model_limits: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict,
                                                         server_default=text("'{}'"))
    # Its share of a priority level against other tenants waiting there (the backend's fair
    # share: 2 gets twice the service of 1 while both wait).
    weight: Mapped[float] = mapped_column(Float, default=1.0, server_default=text("1.0"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # The ETag; bumped by every UPDATE (optimistic locking).
    revision: Mapped[int] = mapped_column(Integer, server_default=text("1"))

    __mapper_args__: Mapping[str, Any] = {"version_id_col": revision}


class InferenceApiKey(Base):
    """A key a tenant's clients present to the gateway. Revoked keys stay as a record (and keep
    their names), so the list shows when each one stopped working."""

    __tablename__ = "inference_api_keys"
    # Its index, led by tenant_id, also serves listing a tenant's keys.
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    # The secret's start, to recognise a key in a log or a leak report; not enough to guess it.
    prefix: Mapped[str] = mapped_column(String(12))
    # As with API tokens, only the sha256 of a 256-bit random secret is kept.
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
