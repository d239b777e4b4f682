"""Tables of scaling policies (one per deployed alias) and of the autoscaler's decisions."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from control_plane.db import Base, UTCDateTime, utcnow


class ScalingPolicyRow(Base):
    __tablename__ = "scaling_policies"
    __table_args__ = (UniqueConstraint("model_id", "alias"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    alias: Mapped[str] = mapped_column(String(64))
    min_engines: Mapped[int] = mapped_column(Integer)
    max_engines: Mapped[int] = mapped_column(Integer)
    metric: Mapped[str] = mapped_column(String(32))
    target: Mapped[float] = mapped_column(Float)
    scale_up_window_s: Mapped[float] = mapped_column(Float)
    scale_down_window_s: Mapped[float] = mapped_column(Float)
    cooldown_s: Mapped[float] = mapped_column(Float)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    # When the autoscaler last added or removed an engine (the cooldown counts from it).
    last_change_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_by: Mapped[str] = mapped_column(String(64))
    # The ETag; bumped by every UPDATE (optimistic locking).
    revision: Mapped[int] = mapped_column(Integer, server_default=text("1"))

    __mapper_args__: Mapping[str, Any] = {"version_id_col": revision}


class ScalingDecisionRow(Base):
    """One decision of the autoscaler on one policy, taken or not, with what it saw."""

    __tablename__ = "scaling_decisions"
    __table_args__ = (Index(None, "policy_id", "decided_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    policy_id: Mapped[int] = mapped_column(ForeignKey("scaling_policies.id", ondelete="CASCADE"))
    decided_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    action: Mapped[str] = mapped_column(String(16))
    engines: Mapped[int] = mapped_column(Integer)
    desired: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text)
    inputs: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # The deployment operation a change started (None: held, or the change could not start).
    operation_id: Mapped[str | None] = mapped_column(String(32))
    node: Mapped[str | None] = mapped_column(String(64))
    error: Mapped[str | None] = mapped_column(Text)
