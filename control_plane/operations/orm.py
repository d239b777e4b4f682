"""The table of operations: long-running actions with their status, outcome and error."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Text
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
    # The process running it (host, pid, a random part) and when it last said it still does: any
    # process fails a running operation whose heartbeat is older than the lease.
    claimed_by: Mapped[str | None] = mapped_column(String(128))
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # How many times a process claimed it: 1 for every operation, or something ran it twice.
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class OperationLock(Base):
    """What an unfinished operation works on ("deployment:17"): the primary key lets one
    operation at a time hold a resource, whichever process or worker started it. The row goes
    when its operation ends."""

    __tablename__ = "operation_locks"
    __table_args__ = (Index(None, "operation_id"),)

    resource: Mapped[str] = mapped_column(String(128), primary_key=True)
    operation_id: Mapped[str] = mapped_column(ForeignKey("operations.id", ondelete="CASCADE"))
