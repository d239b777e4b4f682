"""The table of GPU reservations: one row per (deployment, version, GPU) an engine runs on."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from control_plane.db import Base, UTCDateTime, utcnow
from control_plane.deployments.orm import Deployment


class GpuReservation(Base):
    """``bytes`` of GPU ``gpu_uuid`` on the deployment's node, booked for one engine of version
    ``version``. Kept while that version may run there; deleted once it is unloaded or replaced,
    so the sum per GPU is what placement may not exceed."""

    __tablename__ = "gpu_reservations"
    __table_args__ = (UniqueConstraint("deployment_id", "version", "gpu_uuid"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    deployment_id: Mapped[int] = mapped_column(
        ForeignKey("deployments.id", ondelete="CASCADE"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    # Denormalised from the deployment so a node's bookings are one indexed read.
    node_id: Mapped[int] = mapped_column(ForeignKey("triton_nodes.id", ondelete="CASCADE"),
                                         index=True)
    gpu_uuid: Mapped[str] = mapped_column(String(96))
    gpu_index: Mapped[int] = mapped_column(Integer)
    bytes: Mapped[int] = mapped_column(BigInteger)
    gpu_memory_utilization: Mapped[float] = mapped_column(Float)
    # The engine is loaded: its memory shows in the GPU's "used" reading.
    active: Mapped[bool] = mapped_column(Boolean, default=False)
    # After the load: how much the GPU's used memory grew, and that minus the booking. None where
    # the inventory cannot measure it (a static file) or the reading failed.
    measured_bytes: Mapped[int | None] = mapped_column(BigInteger)
    drift_bytes: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    deployment: Mapped[Deployment] = relationship()
