"""``ReadCache``: answers to the hottest reads kept in memory, dropped whenever the database changes.

An admin API is read far more often than it is written (dashboards, CI polling a version's state,
every request's token check), and on a small machine most of a read's cost is the trip through a
worker thread and the database. So, as Kubernetes' API server keeps a watch cache, each process
keeps the latest answers and the database tells it when they may have gone stale:

- PostgreSQL only. A trigger on each cached table (migration ``d7b3e9a1c5f2``) calls
  ``pg_notify(CHANNEL)`` for every statement that changes it, from any process, replica or CLI
  (except an UPDATE of models' version counter alone, which is in no answer: migration
  ``f6b2d8e4a1c7``); PostgreSQL delivers it when that transaction commits. ``ChangeListener``
  LISTENs on a connection of its own and, on every notification, empties the parts of the cache
  made of that table.
- This process's own writes empty it at once (``watch_local_writes``): a client that wrote
  through this process reads its write back, without waiting for the notification.
- While the listener is not connected (starting, the database restarting, SQLite, which has no
  notifications) the cache is *off*: nothing is served from it or stored in it, so every read goes
  to the database as it did before there was a cache. It is emptied when it comes back on.
- A reader notes the cache's generation before it reads the database and stores what it read
  only if no change arrived meanwhile, so an answer read before a commit is never kept after it.

Invalidation is coarse within a part (a change to one version empties every cached version
read): writes are rare, and a miss costs only what every read cost before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Hashable
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

logger = logging.getLogger(__name__)

# The channel the tables' triggers notify (see the migration that created them).
CHANNEL = "llmcp_changes"
# What is cached, and the tables each answer is made of: a change to one of them empties that
# part of the cache only, so writing versions leaves every process's token checks cached.
TOKENS = "tokens"
REGISTRY = "registry"
CACHED_TABLES: dict[str, frozenset[str]] = {
    TOKENS: frozenset({"api_tokens"}),
    REGISTRY: frozenset({"models", "model_versions"}),
}
# Entries kept per part before it empties itself: bounds memory whatever keys callers use.
MAX_ENTRIES = 4096
# How long the listener waits for a notification before it checks whether it should stop.
POLL_S = 1.0
# Waits between attempts to connect again after the listener's connection failed.
RECONNECT_BACKOFF_S = (0.5, 1.0, 2.0, 5.0)


class ReadCache:
    """Values by part and key, served only while the cache is on; a change to a table empties
    the parts made of it."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._max_entries = max_entries
        self._entries: dict[str, dict[Hashable, Any]] = {part: {} for part in CACHED_TABLES}
        self._generations = dict.fromkeys(CACHED_TABLES, 0)
        self._on = False
        self._lock = threading.Lock()

    @property
    def on(self) -> bool:
        return self._on

    def generation(self, part: str) -> int | None:
        """What to pass to ``put`` for a value about to be read; None while the cache is off."""
        with self._lock:
            return self._generations[part] if self._on else None

    def get(self, part: str, key: Hashable) -> Any | None:
        # A plain dict read: atomic under the GIL, and the hot path of every cached request.
        return self._entries[part].get(key) if self._on else None

    def put(self, part: str, key: Hashable, value: Any, generation: int | None) -> None:
        """Keep ``value`` if nothing it is made of changed since ``generation`` was taken."""
        if generation is None:
            return
        with self._lock:
            if not self._on or generation != self._generations[part]:
                return
            entries = self._entries[part]
            if len(entries) >= self._max_entries:
                entries.clear()
            entries[key] = value

    def invalidate(self, tables: Collection[str] | None = None) -> None:
        """``tables`` changed (None: anything may have): forget what is made of them, and
        refuse values of those parts read before now."""
        with self._lock:
            self._invalidate(tables)

    def turn_on(self) -> None:
        with self._lock:
            self._invalidate(None)
            self._on = True

    def turn_off(self) -> None:
        with self._lock:
            self._invalidate(None)
            self._on = False

    def _invalidate(self, tables: Collection[str] | None) -> None:
        for part, made_of in CACHED_TABLES.items():
            if tables is None or not made_of.isdisjoint(tables):
                self._generations[part] += 1
                self._entries[part].clear()


def _changed_table(context: Any) -> str | None:
    """The table an INSERT, UPDATE or DELETE wrote; "" when it cannot tell; None for others."""
    if context is None or not (context.isinsert or context.isupdate or context.isdelete):
        return None
    table = getattr(getattr(context.compiled, "statement", None), "table", None)
    return getattr(table, "name", "")


def watch_local_writes(engine: Engine, cache: ReadCache) -> Callable[[], None]:
    """Empty what ``cache`` holds of the tables a transaction of ``engine`` changed when it
    commits; returns what stops it (an engine may outlive the app, as tests share one)."""

    def after_cursor_execute(connection: Connection, _cursor: Any, _statement: str,
                             _parameters: Any, context: Any, _executemany: bool) -> None:
        table = _changed_table(context)
        if table is not None:
            connection.info.setdefault("read_cache_wrote", set()).add(table)

    def after_commit(connection: Connection) -> None:
        tables = connection.info.pop("read_cache_wrote", None)
        if tables:
            # A write whose table is unknown ("") may have touched anything.
            cache.invalidate(None if "" in tables else tables)

    def after_rollback(connection: Connection) -> None:
        connection.info.pop("read_cache_wrote", None)

    listeners = (("after_cursor_execute", after_cursor_execute), ("commit", after_commit),
                 ("rollback", after_rollback))
    for name, listener in listeners:
        event.listen(engine, name, listener)

    def unwatch() -> None:
        for name, listener in listeners:
            event.remove(engine, name, listener)

    return unwatch


class ChangeListener:
    """Keeps ``cache`` on while it listens for the database's change notifications."""

    def __init__(self, database_url: str, cache: ReadCache) -> None:
        self._url = database_url
        self._cache = cache
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._engine: Engine | None = None

    @property
    def supported(self) -> bool:
        return make_url(self._url).get_backend_name() == "postgresql"

    def start(self) -> None:
        if not self.supported or self._thread is not None:
            return
        self._stop.clear()
        self._engine = create_engine(self._url, poolclass=NullPool, connect_args={
            "application_name": "llmcp-read-cache",
            "connect_timeout": 5,
            # A listener whose server vanished must notice, or the cache would stay on, stale.
            "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 1,
            "keepalives_count": 5, "tcp_user_timeout": 10_000})
        self._thread = threading.Thread(target=self._run, name="read-cache-listener",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=POLL_S + 5)
            self._thread = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
        self._cache.turn_off()

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._listen()
                failures = 0
            except Exception as exc:  # noqa: BLE001 - the listener must outlive any failure
                # Whatever went wrong, the cache is off until the listener is back.
                self._cache.turn_off()
                delay = RECONNECT_BACKOFF_S[min(failures, len(RECONNECT_BACKOFF_S) - 1)]
                failures += 1
                logger.warning("read cache off: its change listener failed (%s); connecting "
                               "again in %.1f s", exc, delay)
                self._stop.wait(delay)

    def _listen(self) -> None:
        if self._engine is None:
            return
        with self._engine.connect() as connection:
            connection = connection.execution_options(isolation_level="AUTOCOMMIT")
            connection.execute(text(f"LISTEN {CHANNEL}"))
            driver: Any = connection.connection.dbapi_connection
            # On only once listening: a change committed from here on is heard.
            self._cache.turn_on()
            try:
                while not self._stop.is_set():
                    for notification in driver.notifies(timeout=POLL_S):
                        # The payload is the table that changed (the trigger sends its name).
                        self._cache.invalidate({notification.payload} if notification.payload
                                               else None)
            finally:
                self._cache.turn_off()
