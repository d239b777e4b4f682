"""Tables of LoRA adapters: each registered under one model version, and the adapters wanted on
each deployment with the state they are in there."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from control_plane.db import Base, UTCDateTime, utcnow
from control_plane.deployments.orm import Deployment
from control_plane.registry.orm import ModelVersion


class AdapterState(StrEnum):
    """An adapter's state on one deployment."""

    LOADING = "loading"
    LOADED = "loaded"
    FAILED = "failed"
    UNLOADING = "unloading"


class Adapter(Base):
    """A LoRA adapter for one version's base model; immutable once registered."""

    __tablename__ = "adapters"
    __table_args__ = (UniqueConstraint("version_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version_id: Mapped[int] = mapped_column(
        ForeignKey("model_versions.id", ondelete="CASCADE"))
    # What clients send as sampling_parameters.lora_name, and the gateway routes as M:<name>.
    name: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(1024))
    # sha256 over the directory's files, as for a version's local source.
    checksum: Mapped[str | None] = mapped_column(String(64))
    # From adapter_config.json, read at registration.
    rank: Mapped[int] = mapped_column(Integer)
    target_modules: Mapped[list[str]] = mapped_column(JSON, default=list)
    base_model: Mapped[str] = mapped_column(String(1024))
    # What a promotion of the adapter runs (registry.gates.Gates, as JSON), as a version's.
    gates: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict,
                                                  server_default=text("'{}'"))
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revision: Mapped[int] = mapped_column(Integer)

    # The ETag; bumped by any UPDATE (optimistic locking), though an adapter is never changed.
    __mapper_args__: Mapping[str, Any] = {"version_id_col": revision}

    version: Mapped[ModelVersion] = relationship()


class DeploymentAdapter(Base):
    """An adapter wanted on a deployment. The row goes once the adapter is unloaded there."""

    __tablename__ = "deployment_adapters"
    __table_args__ = (UniqueConstraint("deployment_id", "adapter_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    deployment_id: Mapped[int] = mapped_column(
        ForeignKey("deployments.id", ondelete="CASCADE"), index=True)
    # An adapter cannot be deleted while a deployment wants it.
    adapter_id: Mapped[int] = mapped_column(ForeignKey("adapters.id", ondelete="RESTRICT"),
                                            index=True)
    # A plain string column, as deployments' states are.
    state: Mapped[str] = mapped_column(String(16), default=AdapterState.LOADING.value)
    error: Mapped[str | None] = mapped_column(Text)
    # False while a promotion gates it: loaded in the engine, not yet in the routing table.
    routed: Mapped[bool] = mapped_column(Boolean, default=True, server_default=text("true"))
    updated_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    deployment: Mapped[Deployment] = relationship()
    adapter: Mapped[Adapter] = relationship()
