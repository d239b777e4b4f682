"""Tables of deployments (desired and observed state per model alias and node) and of what the
control plane last saw of each node."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from control_plane.db import Base, UTCDateTime, utcnow
from control_plane.nodes.orm import TritonNode
from control_plane.registry.orm import Model


class DeploymentState(StrEnum):
    PENDING = "PENDING"
    LOADING = "LOADING"
    READY = "READY"
    FAILED = "FAILED"
    DRAINING = "DRAINING"
    UNLOADED = "UNLOADED"
    # The node did not answer: what runs there is not known, so it is not reported as READY.
    UNKNOWN = "UNKNOWN"


class Deployment(Base):
    """Model ``model``'s alias ``alias`` served on ``node`` as Triton model ``triton_name``.

    The version it should serve is always the alias's current version; ``serving_version`` is the
    one last seen ready there.
    """

    __tablename__ = "deployments"
    __table_args__ = (UniqueConstraint("model_id", "alias", "node_id"),
                      UniqueConstraint("node_id", "triton_name"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="RESTRICT"))
    alias: Mapped[str] = mapped_column(String(64))
    # A node with deployments cannot be removed: its models would run on unmanaged.
    node_id: Mapped[int] = mapped_column(ForeignKey("triton_nodes.id", ondelete="RESTRICT"))
    triton_name: Mapped[str] = mapped_column(String(160))
    # False once a DELETE asked for it to go; the row stays (UNLOADED) as a record.
    wanted: Mapped[bool] = mapped_column(Boolean, default=True)
    state: Mapped[str] = mapped_column(String(16), default=DeploymentState.PENDING.value)
    serving_version: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    updated_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    model: Mapped[Model] = relationship()
    node: Mapped[TritonNode] = relationship()


class NodeHealth(StrEnum):
    UP = "up"
    DOWN = "down"


class NodeStatus(Base):
    """What the reconciler last saw of a node; kept apart from the node so that observations do
    not change the node's ETag."""

    __tablename__ = "node_status"

    node_id: Mapped[int] = mapped_column(ForeignKey("triton_nodes.id", ondelete="CASCADE"),
                                         primary_key=True)
    health: Mapped[str] = mapped_column(String(8))
    detail: Mapped[str] = mapped_column(Text, default="")
    observed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Triton's own version (ServerMetadata), last read while the node answered; kept while it is
    # down, so an old node stays flagged.
    server_version: Mapped[str | None] = mapped_column(String(64))
    # The reconciler's last pass on the node: its plan, what it skipped and why, its errors.
    last_pass: Mapped[dict[str, Any] | None] = mapped_column(JSON)
