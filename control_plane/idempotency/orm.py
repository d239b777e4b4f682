"""The table of idempotency keys and the response each one first produced."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from control_plane.db import Base, UTCDateTime, utcnow


class IdempotencyKey(Base):
    __tablename__ = "idempotency_keys"
    # Keys are per actor: two clients that happen to pick the same key do not see each other.
    __table_args__ = (UniqueConstraint("actor", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    actor: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(String(128))
    # sha256 of method, path and body: the same key with another request is a client bug.
    fingerprint: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int | None] = mapped_column(Integer)
    headers: Mapped[dict[str, str] | None] = mapped_column(JSON)
    body: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
