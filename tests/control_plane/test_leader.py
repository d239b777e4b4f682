"""Leader election on real databases against real rival processes: one leads, a survivor follows."""

from __future__ import annotations

import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from control_plane.leader import (
    MAX_POLL_INTERVAL_S,
    STATEMENT_DEADLINE_S,
    LeaderElection,
    LeaderLock,
    advisory_lock_key,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
POLL_S = 0.3
# Generous for a loaded CI machine; the measured takeovers are printed (pytest -s).
TAKEOVER_BOUND_S = POLL_S + 5

postgres_only = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

# A rival replica: takes the lock, says so, then holds it until it is killed.
RIVAL = """
import sys, time
from control_plane.leader import LeaderLock
lock = LeaderLock(sys.argv[1], sys.argv[2])
if not lock.try_acquire():
    sys.exit("the rival replica could not take the lock")
print("leader", flush=True)
time.sleep(600)
"""


@pytest.fixture
def lock_name() -> str:
    # Tests share the session's database; their own lock names keep them apart.
    return f"test-{secrets.token_hex(4)}"


@contextmanager
def rival_leader(url: str, name: str) -> Iterator[subprocess.Popen[str]]:
    """A separate Python process that leads ``name`` until it is killed."""
    with subprocess.Popen([sys.executable, "-c", RIVAL, url, name], cwd=REPO_ROOT,
                          stdout=subprocess.PIPE, text=True) as rival:
        try:
            assert rival.stdout is not None
            ready, _, _ = select.select([rival.stdout], [], [], 30)
            said = rival.stdout.readline() if ready else ""
            if said.strip() != "leader":
                raise AssertionError(f"the rival did not become leader (said {said!r}, "
                                     f"exit status {rival.poll()})")
            yield rival
        finally:
            rival.kill()


def recorder(calls: list[str], event: threading.Event
             ) -> tuple[Callable[[], None], Callable[[], None]]:
    """Callbacks that log each call in ``calls``; ``event`` is set on every election."""
    def elected() -> None:
        calls.append("elected")
        event.set()

    def deposed() -> None:
        calls.append("deposed")

    return elected, deposed


def terminate_holder(engine: Engine, name: str) -> None:
    """End, from a third connection, the PostgreSQL backend that holds the lock ``name``."""
    unsigned = advisory_lock_key(name) & 0xFFFF_FFFF_FFFF_FFFF
    with engine.connect() as connection:
        terminated = connection.execute(text(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_locks"
            " WHERE locktype = 'advisory' AND granted AND objsubid = 1"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND classid = CAST(:high AS oid) AND objid = CAST(:low AS oid)"),
            {"high": unsigned >> 32, "low": unsigned & 0xFFFF_FFFF}).scalars().all()
    assert terminated == [True]


def test_one_of_two_locks_leads_and_the_other_follows_after_release(
        database_url: str, lock_name: str) -> None:
    with LeaderLock(database_url, lock_name) as first, \
            LeaderLock(database_url, lock_name) as second:
        assert first.try_acquire()
        assert not second.try_acquire()
        assert first.try_acquire(), "asking again while holding the lock keeps it"
        assert first.is_leader and not second.is_leader
        first.release()
        assert not first.is_leader
        assert second.try_acquire()
        assert not first.try_acquire()


def test_locks_with_different_names_do_not_exclude_each_other(
        database_url: str, lock_name: str) -> None:
    with LeaderLock(database_url, lock_name) as first, \
            LeaderLock(database_url, f"{lock_name}-other") as other:
        assert first.try_acquire()
        assert other.try_acquire()


def test_a_survivor_takes_over_when_the_leader_process_is_killed(
        database_url: str, lock_name: str) -> None:
    calls: list[str] = []
    elected = threading.Event()
    on_elected, on_deposed = recorder(calls, elected)
    with rival_leader(database_url, lock_name) as rival:
        election = LeaderElection(LeaderLock(database_url, lock_name), on_elected, on_deposed,
                                  poll_interval_s=POLL_S)
        with election:
            # Off the poll's beat, so that the measured takeover includes the wait for a poll.
            time.sleep(2.5 * POLL_S)
            assert not election.is_leader
            killed_at = time.monotonic()
            os.kill(rival.pid, signal.SIGKILL)
            assert elected.wait(TAKEOVER_BOUND_S), f"no takeover within {TAKEOVER_BOUND_S} s"
            print(f"takeover after kill -9: {time.monotonic() - killed_at:.3f} s")
            assert election.is_leader
    assert calls == ["elected", "deposed"], "stop() releases the lock and reports the loss"


def test_stop_frees_the_lock_for_another_replica(database_url: str, lock_name: str) -> None:
    elected = threading.Event()
    election = LeaderElection(LeaderLock(database_url, lock_name), elected.set, lambda: None,
                              poll_interval_s=POLL_S)
    with election:
        assert elected.wait(TAKEOVER_BOUND_S)
    with LeaderLock(database_url, lock_name) as successor:
        assert successor.try_acquire()


@postgres_only
def test_a_leader_whose_backend_is_terminated_steps_down_and_a_standby_takes_over(
        database_url: str, engine: Engine, lock_name: str) -> None:
    elected = threading.Event()
    with LeaderLock(database_url, lock_name) as first:
        assert first.try_acquire()
        standby = LeaderElection(LeaderLock(database_url, lock_name), elected.set, lambda: None,
                                 poll_interval_s=POLL_S)
        with standby:
            time.sleep(2.5 * POLL_S)
            assert not standby.is_leader
            terminated_at = time.monotonic()
            terminate_holder(engine, lock_name)
            assert elected.wait(TAKEOVER_BOUND_S), f"no takeover within {TAKEOVER_BOUND_S} s"
            print(f"takeover after pg_terminate_backend: "
                  f"{time.monotonic() - terminated_at:.3f} s")
            assert not first.try_acquire(), "the old leader's next poll steps it down"
            assert not first.is_leader
            assert not first.try_acquire(), "and it cannot take the lock back from the standby"


@postgres_only
def test_a_lone_leader_whose_backend_is_terminated_steps_down_then_leads_again(
        database_url: str, engine: Engine, lock_name: str) -> None:
    calls: list[str] = []
    elected = threading.Event()
    on_elected, on_deposed = recorder(calls, elected)
    election = LeaderElection(LeaderLock(database_url, lock_name), on_elected, on_deposed,
                              poll_interval_s=POLL_S)
    with election:
        assert elected.wait(TAKEOVER_BOUND_S)
        elected.clear()
        terminated_at = time.monotonic()
        terminate_holder(engine, lock_name)
        assert elected.wait(TAKEOVER_BOUND_S), "it reconnects and leads again"
        print(f"stepped down and re-elected after pg_terminate_backend: "
              f"{time.monotonic() - terminated_at:.3f} s")
    assert calls == ["elected", "deposed", "elected", "deposed"]


class SilentRelay:
    """A TCP relay to PostgreSQL that can go silent: it keeps its sockets open (so the kernel still
    acknowledges every packet) but passes nothing on, like a hung proxy or server."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._silent = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def go_silent(self) -> None:
        self._silent.set()

    def close(self) -> None:
        self._listener.close()
        for sock in self._sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                if not self._silent.is_set():
                    sink.sendall(data)
        except OSError:
            return


@postgres_only
def test_a_leader_whose_database_goes_silent_steps_down_within_the_deadline(
        database_url: str, lock_name: str) -> None:
    url = make_url(database_url)
    relay = SilentRelay((url.host or "127.0.0.1", url.port or 5432))
    try:
        relayed = url.set(host="127.0.0.1", port=relay.port).render_as_string(hide_password=False)
        with LeaderLock(relayed, lock_name) as leader:
            assert leader.try_acquire()
            relay.go_silent()
            started = time.monotonic()
            assert not leader.try_acquire()
            took = time.monotonic() - started
            print(f"stepped down after the database went silent: {took:.3f} s")
            assert STATEMENT_DEADLINE_S - 0.5 < took < STATEMENT_DEADLINE_S + 2
            assert not leader.is_leader
    finally:
        relay.close()
    # Once the relay's connections end, the server frees the lock for a successor.
    with LeaderLock(database_url, lock_name) as successor:
        deadline = time.monotonic() + 5
        while not successor.try_acquire():
            assert time.monotonic() < deadline, "the server kept the silent leader's lock"
            time.sleep(0.05)


@sqlite_only
def test_a_leader_whose_lock_file_is_deleted_steps_down(database_url: str,
                                                        lock_name: str) -> None:
    lock_file = Path(f"{make_url(database_url).database}.{lock_name}.leader.lock")
    with LeaderLock(database_url, lock_name) as first, \
            LeaderLock(database_url, lock_name) as second:
        assert first.try_acquire()
        assert lock_file.read_text() == f"{os.getpid()}\n"
        lock_file.unlink()
        assert second.try_acquire(), "a new file of the same name is free to lock"
        assert not first.try_acquire(), "so the first one must step down"
        assert not first.is_leader


def test_an_in_memory_sqlite_database_always_leads() -> None:
    with LeaderLock("sqlite://") as first, LeaderLock("sqlite:///:memory:") as second:
        assert first.try_acquire()
        assert second.try_acquire()


def test_other_databases_and_long_poll_intervals_are_refused() -> None:
    with pytest.raises(ValueError, match="PostgreSQL and SQLite, not 'mysql'"):
        LeaderLock("mysql://db.example/llmcp")
    with pytest.raises(ValueError, match="poll_interval_s must be above 0"):
        LeaderElection(LeaderLock("sqlite://"), lambda: None, lambda: None,
                       poll_interval_s=MAX_POLL_INTERVAL_S)
