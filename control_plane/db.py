"""Database plumbing: the declarative base, engines, sessions and the one place that commits."""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, DateTime, Engine, MetaData, create_engine, event
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection
from sqlalchemy.types import TypeDecorator

# Deterministic constraint names, so migrations can name (and drop) what autogenerate created on
# every backend; PostgreSQL and SQLite would otherwise invent different names.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend (SQLite hands back naive datetimes)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: pass an aware UTC datetime")
        # SQLite stores the wall-clock time without its offset, so 12:00+05:00 would compare as
        # 12:00 UTC there while PostgreSQL compares the instant; in UTC both agree.
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


def utcnow() -> datetime:
    return datetime.now(UTC)


# A request holds a connection from authentication to commit, and FastAPI runs up to 40 sync
# endpoints and dependencies at once (its thread pool). SQLAlchemy's default, 5 kept open and 10
# more on demand, made a 16th concurrent request wait and closed each connection above 5 when it
# came back: PostgreSQL forked a new server process every ~10 requests at concurrency 16.
POOL_SIZE = 20
POOL_MAX_OVERFLOW = 20


# A pooled connection that sat unused longer than this is checked (a round trip) before it is
# handed out; one back within it is handed out as it is, like PgBouncer's server_check_delay.
# SQLAlchemy's pool_pre_ping checked every checkout: a round trip per request, ~10 % of a
# registration's throughput on PostgreSQL (bench/admin_api.py). A connection that died since its
# last use fails its first statement instead (a 503 DatabaseUnavailable, which says to retry), and
# SQLAlchemy then replaces every connection of the pool that was open at the time.
CHECK_IDLE_AFTER_S = 1.0
_CHECKED_IN_AT = "llmcp_checked_in_at"


def make_engine(url: str, *, check_idle_after_s: float = CHECK_IDLE_AFTER_S) -> Engine:
    """An engine for ``url``; SQLite gets foreign keys and a shared connection across threads."""
    if make_url(url).get_backend_name() != "sqlite":
        # LIFO: under load the same few connections go round and are not checked; the idle ones
        # stay at the bottom, and only they are checked when a burst reaches them.
        server_engine = create_engine(url, pool_size=POOL_SIZE, max_overflow=POOL_MAX_OVERFLOW,
                                      pool_use_lifo=True)
        _check_connections_idle_for(server_engine, check_idle_after_s)
        return server_engine
    # FastAPI runs sync endpoints in a thread pool, so a connection may move between threads; the
    # pool still hands it to one thread at a time.
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
    event.listen(engine, "connect", _configure_sqlite_connection)
    event.listen(engine, "begin", _begin_immediate)
    return engine


def _check_connections_idle_for(engine: Engine, idle_s: float) -> None:
    dialect = engine.dialect

    def checked_in(_: Any, record: ConnectionPoolEntry) -> None:
        record.info[_CHECKED_IN_AT] = time.monotonic()

    def checked_out(dbapi_connection: DBAPIConnection, record: ConnectionPoolEntry,
                    _: PoolProxiedConnection) -> None:
        # A new connection (or one just reconnected: its info is cleared) has nothing recorded.
        checked_in_at = record.info.get(_CHECKED_IN_AT)
        if checked_in_at is None or time.monotonic() - checked_in_at < idle_s:
            return
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as exc:
            if dialect.is_disconnect(exc, dbapi_connection, None):
                # The pool discards this one and hands out a new connection instead.
                raise DisconnectionError(f"a pooled connection was closed: {exc}") from exc
            raise

    event.listen(engine.pool, "checkin", checked_in)
    event.listen(engine.pool, "checkout", checked_out)


# An execution option promising that a transaction writes nothing (see transaction()).
READ_ONLY = "control_plane_read_only"


def _configure_sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    # The driver's own transaction handling is off so that _begin_immediate decides how one starts.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    # Write-ahead logging: readers see the last commit while a writer works instead of waiting for
    # it, and a writer's commit does not wait for readers to finish.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def _begin_immediate(connection: Connection) -> None:
    # SQLite's default deferred transactions let two writers both read, then deadlock on upgrading
    # their locks ("database is locked"). Taking the write lock at BEGIN makes the second writer
    # wait for the first, then read what it wrote, as a row lock would on PostgreSQL.
    # A read-only transaction takes no lock: queued on the write lock, 16 concurrent reads waited in
    # SQLite's busy handler (sleeps of up to 100 ms, no queue order) with a p99 of over 3 s.
    if connection.get_execution_options().get(READ_ONLY):
        connection.exec_driver_sql("BEGIN")
    else:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def ensure_sqlite_directory(url: str) -> None:
    """Create the directory of a SQLite file database (the embedded default lives under .cache)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)


def database_url(factory: sessionmaker[Session]) -> str:
    """The URL (password included) of the database a session factory opens sessions on: what a
    database lock (``leader.LeaderLock``) connects to."""
    engine: Engine = factory.kw["bind"]
    return engine.url.render_as_string(hide_password=False)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    # Objects stay readable after commit: responses are built from them once the transaction ends.
    return sessionmaker(engine, expire_on_commit=False)


class FairWriterQueue:
    """Writers of one SQLite database in this process take turns in arrival order.

    SQLite lets one writer in at a time; the others wait in its busy handler, which sleeps and
    retries with no order at all: at 16 concurrent registrations one writer waited 4 s while
    others went by. Here they queue first (a ticket each), so the write lock goes to them in
    turn. Reentrant (a thread that opens a second write transaction inside its first gets
    SQLite's own "database is locked" after the busy timeout, as before, rather than a hang), and
    bounded: after ``timeout_s`` a writer goes on to SQLite's busy handler anyway."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        self._turn = threading.Condition()
        self._next_ticket = 0
        self._serving = 0
        self._owner: int | None = None
        self._depth = 0
        # Tickets whose writers gave up waiting: skipped when their turn comes.
        self._abandoned: set[int] = set()

    @contextmanager
    def turn(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._turn:
            if self._owner == me:
                self._depth += 1
                queued = False
            else:
                ticket = self._next_ticket
                self._next_ticket += 1
                queued = self._turn.wait_for(lambda: self._serving == ticket, self.timeout_s)
                if queued:
                    self._owner, self._depth = me, 1
                else:
                    # Timed out: skip our ticket when it comes up, so those behind us go on.
                    self._abandoned.add(ticket)
        try:
            yield
        finally:
            with self._turn:
                if self._owner == me:
                    self._depth -= 1
                    if self._depth == 0:
                        self._owner = None
                        self._advance()

    def _advance(self) -> None:
        self._serving += 1
        while self._serving in self._abandoned:
            self._abandoned.discard(self._serving)
            self._serving += 1
        self._turn.notify_all()


_writer_queues: weakref.WeakKeyDictionary[Engine, FairWriterQueue] = weakref.WeakKeyDictionary()
_writer_queues_guard = threading.Lock()


def _writer_queue(factory: sessionmaker[Session]) -> FairWriterQueue | None:
    engine = factory.kw.get("bind")
    if not isinstance(engine, Engine) or engine.dialect.name != "sqlite":
        return None  # PostgreSQL queues writers on its row locks itself
    with _writer_queues_guard:
        queue = _writer_queues.get(engine)
        if queue is None:
            queue = _writer_queues[engine] = FairWriterQueue()
        return queue


_read_only_binds: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()
_read_only_binds_guard = threading.Lock()


def _read_only_bind(factory: sessionmaker[Session]) -> Engine | None:
    """The factory's SQLite engine with the READ_ONLY promise on every connection (its BEGIN reads
    it); None elsewhere, where nothing reads it."""
    engine = factory.kw.get("bind")
    if not isinstance(engine, Engine) or engine.dialect.name != "sqlite":
        return None
    with _read_only_binds_guard:
        bind = _read_only_binds.get(engine)
        if bind is None:
            bind = _read_only_binds[engine] = engine.execution_options(**{READ_ONLY: True})
        return bind


_autocommit_binds: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()
_autocommit_binds_guard = threading.Lock()


def _one_statement_bind(factory: sessionmaker[Session]) -> Engine | None:
    """The factory's PostgreSQL engine in autocommit: each statement is its own transaction,
    committed by the server as the statement ends. None elsewhere (SQLite's writers queue in
    this process, and a unit of work there may be several statements)."""
    engine = factory.kw.get("bind")
    if not isinstance(engine, Engine) or engine.dialect.name != "postgresql":
        return None
    with _autocommit_binds_guard:
        bind = _autocommit_binds.get(engine)
        if bind is None:
            bind = _autocommit_binds[engine] = engine.execution_options(
                isolation_level="AUTOCOMMIT")
        return bind


@contextmanager
def transaction(factory: sessionmaker[Session], *, read_only: bool = False,
                one_statement: bool = False) -> Iterator[Session]:
    """One unit of work: commit when the block succeeds, roll back when it raises.

    ``read_only`` promises that the block writes nothing; SQLite then runs it beside writers.
    SQLite's writers of this process queue for their turn in order (``FairWriterQueue``).

    ``one_statement`` promises that, on PostgreSQL, the block runs one statement (on SQLite it
    may run several: it stays one transaction there). PostgreSQL then runs it in autocommit, and
    the row locks it takes are released as it ends, not one client round trip later at COMMIT.
    A registration locks its model's row: with the COMMIT sent separately, the lock was held
    while the client's thread waited for its interpreter and the network, and every other
    registration of the model queued behind it (pg_stat_activity under load: 8 of 16 waiting
    on the lock, its holder idle in transaction)."""
    queue = None if read_only else _writer_queue(factory)
    with contextlib.ExitStack() as stack:
        if queue is not None:
            stack.enter_context(queue.turn())
        # The connection is taken at the first statement, not here: a request's session that held
        # one while its token check waited for another could empty the pool with enough requests
        # at once, each waiting for a connection another holds.
        bind = _read_only_bind(factory) if read_only else (
            _one_statement_bind(factory) if one_statement else None)
        with (factory() if bind is None else factory(bind=bind)) as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise
