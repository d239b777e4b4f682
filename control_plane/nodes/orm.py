"""The table of Triton nodes."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from control_plane.db import Base, UTCDateTime, utcnow


class TritonNode(Base):
    __tablename__ = "triton_nodes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    http_url: Mapped[str] = mapped_column(String(512))
    grpc_url: Mapped[str] = mapped_column(String(512))
    # Triton's Prometheus page; the inference gateway reads the backend's queue gauges there.
    metrics_url: Mapped[str | None] = mapped_column(String(512))
    labels: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    # Where the repository-API key lives (env:VAR or file:/path), never the key itself: the
    # database then holds nothing that opens a node.
    api_key_ref: Mapped[str | None] = mapped_column(String(512))
    # Where the node's GPU readings come from (control_plane.gpus.sources); None: no GPUs.
    gpu_inventory: Mapped[str | None] = mapped_column(String(600))
    # GPU UUIDs an operator keeps out of placement (maintenance, a faulty card).
    excluded_gpus: Mapped[list[str]] = mapped_column(JSON, default=list)
    # Set while the node is taken out of service (its agent is leaving, or an operator cordoned
    # it): gateways route nothing to it and nothing new is placed there; cleared when it joins.
    cordoned_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revision: Mapped[int] = mapped_column(Integer)

    __mapper_args__: Mapping[str, Any] = {"version_id_col": revision}
