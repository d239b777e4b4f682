"""All SQL of the registry. Repositories flush at most; the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from pydantic_core import from_json
from sqlalchemy import Dialect, Row, Text, bindparam, cast, func, select, update
from sqlalchemy.orm import Session, joinedload
from sqlalchemy.orm.exc import StaleDataError
from sqlalchemy.types import TypeDecorator

from control_plane.errors import PreconditionFailed
from control_plane.registry.orm import AliasMove, Model, ModelAlias, ModelVersion, VersionState


@contextmanager
def _lost_race(what: str) -> Iterator[None]:
    # The UPDATE/DELETE matched no row at the revision we read: another writer got there first.
    try:
        yield
    except StaleDataError as exc:
        raise PreconditionFailed(f"{what} was changed by another request meanwhile; GET it "
                                 "again and retry") from exc


class ModelRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get_by_name(self, name: str, *, for_update: bool = False) -> Model | None:
        statement = select(Model).where(Model.name == name)
        if for_update:
            # Serializes version-number assignment per model on PostgreSQL; SQLite has a single
            # writer anyway and ignores the clause.
            statement = statement.with_for_update()
        return self.session.scalars(statement).one_or_none()

    def list(self, labels: Mapping[str, str], limit: int, offset: int
             ) -> tuple[Sequence[Model], int]:
        """One page of models carrying every given label, ordered by name, and the total count."""
        conditions = [Model.labels[key].as_string() == value for key, value in labels.items()]
        total = self.session.scalar(select(func.count()).select_from(Model).where(*conditions))
        page = self.session.scalars(
            select(Model).where(*conditions).order_by(Model.name).limit(limit).offset(offset)).all()
        return page, total or 0

    def add(self, model: Model) -> None:
        self.session.add(model)
        self.session.flush()

    def save(self, model: Model) -> None:
        with _lost_race(f"model '{model.name}'"):
            self.session.flush()

    def delete(self, model: Model) -> None:
        self.session.delete(model)
        with _lost_race(f"model '{model.name}'"):
            self.session.flush()


# A version's response names its model. The caller's Model has usually been released from the
# session's (weak) identity map by the time the response is built, so a lazy load would cost one
# more round trip per request; joined, it comes with the versions.
_WITH_MODEL = joinedload(ModelVersion.model, innerjoin=True)


class _JSONText(TypeDecorator[Any]):
    """A JSON column (NOT NULL) read as text and decoded by pydantic-core, five times faster
    than the drivers' json.loads: a page of 50 versions has 200 JSON documents to decode."""

    impl = Text
    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any]:
        # The decoder itself, not process_result_value: no Python call per value.
        return from_json


def _json_read(column: Any) -> Any:
    return cast(column, _JSONText).label(column.key)


# A version's answer in VersionOut's field order, its model's name aside, for reads that only
# serialize it.
_VERSION_FIELDS = (ModelVersion.number, ModelVersion.source, _json_read(ModelVersion.engine_args),
                   _json_read(ModelVersion.serving), _json_read(ModelVersion.triton_config),
                   _json_read(ModelVersion.resources), _json_read(ModelVersion.gates),
                   ModelVersion.model_profile,
                   ModelVersion.checksum, ModelVersion.state, _json_read(ModelVersion.labels),
                   ModelVersion.created_by, ModelVersion.created_at, ModelVersion.updated_at)

# The statements of the version list, built once: building one per request and computing its cache
# key cost as much CPU as executing it and reading 50 rows (SQLAlchemy memoizes the key per
# statement object).
_MODEL_ID = select(Model.id).where(Model.name == bindparam("model_name"))
_OF_MODEL = ModelVersion.model_id == _MODEL_ID.scalar_subquery()
_COUNT = select(func.count()).select_from(ModelVersion).where(_OF_MODEL)
_PAGE = (select(*_VERSION_FIELDS, _COUNT.scalar_subquery().label("total")).where(_OF_MODEL)
         .order_by(ModelVersion.number.desc())
         .limit(bindparam("limit")).offset(bindparam("offset")))


class VersionRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def next_number(self, model_id: int) -> int:
        highest = self.session.scalar(
            select(func.max(ModelVersion.number)).where(ModelVersion.model_id == model_id))
        return (highest or 0) + 1

    def get(self, model_id: int, number: int) -> ModelVersion | None:
        return self.session.scalars(select(ModelVersion).options(_WITH_MODEL).where(
            ModelVersion.model_id == model_id, ModelVersion.number == number)).one_or_none()

    def list(self, model_id: int, limit: int, offset: int
             ) -> tuple[Sequence[ModelVersion], int]:
        """One page of a model's versions, newest first, and the total count."""
        total = self.session.scalar(select(func.count()).select_from(ModelVersion).where(
            ModelVersion.model_id == model_id))
        page = self.session.scalars(
            select(ModelVersion).options(_WITH_MODEL).where(ModelVersion.model_id == model_id)
            .order_by(ModelVersion.number.desc()).limit(limit).offset(offset)).all()
        return page, total or 0

    def page_of(self, model_name: str, limit: int, offset: int
                ) -> tuple[Sequence[Row[Any]], int] | None:
        """One page of the named model's versions as rows of _VERSION_FIELDS (then the total),
        newest first, and the total count; None if there is no such model.

        For reads that only serialize: plain rows cost a fraction of ORM objects, and model, count
        and page come in one statement instead of three, each of which costs a round trip."""
        # Through the connection: the session's ORM execution path is for entities.
        connection = self.session.connection()
        page = connection.execute(_PAGE, {"model_name": model_name, "limit": limit,
                                          "offset": offset}).all()
        if page:
            return page, page[0].total
        # An empty page: a missing model, one without versions, or an offset past the end.
        if connection.scalar(_MODEL_ID, {"model_name": model_name}) is None:
            return None
        return page, (connection.scalar(_COUNT, {"model_name": model_name}) or 0) if offset else 0

    def add(self, version: ModelVersion) -> None:
        self.session.add(version)
        self.session.flush()

    def save(self, version: ModelVersion) -> None:
        with _lost_race(f"version {version.number}"):
            self.session.flush()

    def change_state(self, version: ModelVersion, expected: VersionState, new: VersionState,
                     at: datetime) -> bool:
        """Move ``version`` to ``new`` only if it is unchanged since it was read."""
        result = self.session.execute(
            update(ModelVersion)
            .where(ModelVersion.id == version.id, ModelVersion.state == expected.value,
                   ModelVersion.revision == version.revision)
            .values(state=new.value, updated_at=at, revision=ModelVersion.revision + 1)
            .execution_options(synchronize_session=False))
        if result.rowcount != 1:  # type: ignore[attr-defined]
            return False
        self.session.refresh(version)
        return True


class AliasRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, model_id: int, name: str) -> ModelAlias | None:
        return self.session.scalars(select(ModelAlias).where(
            ModelAlias.model_id == model_id, ModelAlias.name == name)).one_or_none()

    def list(self, model_id: int) -> Sequence[ModelAlias]:
        return self.session.scalars(select(ModelAlias).where(ModelAlias.model_id == model_id)
                                    .order_by(ModelAlias.name)).all()

    def pointing_at(self, version_id: int) -> Sequence[ModelAlias]:
        return self.session.scalars(select(ModelAlias).where(ModelAlias.version_id == version_id)
                                    .order_by(ModelAlias.name)).all()

    def delete(self, alias: ModelAlias) -> None:
        """Remove the alias; its history goes with it (the audit log keeps the deletion)."""
        self.session.delete(alias)
        with _lost_race(f"alias '{alias.name}'"):
            self.session.flush()

    def save(self, alias: ModelAlias, move: AliasMove) -> None:
        """Store the alias as it now points and the move that got it there."""
        self.session.add(alias)
        with _lost_race(f"alias '{alias.name}'"):
            self.session.flush()
        move.alias_id = alias.id
        self.session.add(move)
        self.session.flush()

    def history(self, alias_id: int, limit: int, offset: int) -> tuple[Sequence[AliasMove], int]:
        """One page of an alias's moves, newest first, and the total count."""
        total = self.session.scalar(select(func.count()).select_from(AliasMove).where(
            AliasMove.alias_id == alias_id))
        page = self.session.scalars(select(AliasMove).where(AliasMove.alias_id == alias_id)
                                    .order_by(AliasMove.id.desc()).limit(limit).offset(offset)).all()
        return page, total or 0
