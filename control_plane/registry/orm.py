"""Tables of the registry: a model and its numbered versions."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from control_plane.db import Base, UTCDateTime, utcnow


class VersionState(StrEnum):
    REGISTERED = "registered"
    VALIDATED = "validated"
    ARCHIVED = "archived"


class Model(Base):
    __tablename__ = "models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    labels: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Bumped by every UPDATE, which also requires the old value: the ETag, and optimistic locking.
    revision: Mapped[int] = mapped_column(Integer)
    # The number given to the newest version; registration increments it (never the ORM, so the
    # model's revision, its ETag, stays).
    last_version_number: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    __mapper_args__: Mapping[str, Any] = {"version_id_col": revision}

    versions: Mapped[list[ModelVersion]] = relationship(
        back_populates="model", cascade="all, delete-orphan", passive_deletes=True)


class ModelVersion(Base):
    __tablename__ = "model_versions"
    __table_args__ = (UniqueConstraint("model_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(String(1024))
    engine_args: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # ServingSettings with every default written out, so a later change of defaults in code never
    # changes what an already registered version serves with.
    serving: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Triton ModelConfig fields (JSON form) layered over the built config.
    triton_config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # ResourceSettings with every default written out (device, replicas, memory overrides).
    resources: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Gates (registry.gates.Gates, every default written out) a promotion runs against it.
    gates: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # What placement's memory estimate needs from the files (weights, KV size per token), read
    # at registration; {"unavailable": why} when they could not be read (a remote source).
    model_profile: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # sha256 over a local source's files; remote sources are checked when they are fetched.
    checksum: Mapped[str | None] = mapped_column(String(64))
    # A plain string column rather than a database enum: adding a state later is then a code
    # change, not a migration that rewrites a type on PostgreSQL.
    state: Mapped[str] = mapped_column(String(16), default=VersionState.REGISTERED.value)
    labels: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revision: Mapped[int] = mapped_column(Integer)

    __mapper_args__: Mapping[str, Any] = {"version_id_col": revision}

    model: Mapped[Model] = relationship(back_populates="versions")


class ModelAlias(Base):
    """A movable name (``production``, ``staging``, …) for one of a model's versions."""

    __tablename__ = "model_aliases"
    __table_args__ = (UniqueConstraint("model_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id", ondelete="CASCADE"))
    updated_by: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revision: Mapped[int] = mapped_column(Integer)

    __mapper_args__: Mapping[str, Any] = {"version_id_col": revision}

    version: Mapped[ModelVersion] = relationship()


class AliasMove(Base):
    """One move of an alias, kept forever: who pointed it where, when, and from what."""

    __tablename__ = "alias_moves"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    alias_id: Mapped[int] = mapped_column(
        ForeignKey("model_aliases.id", ondelete="CASCADE"), index=True)
    from_number: Mapped[int | None] = mapped_column(Integer)
    to_number: Mapped[int] = mapped_column(Integer)
    moved_by: Mapped[str] = mapped_column(String(64))
    moved_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
