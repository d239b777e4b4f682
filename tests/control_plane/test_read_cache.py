"""The read cache: hot reads from memory, never stale after a change by this or another process.

"Another process" is another engine on the same database, as a second replica or the CLI would
be: its writes reach this app only through PostgreSQL's notifications.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from control_plane.auth.tokens import hash_secret
from control_plane.read_cache import CACHED_TABLES, CHANNEL, REGISTRY, TOKENS, ReadCache

VERSIONS = "/api/v1/models/m/versions"
# Far longer than a notification takes (milliseconds); a stale answer would last forever.
WITHIN_S = 5.0


def eventually(check: Callable[[], bool], within_s: float = WITHIN_S) -> float:
    """Seconds until ``check`` held; fails if it never did within ``within_s``."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > within_s:
            pytest.fail(f"still not so after {within_s} s")
        time.sleep(0.01)
    return time.monotonic() - started


@pytest.fixture
def other_process(database_url: str) -> Iterator[Engine]:
    """An engine of its own on the app's database: what another replica or the CLI writes with."""
    engine = create_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def cache(app: FastAPI, client: TestClient, backend: str) -> ReadCache:
    """The app's cache, once its listener is connected (on PostgreSQL; SQLite keeps it off)."""
    read_cache: ReadCache = app.state.read_cache
    if backend == "postgresql":
        eventually(lambda: read_cache.on)
    return read_cache


@pytest.fixture
def version(client: TestClient, writer: dict[str, str]) -> str:
    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    assert client.post(VERSIONS, headers=writer, json={"source": "hf://org/m"}).status_code == 201
    return f"{VERSIONS}/1"


def test_the_cache_is_on_only_where_the_database_notifies(backend: str, cache: ReadCache
                                                          ) -> None:
    time.sleep(0.2)
    assert cache.on is (backend == "postgresql")


def test_a_change_by_another_process_is_read_at_once(
        client: TestClient, writer: dict[str, str], version: str, cache: ReadCache,
        other_process: Engine) -> None:
    assert client.get(version, headers=writer).json()["labels"] == {}
    assert client.get(VERSIONS, headers=writer).json()["items"][0]["labels"] == {}
    with other_process.begin() as connection:
        connection.execute(text("""UPDATE model_versions SET labels = '{"team": "search"}'"""))

    def seen() -> bool:
        return (client.get(version, headers=writer).json()["labels"] == {"team": "search"}
                and client.get(VERSIONS, headers=writer).json()["items"][0]["labels"]
                == {"team": "search"})

    eventually(seen)
    # And it stays so: what was cached before the change is gone for good.
    for _ in range(20):
        assert seen()


def test_reads_are_served_from_the_cache_on_postgresql(
        backend: str, client: TestClient, writer: dict[str, str], version: str,
        cache: ReadCache) -> None:
    first = client.get(version, headers=writer)
    assert first.status_code == 200
    if backend == "sqlite":
        assert cache.get(REGISTRY, ("version", "m", 1)) is None
        return

    def held() -> bool:
        # The notifications of the fixture's own writes may still be on their way, and empty
        # the cache once more when they land.
        return (client.get(version, headers=writer).status_code == 200
                and cache.get(REGISTRY, ("version", "m", 1)) is not None)

    eventually(held)
    again = client.get(version, headers=writer)
    assert again.json() == first.json()
    assert again.headers["ETag"] == first.headers["ETag"]


def test_a_write_through_this_process_is_read_back_at_once(
        client: TestClient, writer: dict[str, str], cache: ReadCache) -> None:
    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    for number in range(1, 11):
        # Read first, so the list is cached, then write and read it back with no waiting.
        assert client.get(VERSIONS, headers=writer).json()["total"] == number - 1
        assert client.post(VERSIONS, headers=writer,
                           json={"source": f"hf://org/m{number}"}).status_code == 201
        page = client.get(VERSIONS, headers=writer).json()
        assert page["total"] == number
        assert page["items"][0]["source"] == f"hf://org/m{number}"
        moved = client.patch(f"{VERSIONS}/{number}", headers=writer, json={"state": "validated"})
        assert moved.status_code == 200, moved.text
        assert client.get(f"{VERSIONS}/{number}", headers=writer).json()["state"] == "validated"


def test_a_token_revoked_here_stops_working_at_once(
        client: TestClient, admin: dict[str, str], writer: dict[str, str],
        cache: ReadCache) -> None:
    assert client.get("/api/v1/models", headers=writer).status_code == 200
    assert client.delete("/api/v1/tokens/writer-token", headers=admin).status_code == 204
    refused = client.get("/api/v1/models", headers=writer)
    assert refused.status_code == 401
    assert refused.json()["error"] == "Unauthorized"


def test_a_token_revoked_by_another_process_stops_working(
        client: TestClient, writer: dict[str, str], cache: ReadCache,
        other_process: Engine) -> None:
    assert client.get("/api/v1/models", headers=writer).status_code == 200
    with other_process.begin() as connection:
        connection.execute(text("DELETE FROM api_tokens WHERE name = 'writer-token'"))
    eventually(lambda: client.get("/api/v1/models", headers=writer).status_code == 401)
    for _ in range(20):
        assert client.get("/api/v1/models", headers=writer).status_code == 401


def test_writing_versions_keeps_the_tokens_cached(
        backend: str, client: TestClient, writer: dict[str, str], version: str,
        cache: ReadCache) -> None:
    if backend == "sqlite":
        pytest.skip("the cache is off on SQLite")
    secret = writer["Authorization"].removeprefix("Bearer ")
    assert client.post(VERSIONS, headers=writer, json={"source": "hf://org/m2"}).status_code == 201
    # Give the version's notification time to arrive: it must empty the registry part only.
    eventually(lambda: cache.get(REGISTRY, ("version", "m", 1)) is None
               or client.get(VERSIONS, headers=writer).json()["total"] == 2)
    time.sleep(0.2)
    assert cache.get(TOKENS, ("token", hash_secret(secret))) is not None


def test_the_cache_is_off_while_its_listener_is_cut_off(
        backend: str, client: TestClient, writer: dict[str, str], version: str,
        cache: ReadCache, other_process: Engine) -> None:
    if backend == "sqlite":
        pytest.skip("the cache is off on SQLite")
    with other_process.begin() as connection:
        connection.execute(text(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'llmcp-read-cache' AND datname = current_database()"))
        # Changed while nothing listens: must be read all the same, and once it listens again.
        connection.execute(text("""UPDATE model_versions SET labels = '{"cut": "off"}'"""))
    eventually(lambda: client.get(version, headers=writer).json()["labels"] == {"cut": "off"})
    eventually(lambda: cache.on, within_s=15)
    assert client.get(version, headers=writer).json()["labels"] == {"cut": "off"}


def test_an_answer_read_before_a_change_is_not_kept() -> None:
    cache = ReadCache()
    cache.turn_on()
    generation = cache.generation(REGISTRY)
    cache.invalidate({"model_versions"})
    cache.put(REGISTRY, "key", "read before the change", generation)
    assert cache.get(REGISTRY, "key") is None


def test_a_change_empties_only_what_is_made_of_its_table() -> None:
    cache = ReadCache()
    cache.turn_on()
    cache.put(TOKENS, "t", "token", cache.generation(TOKENS))
    cache.put(REGISTRY, "v", "version", cache.generation(REGISTRY))
    cache.invalidate({"model_versions"})
    assert cache.get(TOKENS, "t") == "token"
    assert cache.get(REGISTRY, "v") is None
    cache.invalidate(None)
    assert cache.get(TOKENS, "t") is None


def test_nothing_is_served_or_kept_while_the_cache_is_off() -> None:
    cache = ReadCache()
    assert cache.generation(TOKENS) is None
    cache.put(TOKENS, "t", "token", 0)
    cache.turn_on()
    assert cache.get(TOKENS, "t") is None
    cache.put(TOKENS, "t", "token", cache.generation(TOKENS))
    cache.turn_off()
    assert cache.get(TOKENS, "t") is None


def test_the_cache_bounds_its_size() -> None:
    cache = ReadCache(max_entries=3)
    cache.turn_on()
    for key in range(10):
        cache.put(REGISTRY, key, key, cache.generation(REGISTRY))
    assert sum(cache.get(REGISTRY, key) is not None for key in range(10)) <= 3


def test_many_reads_at_once_never_wait_on_each_others_connections(
        client: TestClient, writer: dict[str, str], version: str) -> None:
    # More requests at once than the pool has connections (SQLite's 15, PostgreSQL's 40): a
    # request's session must not hold one while its token check waits for another.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=48) as pool:
        # GET /models: a session of its own (not the read cache) beside the token check.
        answers = list(pool.map(lambda _: client.get("/api/v1/models", headers=writer
                                                     ).status_code, range(96)))
    assert answers == [200] * 96


def test_every_cached_table_notifies_its_changes(backend: str, db: Engine) -> None:
    # A table added to CACHED_TABLES without a migration adding its trigger would never empty
    # the cache when another process changes it.
    if backend == "sqlite":
        pytest.skip("SQLite has no notifications")
    with db.connect() as connection:
        notifying = set(connection.execute(text(
            "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE t.tgname = 'llmcp_notify_change'")).scalars())
    assert notifying == set().union(*CACHED_TABLES.values())


def test_a_registration_notifies_once_and_a_model_change_still_notifies(
        backend: str, client: TestClient, writer: dict[str, str], version: str,
        database_url: str) -> None:
    # A registration also moves its model's version counter, which is in no answer: that
    # UPDATE must not wake every API process a second time (migration f6b2d8e4a1c7), while a
    # real change to a model must still empty the caches made of it.
    if backend == "sqlite":
        pytest.skip("SQLite has no notifications")
    url = make_url(database_url).set(drivername="postgresql").render_as_string(
        hide_password=False)
    with psycopg.connect(url, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        assert client.post(VERSIONS, headers=writer, json={"source": "hf://org/m2"}
                           ).status_code == 201
        assert client.patch("/api/v1/models/m", headers=writer, json={"labels": {"team": "a"}}
                            ).status_code == 200
        # Token checks may notify api_tokens meanwhile; only the registry's tables count here.
        payloads = [notification.payload for notification in listener.notifies(timeout=1.0)
                    if notification.payload in CACHED_TABLES[REGISTRY]]
    assert payloads == ["model_versions", "models"]
