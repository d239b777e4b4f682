"""Real databases for the control-plane tests: every DB test runs on SQLite and on PostgreSQL.

PostgreSQL is the one on 127.0.0.1:5432 (trust auth) unless LLMCP_TEST_POSTGRES_URL names another
server; each test session creates its own database and drops it at the end. If PostgreSQL cannot be
reached the run fails; LLMCP_TEST_SKIP_POSTGRES=1 turns that into visible skips.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, delete, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from control_plane import migrate
from control_plane.app import create_app
from control_plane.auth import tokens
from control_plane.auth.scopes import Actor, Scope
from control_plane.db import make_engine, make_session_factory, transaction
from control_plane.metadata import target_metadata
from control_plane.settings import Settings

POSTGRES_SERVER_URL = os.environ.get(
    "LLMCP_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
SKIP_POSTGRES = os.environ.get("LLMCP_TEST_SKIP_POSTGRES") == "1"
BACKENDS = ["sqlite", "postgresql"]
TEST_ACTOR = Actor(name="test-setup", scope=Scope.ADMIN)


def _postgres_server() -> Engine:
    server = create_engine(POSTGRES_SERVER_URL, isolation_level="AUTOCOMMIT")
    try:
        with server.connect():
            pass
    except OperationalError as exc:
        server.dispose()
        reason = f"PostgreSQL at {POSTGRES_SERVER_URL} is unreachable ({exc.orig})"
        if SKIP_POSTGRES:
            pytest.skip(f"{reason}; skipped because LLMCP_TEST_SKIP_POSTGRES=1")
        pytest.fail(f"{reason}; start it, point LLMCP_TEST_POSTGRES_URL at one, or set "
                    "LLMCP_TEST_SKIP_POSTGRES=1 to skip the PostgreSQL half explicitly")
    return server


@contextmanager
def fresh_database(backend: str, directory: Path) -> Iterator[str]:
    """The URL of a new, empty database on ``backend``, removed afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{directory / 'control_plane.db'}"
        return
    server = _postgres_server()
    name = f"llmcp_test_{secrets.token_hex(6)}"
    with server.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(POSTGRES_SERVER_URL).set(database=name).render_as_string(
            hide_password=False)
    finally:
        with server.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        server.dispose()


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture(scope="session")
def database_url(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One migrated database per backend for the whole session; tests empty it after use."""
    with fresh_database(backend, tmp_path_factory.mktemp(backend)) as url:
        migrate.upgrade(url)
        yield url


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def db(engine: Engine) -> Iterator[Engine]:
    """The session database, emptied after the test (the schema stays)."""
    yield engine
    with engine.begin() as connection:
        for table in reversed(target_metadata.sorted_tables):
            connection.execute(delete(table))


@pytest.fixture
def session_factory(db: Engine) -> sessionmaker[Session]:
    return make_session_factory(db)


@pytest.fixture(scope="session")
def source_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sources")


@pytest.fixture
def settings(database_url: str, source_root: Path) -> Settings:
    return Settings(database_url=database_url, source_roots=[source_root],
                    _env_file=None)  # type: ignore[call-arg]


@pytest.fixture
def app(settings: Settings, db: Engine) -> FastAPI:
    return create_app(settings, engine=db)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield test_client


def issue_token(factory: sessionmaker[Session], name: str, scope: Scope) -> dict[str, str]:
    """Create a token through the service and return the headers that present it."""
    with transaction(factory) as session:
        issued = tokens.create_token(session, TEST_ACTOR, name, scope)
    return {"Authorization": f"Bearer {issued.secret}"}


@pytest.fixture
def admin(session_factory: sessionmaker[Session]) -> dict[str, str]:
    return issue_token(session_factory, "admin-token", Scope.ADMIN)


@pytest.fixture
def writer(session_factory: sessionmaker[Session]) -> dict[str, str]:
    return issue_token(session_factory, "writer-token", Scope.WRITE)


@pytest.fixture
def reader(session_factory: sessionmaker[Session]) -> dict[str, str]:
    return issue_token(session_factory, "reader-token", Scope.READ)


@pytest.fixture
def live_url(app: FastAPI) -> Iterator[str]:
    """The app served by uvicorn on a free loopback port, so requests truly run in parallel."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start within 10 s")
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def parallel(requests: list[tuple[str, str, dict[str, str], dict[str, object]]]
             ) -> list[httpx.Response]:
    """Send ``(method, url, headers, json)`` requests at once, one thread and client each."""
    barrier = threading.Barrier(len(requests))

    def send(request: tuple[str, str, dict[str, str], dict[str, object]]) -> httpx.Response:
        method, url, headers, body = request
        with httpx.Client(timeout=60) as http:
            barrier.wait()
            return http.request(method, url, headers=headers, json=body)

    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(send, requests))
