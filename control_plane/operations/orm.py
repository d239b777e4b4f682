"""The table of operations: long-running actions with their status, outcome and error."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from control_plane.db import Base, UTCDateTime, utcnow


class OperationStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in (OperationStatus.SUCCEEDED, OperationStatus.FAILED)


class Operation(Base):
    __tablename__ = "operations"
    __table_args__ = (
        Index(None, "status"),
        Index(None, "target_type", "target"),
        Index(None, "created_at"),
    )

    # A random id rather than a sequence: it is handed out before the work runs and is safe to
    # show to anyone who may read the operation.
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default=OperationStatus.PENDING.value)
    target_type: Mapped[str] = mapped_column(String(32))
    target: Mapped[str] = mapped_column(String(256))
    # What the caller asked for, as the work needs it (the work runs after the request is gone).
    arguments: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String(64))
    request_id: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
