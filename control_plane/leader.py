"""Leader election among control-plane replicas: a lock in the database says which one reconciles.

On PostgreSQL the leader holds a session-level advisory lock on one dedicated connection (not one
from the request pool). The server keeps the lock exactly as long as that session lives, so a
replica that dies, is cut off or has its backend terminated loses it, and a standby's next
``try_acquire`` wins. On SQLite the control plane runs as one replica: the lock is an ``flock`` on
``<database>.<name>.leader.lock``, which the OS drops when the process dies. An in-memory SQLite
database belongs to one process, so that process always leads.

Bounds with the defaults (poll every 2 s, a 5 s deadline per statement on the lock connection):

- the leader process dies or its backend is terminated: PostgreSQL frees the lock at once and a
  standby takes over at its next poll (2 s); a leader whose backend was terminated steps down at
  its own next poll (2 s);
- the network to the leader goes silent: the leader steps down within poll + deadline (7 s); the
  server drops the session ``SERVER_DROP_S`` (20 s) after it last heard from the leader (TCP
  keepalives and ``tcp_user_timeout`` on the server side, which apply over TCP, not over a Unix
  socket), so a standby takes over within 22 s. The server drops the session no sooner than 15 s
  after the leader's last successful check, after the leader stepped down; hence the ceiling on
  the poll interval;
- SQLite: a second process on the same database takes over at its next poll after the first dies.

Leadership is advisory, not fencing: a leader learns of its loss only at its next poll, and one
paused mid-step (a long GC, a stopped VM) can act once more after a successor was elected. The
reconciler's writes stay conditional (``UPDATE ... WHERE state = :expected``) so that such a late
step is refused, not applied twice.
Session advisory locks need a session: connect directly or through a session-mode pooler.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

from sqlalchemy import Connection, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

logger = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL_S = 2.0
# Every statement on the lock connection (and its connect) gets this long before the lock counts as
# lost: the server cancels a slow statement, the client cuts a socket that stopped answering.
STATEMENT_DEADLINE_S = 5
# The server ends a session it has not heard from for this long (keepalive probes unanswered).
SERVER_DROP_S = 20
# The old leader must step down before the server frees the lock for a successor: it notices
# within poll + deadline of its last successful check, the server frees the lock no sooner than
# SERVER_DROP_S - deadline after it.
MAX_POLL_INTERVAL_S = SERVER_DROP_S - 2 * STATEMENT_DEADLINE_S

_HOLDS_LOCK = text(
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
    " AND pid = pg_backend_pid() AND classid = CAST(:high AS oid)"
    " AND objid = CAST(:low AS oid) AND objsubid = 1)")


def advisory_lock_key(name: str) -> int:
    """The signed 64-bit PostgreSQL advisory lock key of the lock called ``name``."""
    digest = hashlib.blake2b(f"llmcp-{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class _Backend(Protocol):
    def acquire(self) -> bool: ...

    def still_held(self) -> bool: ...

    def release(self) -> None: ...


class LeaderLock:
    """One replica's claim on the lock called ``name`` in the database at ``url``; thread-safe."""

    def __init__(self, url: str, name: str = "reconciler") -> None:
        self.name = name
        self._backend = _backend_for(url, name)
        self._mutex = threading.Lock()
        self._held = False

    @property
    def is_leader(self) -> bool:
        """Whether the last ``try_acquire`` held the lock (no I/O; poll to refresh it)."""
        return self._held

    def try_acquire(self) -> bool:
        """Take the lock if it is free; True if this replica holds it and could confirm so.

        A holder that finds its lock gone (connection lost, backend terminated) steps down and
        returns False; it contends again on the next call, which gives a standby a fair chance.
        """
        with self._mutex:
            if self._held:
                self._held = self._backend.still_held()
                if not self._held:
                    logger.warning("lost the %r leader lock; stepping down", self.name)
                return self._held
            self._held = self._backend.acquire()
            return self._held

    def release(self) -> None:
        """Step down and free the lock for another replica (closes the lock connection)."""
        with self._mutex:
            self._backend.release()
            self._held = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()


def _backend_for(url: str, name: str) -> _Backend:
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        return _AdvisoryLock(url, name)
    if backend == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            return _SoleProcess()
        return _FileLock(Path(f"{parsed.database}.{name}.leader.lock"))
    raise ValueError(f"leader election supports PostgreSQL and SQLite, not {backend!r}; "
                     "point the database URL at one of them")


class _SoleProcess:
    """An in-memory SQLite database: no other process can see it, so this one leads."""

    def acquire(self) -> bool:
        return True

    def still_held(self) -> bool:
        return True

    def release(self) -> None:
        pass


class _FileLock:
    """An exclusive ``flock`` on a file by the SQLite database, dropped when the process dies."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None

    def acquire(self) -> bool:
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        # The holder's pid, for an operator asking which process leads.
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def still_held(self) -> bool:
        if self._fd is None:
            return False
        # Had the file been deleted or replaced, another process could lock a new file of the same
        # name while this one still locks the old one.
        held = os.fstat(self._fd)
        try:
            current = os.stat(self._path)
        except FileNotFoundError:
            current = None
        if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
            return True
        self.release()
        return False

    def release(self) -> None:
        # Closing the only descriptor drops the flock. The file stays: deleting it would open the
        # race that still_held guards against.
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class _AdvisoryLock:
    """``pg_try_advisory_lock`` held on one dedicated connection while this replica leads."""

    def __init__(self, url: str, name: str) -> None:
        self._key = advisory_lock_key(name)
        # pg_locks shows a bigint key as its high and low 32 bits, both unsigned.
        unsigned = self._key & 0xFFFF_FFFF_FFFF_FFFF
        self._key_halves = {"high": unsigned >> 32, "low": unsigned & 0xFFFF_FFFF}
        # NullPool: the connection is this object's alone and closing it really disconnects.
        # Autocommit: no transaction (and its snapshot) stays open while the leader idles.
        self._engine = create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT",
                                     connect_args=_connect_args(name))
        self._connection: Connection | None = None

    def acquire(self) -> bool:
        try:
            if self._connection is None:
                self._connection = self._engine.connect()
            acquired = self._scalar(text("SELECT pg_try_advisory_lock(:key)"), key=self._key)
        except DBAPIError as exc:
            logger.warning("could not contend for the leader lock: %s", exc.orig)
            self._discard()
            return False
        return bool(acquired)

    def still_held(self) -> bool:
        try:
            held = bool(self._scalar(_HOLDS_LOCK, **self._key_halves))
        except DBAPIError as exc:
            logger.warning("leader lock connection failed: %s", exc.orig)
            held = False
        if not held:
            # Whoever reports "not leader" must not keep the lock, or nobody would lead.
            self._discard()
        return held

    def release(self) -> None:
        if self._connection is None:
            return
        try:
            # Unlock explicitly: a closed connection frees the lock only once its backend has
            # exited, and a standby polling right now should find it free.
            # unlock_all: a standby that holds nothing gets no "you don't own a lock" warning.
            self._scalar(text("SELECT pg_advisory_unlock_all()"))
        except DBAPIError as exc:
            logger.warning("could not unlock the leader lock (closing its connection frees it): "
                           "%s", exc.orig)
        self._discard()

    def _scalar(self, statement: Any, **params: int) -> Any:
        if self._connection is None:
            raise RuntimeError("the leader lock connection is closed")
        driver_connection: Any = self._connection.connection.dbapi_connection
        with _cut_after(driver_connection.fileno(), STATEMENT_DEADLINE_S):
            return self._connection.execute(statement, params).scalar()

    def _discard(self) -> None:
        if self._connection is None:
            return
        connection, self._connection = self._connection, None
        try:
            connection.invalidate()
            connection.close()
        except DBAPIError as exc:
            logger.debug("closing a failed leader lock connection: %s", exc.orig)


def _connect_args(name: str) -> dict[str, Any]:
    # Server side: cancel slow statements; end a session whose client went silent after
    # SERVER_DROP_S (10 s idle, then a probe every 2 s, 5 unanswered; tcp_user_timeout covers
    # data the client never acknowledged, when keepalives do not run).
    server = {
        "statement_timeout": STATEMENT_DEADLINE_S * 1000,
        "tcp_keepalives_idle": 10,
        "tcp_keepalives_interval": 2,
        "tcp_keepalives_count": (SERVER_DROP_S - 10) // 2,
        "tcp_user_timeout": SERVER_DROP_S * 1000,
    }
    return {
        "application_name": f"llmcp-leader-{name}",
        "connect_timeout": STATEMENT_DEADLINE_S,
        # Client side: a standby's idle connection that died is noticed before it is needed.
        "keepalives": 1,
        "keepalives_idle": STATEMENT_DEADLINE_S,
        "keepalives_interval": 1,
        "keepalives_count": STATEMENT_DEADLINE_S,
        "tcp_user_timeout": STATEMENT_DEADLINE_S * 1000,
        "options": " ".join(f"-c {setting}={value}" for setting, value in server.items()),
    }


@contextmanager
def _cut_after(fileno: int, seconds: float) -> Iterator[None]:
    """Shut the socket down if the block has not finished within ``seconds``.

    statement_timeout cannot help when the server never gets the statement, and the kernel keeps
    waiting for a peer whose TCP stack still answers (a hung proxy or server): the driver would
    wait forever. Shutting the socket down makes its pending read fail at once.
    """
    guard = threading.Lock()
    finished = False

    def cut() -> None:
        with guard:
            # The socket is open until the block ends, so the descriptor still names it here.
            if finished:
                return
            try:
                with socket.socket(fileno=os.dup(fileno)) as sock:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError as exc:
                logger.debug("cutting the leader lock connection: %s", exc)

    timer = threading.Timer(seconds, cut)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with guard:
            finished = True
        timer.cancel()


class LeaderElection:
    """Polls a ``LeaderLock`` on a background thread and reports when this replica wins or loses it.

    The callbacks run on that thread and must return quickly (start or stop the reconciler, set a
    flag): the next poll waits for them. ``stop`` releases the lock and reports the loss.
    """

    def __init__(self, lock: LeaderLock, on_elected: Callable[[], None],
                 on_deposed: Callable[[], None],
                 poll_interval_s: float = DEFAULT_POLL_INTERVAL_S) -> None:
        if not 0 < poll_interval_s < MAX_POLL_INTERVAL_S:
            raise ValueError(f"poll_interval_s must be above 0 and below {MAX_POLL_INTERVAL_S} s "
                             f"(got {poll_interval_s}): a leader cut off from the database must "
                             "notice before the server frees the lock for another replica")
        self._lock = lock
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self._poll_interval_s = poll_interval_s
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._leading = False

    @property
    def is_leader(self) -> bool:
        return self._leading

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("this election was already started; create a new one to restart")
        self._thread = threading.Thread(target=self._run, name=f"leader-{self._lock.name}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling, release the lock and call ``on_deposed`` if this replica led."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        self._lock.release()
        self._transition(False)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                leading = self._lock.try_acquire()
            except Exception:
                # The loop never dies: a database or file system error means "not leader now".
                logger.exception("leader election poll for %r failed", self._lock.name)
                leading = False
            self._transition(leading)
            self._stopping.wait(self._poll_interval_s)

    def _transition(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        logger.info("%s the %r leader", "became" if leading else "is no longer", self._lock.name)
        callback = self._on_elected if leading else self._on_deposed
        try:
            callback()
        except Exception:
            logger.exception("leader election callback %r failed", callback)
