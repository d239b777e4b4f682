"""The unit of work commits on success and leaves nothing behind on error; a one-statement unit
releases its locks as it ends on PostgreSQL; pooled connections are checked after idling."""

from __future__ import annotations

import time
from datetime import UTC

import pytest
from sqlalchemy import Engine, select, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import make_engine, transaction
from control_plane.registry.orm import Model


def test_transaction_commits_on_success(session_factory: sessionmaker[Session]) -> None:
    with transaction(session_factory) as session:
        session.add(Model(name="kept"))
    with session_factory() as session:
        model = session.scalars(select(Model)).one()
    assert model.name == "kept"
    assert model.created_at.tzinfo is not None
    assert model.created_at.utcoffset() == UTC.utcoffset(None)


def test_transaction_rolls_back_everything_on_error(
        session_factory: sessionmaker[Session]) -> None:
    with pytest.raises(RuntimeError, match="boom"), transaction(session_factory) as session:
        session.add(Model(name="first"))
        session.flush()
        session.add(Model(name="second"))
        session.flush()
        raise RuntimeError("boom")
    with session_factory() as session:
        assert session.scalars(select(Model)).all() == []


postgres_only = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def _bump(session: Session, name: str) -> None:
    session.execute(update(Model).where(Model.name == name)
                    .values(last_version_number=Model.last_version_number + 1))


def _bump_elsewhere(engine: Engine, name: str) -> int:
    """The same update from another connection, which gives up after 1 s waiting for a lock."""
    with engine.begin() as connection:
        connection.execute(text("SET LOCAL lock_timeout = '1s'"))
        return connection.execute(
            update(Model).where(Model.name == name)
            .values(last_version_number=Model.last_version_number + 1)
            .returning(Model.last_version_number)).scalar_one()


@postgres_only
def test_one_statement_releases_its_row_locks_as_it_ends(
        session_factory: sessionmaker[Session], db: Engine) -> None:
    with transaction(session_factory) as session:
        session.add(Model(name="counted"))
    with transaction(session_factory, one_statement=True) as session:
        _bump(session, "counted")
        # Still inside the block: the row is neither locked nor uncommitted.
        assert _bump_elsewhere(db, "counted") == 2
    # Without the promise the lock is held to the commit (what the test above relies on).
    with pytest.raises(OperationalError, match="lock timeout"), \
            transaction(session_factory) as session:
        _bump(session, "counted")
        _bump_elsewhere(db, "counted")


@sqlite_only
def test_one_statement_is_still_one_transaction_on_sqlite(
        session_factory: sessionmaker[Session]) -> None:
    # SQLite's registration writes three statements under the same promise.
    with pytest.raises(RuntimeError, match="boom"), \
            transaction(session_factory, one_statement=True) as session:
        session.add(Model(name="first"))
        session.flush()
        session.add(Model(name="second"))
        session.flush()
        raise RuntimeError("boom")
    with session_factory() as session:
        assert session.scalars(select(Model)).all() == []


def _backend_pid(engine: Engine) -> int:
    with engine.connect() as connection:
        pid: int = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
        return pid


def _terminate(engine: Engine, pid: int) -> None:
    with engine.connect() as connection:
        assert connection.execute(text("SELECT pg_terminate_backend(:pid, 5000)"),
                                  {"pid": pid}).scalar_one()


@postgres_only
def test_a_pooled_connection_idle_past_the_check_is_replaced_when_it_was_closed(
        database_url: str, db: Engine) -> None:
    engine = make_engine(database_url, check_idle_after_s=0.2)
    try:
        first = _backend_pid(engine)
        _terminate(db, first)  # as a server restart or an idle timeout would
        time.sleep(0.3)
        # The check finds it closed; the pool hands out a new connection, and nothing fails.
        assert _backend_pid(engine) != first
    finally:
        engine.dispose()


@postgres_only
def test_a_connection_closed_since_its_last_use_fails_once_then_the_pool_is_renewed(
        database_url: str, db: Engine) -> None:
    # The price of checking only idle connections: used within the check's delay, a connection
    # the server closed fails its first statement (the API answers 503 DatabaseUnavailable).
    engine = make_engine(database_url, check_idle_after_s=60)
    try:
        first = _backend_pid(engine)
        _terminate(db, first)
        with pytest.raises(OperationalError):
            _backend_pid(engine)
        assert _backend_pid(engine) != first
    finally:
        engine.dispose()
