"""Adapter registry use cases: register an adapter under a model version, read, delete. Each
takes the caller's session and flushes; the caller commits."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from control_plane.adapters.checks import check_fits_version, check_serves_lora
from control_plane.adapters.orm import Adapter
from control_plane.adapters.peft_config import read_adapter_config
from control_plane.adapters.repository import AdapterRepository, DeploymentAdapterRepository
from control_plane.adapters.schemas import AdapterCreate, AdapterOut
from control_plane.auth import audit
from control_plane.auth.scopes import Actor
from control_plane.concurrency import check_if_match, etag
from control_plane.errors import (
    AdapterAlreadyExists,
    AdapterInUse,
    AdapterNotFound,
    InvalidSource,
)
from control_plane.registry.orm import ModelVersion
from control_plane.registry.service import get_model, get_version
from control_plane.registry.sources import check_source


def adapter_etag(adapter: Adapter) -> str:
    return etag(adapter.id, adapter.revision)


def target_of(adapter: Adapter) -> str:
    return f"{adapter.version.model.name}/{adapter.version.number}/{adapter.name}"


def _snapshot(adapter: Adapter) -> dict[str, Any]:
    return AdapterOut.of(adapter).model_dump(mode="json")


def version_label(version: ModelVersion) -> str:
    return f"version {version.number} of '{version.model.name}'"


def register(session: Session, actor: Actor, model_name: str, number: int, data: AdapterCreate,
             source_roots: Sequence[Path]) -> Adapter:
    """Check an adapter directory against the version and store what its config says."""
    version = get_version(session, model_name, number)
    label = version_label(version)
    # Cheap checks first: the source check reads (and checksums) every file of the adapter.
    check_serves_lora(label, version.engine_args)
    if not data.source.startswith("/"):
        raise InvalidSource(f"adapter source '{data.source}' is not allowed: use the absolute "
                            "path of a local adapter directory (the control plane reads its "
                            "adapter_config.json now, the node loads it from that path)")
    source = check_source(data.source, source_roots)
    config = read_adapter_config(Path(source.uri))
    check_fits_version(config, label, version.source, version.engine_args)
    # Takes turns with other registrations and deletions of the model's adapters (PostgreSQL).
    get_model(session, model_name, for_update=True)
    repository = AdapterRepository(session)
    if repository.get(version.id, data.name) is not None:
        raise AdapterAlreadyExists(model_name, number, data.name)
    adapter = Adapter(version=version, name=data.name, source=source.uri,
                      checksum=source.checksum, rank=config.rank,
                      target_modules=config.target_modules, base_model=config.base_model,
                      gates=data.gates.model_dump(mode="json"),
                      created_by=actor.name)
    try:
        repository.add(adapter)
    except IntegrityError as exc:  # a concurrent registration of the same name won the race
        raise AdapterAlreadyExists(model_name, number, data.name) from exc
    audit.record(session, actor, "adapter.register", "adapter", target_of(adapter),
                 after=_snapshot(adapter))
    return adapter


def get_adapter(session: Session, model_name: str, number: int, name: str) -> Adapter:
    version = get_version(session, model_name, number)
    adapter = AdapterRepository(session).get(version.id, name)
    if adapter is None:
        raise AdapterNotFound(model_name, number, name)
    return adapter


def list_adapters(session: Session, model_name: str, number: int, limit: int, offset: int
                  ) -> tuple[Sequence[Adapter], int]:
    version = get_version(session, model_name, number)
    return AdapterRepository(session).list(version.id, limit, offset)


def delete(session: Session, actor: Actor, model_name: str, number: int, name: str,
           if_match: str | None = None) -> None:
    """Delete an adapter; refused while a deployment wants it."""
    get_model(session, model_name, for_update=True)
    adapter = get_adapter(session, model_name, number, name)
    target = target_of(adapter)
    check_if_match(adapter_etag(adapter), if_match, f"adapter '{target}'")
    rows = DeploymentAdapterRepository(session)
    wanting = rows.wanting(adapter.id)
    live = [row for row in wanting if row.deployment.wanted]
    if live:
        names = ", ".join(f"{row.deployment.id} ('{row.deployment.triton_name}' on "
                          f"'{row.deployment.node.name}', {row.state})" for row in live)
        raise AdapterInUse(f"adapter '{target}' is wanted on deployment(s) {names}; unload it "
                           f"(DELETE /api/v1/deployments/<id>/adapters/{name}) first")
    # Rows of removed deployments: their engines are gone, nothing to unload.
    for row in wanting:
        rows.delete(row)
    before = _snapshot(adapter)
    AdapterRepository(session).delete(adapter)
    audit.record(session, actor, "adapter.delete", "adapter", target, before=before)
