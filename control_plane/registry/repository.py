"""All SQL of the registry. Repositories flush at most; the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from pydantic_core import from_json
from sqlalchemy import (
    JSON,
    Dialect,
    Row,
    Text,
    bindparam,
    cast,
    func,
    insert,
    literal,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session, joinedload
from sqlalchemy.orm.exc import StaleDataError
from sqlalchemy.sql.dml import ReturningInsert
from sqlalchemy.types import TypeDecorator

from control_plane.auth import audit
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


_MODELS = Model.metadata.tables[Model.__tablename__]
_VERSIONS = ModelVersion.metadata.tables[ModelVersion.__tablename__]
# Registration's statements (VersionRepository.add_next), built once.
_NEXT_NUMBER = (update(_MODELS).where(_MODELS.c.name == bindparam("model_name"))
                .values(last_version_number=_MODELS.c.last_version_number + 1)
                .returning(_MODELS.c.id, _MODELS.c.last_version_number))
# A new row's revision is 1, where the ORM's version counter starts. The parameters are named
# version_<column>: SQLAlchemy makes a parameter named after a column of a table a statement
# writes a value for that column, and models has labels and created_at too.
_VERSION_VALUES = {column: bindparam(f"version_{column.key}", type_=column.type)
                   for column in _VERSIONS.columns if column.key not in ("id", "revision")}
_INSERT_VERSION = (insert(_VERSIONS).values({**_VERSION_VALUES, _VERSIONS.c.revision: 1})
                   .returning(_VERSIONS.c.id))


def _register_postgresql() -> ReturningInsert[tuple[int, int]]:
    """Number, version and audit event in one statement (data-modifying WITHs)."""
    numbered = _NEXT_NUMBER.cte("numbered")
    number = numbered.c.last_version_number
    event = audit.event_insert_from(
        numbered, target=bindparam("model_name", type_=Text) + "/" + cast(number, Text),
        after=cast(func.jsonb_set(cast(bindparam("event_after", type_=JSON), JSONB),
                                  literal_column("'{number}'::text[]"), func.to_jsonb(number)),
                   JSON))
    given = {"model_id": numbered.c.id, "number": number, "revision": literal(1)}
    columns = [column for column in _VERSIONS.columns if column.key != "id"]
    values = select(*[given[column.key] if column.key in given else _VERSION_VALUES[column]
                      for column in columns]).select_from(numbered)
    # The INSERT is the statement itself: nested under another, SQLAlchemy compiled the UPDATE
    # with the models table's INSERT defaults (it set created_at).
    return (insert(_VERSIONS).from_select([column.key for column in columns], values)
            .returning(_VERSIONS.c.id, _VERSIONS.c.number).add_cte(event.cte("audit_event")))


_REGISTER_POSTGRESQL = _register_postgresql()


class VersionRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add_next(self, model_name: str, values: Mapping[str, Any],
                 audit_event: Callable[[int], Mapping[str, Any]]) -> tuple[int, int] | None:
        """Store a new version of the named model under its next number, together with the
        audit event whose parameters ``audit_event(number)`` gives (audit.EVENT_INSERT's);
        (the version's id, its number), or None if there is no such model.

        The number comes from the model's counter, whose UPDATE locks the model's row until
        commit: concurrent registrations of one model wait for each other from there. So the
        caller computes everything before, and the counter is the last thing written: on
        PostgreSQL counter, version and event are one statement (data-modifying WITHs), then
        the commit; on SQLite, three statements with nothing between them."""
        # Core on the connection, not the ORM: no unit of work, and the statements are built
        # once (see audit.EVENT_INSERT).
        connection = self.session.connection()
        parameters = {f"version_{key}": value for key, value in values.items()}
        if connection.dialect.name == "postgresql":
            # One statement: the lock is held from it to the commit, one round trip later.
            # The event's snapshot gets its number there (audit_event(0) stands in for it).
            stored = connection.execute(_REGISTER_POSTGRESQL, {
                **parameters, "model_name": model_name, **audit_event(0)}).one_or_none()
            return None if stored is None else (stored.id, stored.number)
        # SQLite has no INSERT or UPDATE in WITH; it has one writer at a time anyway.
        numbered = connection.execute(_NEXT_NUMBER, {"model_name": model_name}).one_or_none()
        if numbered is None:
            return None
        model_id, number = numbered
        version_id: int = connection.execute(_INSERT_VERSION, {
            **parameters, "version_model_id": model_id, "version_number": number}).scalar_one()
        connection.execute(audit.EVENT_INSERT, audit_event(number))
        return version_id, number

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
