"""The table of moves under way: one row per deployment whose GPU reported a fault."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Integer, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from control_plane.db import Base, UTCDateTime, utcnow
from control_plane.deployments.orm import Deployment


class GpuEvacuation(Base):
    """Deployment ``deployment`` runs on a GPU that reported ``faults``; ``replacement`` serves
    its alias on another node (once READY, the faulty one drains), or is None while no node has
    room (``detail`` says why). The row goes when the move ends; the audit log keeps it."""

    __tablename__ = "gpu_evacuations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    deployment_id: Mapped[int] = mapped_column(
        ForeignKey("deployments.id", ondelete="CASCADE"), unique=True)
    replacement_id: Mapped[int | None] = mapped_column(
        ForeignKey("deployments.id", ondelete="SET NULL"))
    faults: Mapped[str] = mapped_column(Text)
    detail: Mapped[str] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    deployment: Mapped[Deployment] = relationship(foreign_keys=[deployment_id])
    replacement: Mapped[Deployment | None] = relationship(foreign_keys=[replacement_id])
