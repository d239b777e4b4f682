"""The table of promotions: one row per request to bring a version to an alias, with its steps
and gate results as they happened."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from control_plane.db import Base, UTCDateTime, utcnow
from control_plane.registry.orm import Model


class PromotionState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in (PromotionState.SUCCEEDED, PromotionState.FAILED)


UNFINISHED = (PromotionState.PENDING.value, PromotionState.RUNNING.value)
# One unfinished promotion per model, enforced by the database itself (a partial unique index on
# both PostgreSQL and SQLite), so two requests racing each other cannot both start one.
_ONE_UNFINISHED = text("state IN ('pending', 'running')")


class Promotion(Base):
    __tablename__ = "promotions"
    __table_args__ = (
        Index("uq_promotions_one_unfinished_per_model", "model_id", unique=True,
              postgresql_where=_ONE_UNFINISHED, sqlite_where=_ONE_UNFINISHED),
        Index(None, "model_id", "created_at"),
        Index(None, "state"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    alias: Mapped[str] = mapped_column(String(64))
    # Known once the register step ran (a promotion from a manifest creates the version).
    version: Mapped[int | None] = mapped_column(Integer)
    # What the alias pointed at when the promotion started: what it goes back to on failure.
    from_version: Mapped[int | None] = mapped_column(Integer)
    # A promotion of one of the alias's version's LoRA adapters (then version == from_version);
    # None: of a version.
    adapter: Mapped[str | None] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16), default=PromotionState.PENDING.value)
    # [{"name", "state", "started_at", "finished_at", "detail"}], in order.
    steps: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    gate_results: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    failed_step: Mapped[str | None] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(Text)
    # The manifest as submitted (None for a promotion of an existing version).
    manifest: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Nodes to serve an alias on that is not deployed anywhere yet.
    nodes: Mapped[list[str]] = mapped_column(JSON, default=list)
    # Where the promotion's own work stands, for a restart to pick it up: the candidate alias,
    # its deployments, the swap operation.
    progress: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    ci_run_url: Mapped[str | None] = mapped_column(String(2048))
    git_sha: Mapped[str | None] = mapped_column(String(64))
    requested_by: Mapped[str] = mapped_column(String(64))
    request_id: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    model: Mapped[Model] = relationship()
