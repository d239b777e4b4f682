"""Registry use cases. Each takes the caller's session and flushes; the caller commits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from control_plane.auth import audit
from control_plane.auth.scopes import Actor
from control_plane.concurrency import check_if_match, etag
from control_plane.db import utcnow
from control_plane.errors import (
    InvalidRequest,
    InvalidStateTransition,
    ModelAlreadyExists,
    ModelInUse,
    ModelNotFound,
    PreconditionFailed,
    VersionNotFound,
)
from control_plane.placement.profile import profile_model_dir
from control_plane.registry.engine_args import check_engine_args
from control_plane.registry.orm import Model, ModelVersion, VersionState
from control_plane.registry.repository import AliasRepository, ModelRepository, VersionRepository
from control_plane.registry.resources import ResourceSettings
from control_plane.registry.schemas import (
    ModelCreate,
    ModelOut,
    ModelUpdate,
    VersionCreate,
    VersionOut,
    VersionUpdate,
)
from control_plane.registry.serving import ServingSettings
from control_plane.registry.sources import CheckedSource, check_source


class VersionConfigCheck(Protocol):
    """Builds a version's Triton config and refuses one Triton or the backend would refuse; the
    implementation (``control_plane.triton.config_builder.check``) needs Triton's protobufs."""

    def __call__(self, name: str, serving: ServingSettings, overrides: Mapping[str, Any],
                 engine_args: Mapping[str, Any], source: str) -> dict[str, Any]: ...

# The lifecycle only moves forward; archived is final.
TRANSITIONS: Mapping[VersionState, frozenset[VersionState]] = {
    VersionState.REGISTERED: frozenset({VersionState.VALIDATED, VersionState.ARCHIVED}),
    VersionState.VALIDATED: frozenset({VersionState.ARCHIVED}),
    VersionState.ARCHIVED: frozenset(),
}


def _snapshot_model(model: Model) -> dict[str, Any]:
    return ModelOut.of(model).model_dump(mode="json")


def _snapshot_version(version: ModelVersion) -> dict[str, Any]:
    return VersionOut.of(version).model_dump(mode="json")


def create_model(session: Session, actor: Actor, data: ModelCreate) -> Model:
    repository = ModelRepository(session)
    if repository.get_by_name(data.name) is not None:
        raise ModelAlreadyExists(data.name)
    model = Model(name=data.name, description=data.description, labels=data.labels)
    try:
        repository.add(model)
    except IntegrityError as exc:  # a concurrent create of the same name won the race
        raise ModelAlreadyExists(data.name) from exc
    audit.record(session, actor, "model.create", "model", model.name, after=_snapshot_model(model))
    return model


def get_model(session: Session, name: str, *, for_update: bool = False) -> Model:
    model = ModelRepository(session).get_by_name(name, for_update=for_update)
    if model is None:
        raise ModelNotFound(name)
    return model


def list_models(session: Session, labels: Mapping[str, str], limit: int, offset: int
                ) -> tuple[Sequence[Model], int]:
    return ModelRepository(session).list(labels, limit, offset)


def model_etag(model: Model) -> str:
    return etag(model.id, model.revision)


def version_etag(version: ModelVersion) -> str:
    return etag(version.id, version.revision)


def update_model(session: Session, actor: Actor, name: str, data: ModelUpdate,
                 if_match: str | None = None) -> Model:
    model = get_model(session, name, for_update=True)
    check_if_match(model_etag(model), if_match, f"model '{name}'")
    before = _snapshot_model(model)
    if data.description is not None:
        model.description = data.description
    if data.labels is not None:
        model.labels = data.labels
    model.updated_at = utcnow()
    ModelRepository(session).save(model)
    audit.record(session, actor, "model.update", "model", name, before=before,
                 after=_snapshot_model(model))
    return model


def delete_model(session: Session, actor: Actor, name: str, if_match: str | None = None
                 ) -> None:
    """Delete a model and its versions; refused while an alias points at one of them.

    Aliases are what clients are served through (``production`` is the model's Triton name), so a
    model with an alias serves, or is about to."""
    repository = ModelRepository(session)
    model = get_model(session, name, for_update=True)
    check_if_match(model_etag(model), if_match, f"model '{name}'")
    serving = AliasRepository(session).list(model.id)
    if serving:
        pointers = ", ".join(f"'{a.name}' -> {a.version.number}" for a in serving)
        raise ModelInUse(f"model '{name}' serves through alias(es) {pointers}; delete them "
                         f"(DELETE /api/v1/models/{name}/aliases/<alias>) first")
    before = _snapshot_model(model)
    repository.delete(model)
    audit.record(session, actor, "model.delete", "model", name, before=before)


@dataclass(frozen=True)
class InspectedVersion:
    """What registration learns from a version's source: its checksum and memory profile. Taken
    before the transaction (it reads every file of a local model), never inside it."""

    source: CheckedSource
    profile: dict[str, Any]


def inspect_version(model_name: str, data: VersionCreate, source_roots: Sequence[Path],
                    config_check: VersionConfigCheck,
                    engine_arg_names: Iterable[str] | None = None) -> InspectedVersion:
    """Every check of a new version that needs no database, then its source read and hashed."""
    check_engine_args(data.engine_args, engine_arg_names)
    # Cheap checks first: the source check may read (and checksum) every file of a local model.
    config_check(model_name, data.serving, data.triton_config, data.engine_args, data.source)
    check_resources(data.resources, data.engine_args)
    source = check_source(data.source, source_roots)
    return InspectedVersion(source, profile_of(source))


@dataclass(frozen=True)
class RegisteredVersion:
    """A version just stored: its answer and its ETag."""

    out: VersionOut
    etag: str

    @property
    def number(self) -> int:
        return self.out.number


def register_version(session: Session, actor: Actor, model_name: str, data: VersionCreate,
                     source_roots: Sequence[Path], config_check: VersionConfigCheck,
                     engine_arg_names: Iterable[str] | None = None,
                     inspected: InspectedVersion | None = None) -> RegisteredVersion:
    """Validate and store a new version with the model's next number. Pass ``inspected``
    (``inspect_version``, called before the transaction) so no file is read inside it."""
    if inspected is None:
        inspected = inspect_version(model_name, data, source_roots, config_check,
                                    engine_arg_names)
    source = inspected.source
    now = utcnow()
    # The row, its answer and its audit snapshot are made before the number is given: from that
    # statement to the commit, the model's row is locked and its other registrations wait.
    answer = VersionOut(model=model_name, number=0, source=source.uri,
                        engine_args=data.engine_args, serving=data.serving,
                        triton_config=data.triton_config, resources=data.resources,
                        gates=data.gates, model_profile=inspected.profile,
                        checksum=source.checksum, state=VersionState.REGISTERED,
                        labels=data.labels, created_by=actor.name, created_at=now, updated_at=now)
    snapshot = answer.model_dump(mode="json")
    # The row is the answer (its model is the row's model_id, its number the counter's): what
    # is stored and what is answered cannot drift apart. Times stay datetimes for the column.
    values = {**{key: value for key, value in snapshot.items() if key not in ("model", "number")},
              "created_at": now, "updated_at": now}

    def audit_event(number: int) -> dict[str, Any]:
        return audit.event_parameters(actor, "version.register", "version",
                                      f"{model_name}/{number}",
                                      after={**snapshot, "number": number})

    stored = VersionRepository(session).add_next(model_name, values, audit_event)
    if stored is None:
        raise ModelNotFound(model_name)
    version_id, number = stored
    # A new row's revision is 1 (the ORM's version counter starts there).
    return RegisteredVersion(answer.model_copy(update={"number": number}), etag(version_id, 1))


def check_resources(resources: ResourceSettings, engine_args: Mapping[str, Any]) -> None:
    tensor_parallel = engine_args.get("tensor_parallel_size", 1)
    if resources.replicas > 1 and isinstance(tensor_parallel, int) and tensor_parallel > 1:
        # Triton has no way to give each KIND_MODEL instance its own GPUs.
        raise InvalidRequest(f"resources.replicas {resources.replicas} with tensor_parallel_size "
                             f"{tensor_parallel}: a tensor-parallel version runs one engine per "
                             "node; deploy its alias on more nodes for more engines")


def profile_of(source: CheckedSource) -> dict[str, Any]:
    """What the memory estimate needs from a local source's files, or why it is missing."""
    if source.checksum is None:
        return {"unavailable": f"'{source.uri}' is remote: its files are not read at "
                               "registration"}
    try:
        return profile_model_dir(Path(source.uri)).to_dict()
    except ValueError as exc:
        return {"unavailable": str(exc)}


def get_version(session: Session, model_name: str, number: int) -> ModelVersion:
    model = get_model(session, model_name)
    version = VersionRepository(session).get(model.id, number)
    if version is None:
        raise VersionNotFound(model_name, number)
    return version


def list_versions(session: Session, model_name: str, limit: int, offset: int
                  ) -> tuple[list[dict[str, Any]], int]:
    """One page of the model's versions, newest first, as VersionOut fields ready to serialize
    (the hottest read: rows straight from the database, no ORM objects), and the total."""
    found = VersionRepository(session).page_of(model_name, limit, offset)
    if found is None:
        raise ModelNotFound(model_name)
    rows, total = found
    return [VersionOut.stored_fields(model_name, row) for row in rows], total


def update_version(session: Session, actor: Actor, model_name: str, number: int,
                   data: VersionUpdate, if_match: str | None = None) -> ModelVersion:
    """Change a version's state (forward only) and/or labels; everything else is immutable."""
    version = get_version(session, model_name, number)
    check_if_match(version_etag(version), if_match, f"version {number} of '{model_name}'")
    before = _snapshot_version(version)
    current = VersionState(version.state)
    if data.state is not None and data.state != current:
        if data.state not in TRANSITIONS[current]:
            allowed = ", ".join(sorted(TRANSITIONS[current])) or "none (archived is final)"
            raise InvalidStateTransition(
                f"version {number} of '{model_name}' is {current}; it cannot become "
                f"{data.state} (allowed: {allowed})")
        pointing = [a.name for a in AliasRepository(session).pointing_at(version.id)]
        if data.state == VersionState.ARCHIVED and pointing:
            raise InvalidStateTransition(
                f"version {number} of '{model_name}' is what alias(es) {pointing} point at; "
                "move them to another version before archiving it")
        if not VersionRepository(session).change_state(version, current, data.state, utcnow()):
            raise PreconditionFailed(
                f"version {number} of '{model_name}' was changed by another request meanwhile; "
                "GET it again and retry")
    if data.labels is not None:
        version.labels = data.labels
        version.updated_at = utcnow()
        VersionRepository(session).save(version)
    audit.record(session, actor, "version.update", "version", _version_target(version),
                 before=before, after=_snapshot_version(version))
    return version


def _version_target(version: ModelVersion) -> str:
    return f"{version.model.name}/{version.number}"
