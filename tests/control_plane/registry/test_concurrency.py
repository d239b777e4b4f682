"""ETags and If-Match, and real parallel requests against a running server, on both databases."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from control_plane.registration_threads import RegistrationThreads
from tests.control_plane.conftest import parallel

MODEL = "/api/v1/models/m"
PARALLEL = 8


@pytest.fixture
def model(client: TestClient, writer: dict[str, str]) -> str:
    response = client.post("/api/v1/models", headers=writer, json={"name": "m"})
    assert response.status_code == 201
    return response.headers["ETag"]


def test_etag_changes_with_every_write_and_a_stale_one_gets_412(
        client: TestClient, writer: dict[str, str], admin: dict[str, str], model: str) -> None:
    assert client.get(MODEL, headers=writer).headers["ETag"] == model
    first = client.patch(MODEL, headers={**writer, "If-Match": model}, json={"description": "a"})
    assert first.status_code == 200
    fresh = first.headers["ETag"]
    assert fresh != model

    stale = client.patch(MODEL, headers={**writer, "If-Match": model}, json={"description": "b"})
    assert stale.status_code == 412
    assert stale.json()["error"] == "PreconditionFailed"
    assert f"its ETag is now {fresh}" in stale.json()["detail"]
    assert client.get(MODEL, headers=writer).json()["description"] == "a"
    assert client.delete(MODEL, headers={**writer, "If-Match": model}).status_code == 412

    assert client.patch(MODEL, headers={**writer, "If-Match": "*"},
                        json={"description": "c"}).status_code == 200
    assert client.patch(MODEL, headers=writer, json={"description": "d"}).status_code == 200
    current = client.get(MODEL, headers=writer).headers["ETag"]
    assert client.delete(MODEL, headers={**writer, "If-Match": f'"0.0", {current}'}
                         ).status_code == 204
    updates = client.get("/api/v1/audit", headers=admin,
                         params={"action": "model.update"}).json()["total"]
    assert updates == 3


def test_version_etag_guards_state_changes(client: TestClient, writer: dict[str, str],
                                           model: str) -> None:
    created = client.post(f"{MODEL}/versions", headers=writer, json={"source": "hf://org/m"})
    tag = created.headers["ETag"]
    validated = client.patch(f"{MODEL}/versions/1", headers={**writer, "If-Match": tag},
                             json={"state": "validated"})
    assert validated.status_code == 200
    stale = client.patch(f"{MODEL}/versions/1", headers={**writer, "If-Match": tag},
                         json={"state": "archived"})
    assert stale.status_code == 412
    assert client.get(f"{MODEL}/versions/1", headers=writer).json()["state"] == "validated"


def test_parallel_writes_with_the_same_etag_have_exactly_one_winner(
        live_url: str, writer: dict[str, str], admin: dict[str, str], model: str) -> None:
    headers = {**writer, "If-Match": model}
    responses = parallel([("PATCH", f"{live_url}{MODEL}", headers, {"description": f"w{i}"})
                           for i in range(PARALLEL)])
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [412] * (PARALLEL - 1)
    winner = next(r for r in responses if r.status_code == 200).json()["description"]
    with httpx.Client(base_url=live_url) as http:
        assert http.get(MODEL, headers=writer).json()["description"] == winner
        events = http.get("/api/v1/audit", headers=admin, params={"action": "model.update"})
    assert events.json()["total"] == 1


def test_parallel_registrations_get_distinct_consecutive_numbers(
        live_url: str, writer: dict[str, str], admin: dict[str, str], model: str) -> None:
    with httpx.Client(base_url=live_url) as http:
        before = http.get(MODEL, headers=writer).json()
    responses = parallel([("POST", f"{live_url}{MODEL}/versions", writer,
                            {"source": "hf://org/m"}) for _ in range(PARALLEL)])
    assert [r.status_code for r in responses] == [201] * PARALLEL
    assert sorted(r.json()["number"] for r in responses) == list(range(1, PARALLEL + 1))
    with httpx.Client(base_url=live_url) as http:
        # Each answer is the version as stored, under the ETag a read of it gives.
        for response in responses:
            stored = http.get(f"{MODEL}/versions/{response.json()['number']}", headers=writer)
            assert stored.json() == response.json()
            assert stored.headers["ETag"] == response.headers["ETag"]
        # One audit event per version, naming its number and holding what was answered.
        events = http.get("/api/v1/audit", headers=admin,
                          params={"action": "version.register", "limit": 50}).json()
        assert events["total"] == PARALLEL
        by_target = {event["target"]: event["after"] for event in events["items"]}
        assert by_target == {f"m/{r.json()['number']}": r.json() for r in responses}
        # Numbering does not change the model: neither its fields nor its ETag.
        after = http.get(MODEL, headers=writer)
        assert after.json() == before
        assert after.headers["ETag"] == model
        # A dry run gives the next number and keeps nothing; the next registration gets it too.
        preview = http.post(f"{MODEL}/versions", headers=writer, params={"dry_run": "true"},
                            json={"source": "hf://org/m"})
        assert preview.status_code == 200
        assert preview.json()["number"] == PARALLEL + 1
        created = http.post(f"{MODEL}/versions", headers=writer, json={"source": "hf://org/m"})
        assert created.json()["number"] == PARALLEL + 1


def test_registrations_on_one_thread_beside_other_writers_all_finish(
        app: FastAPI, live_url: str, writer: dict[str, str], model: str) -> None:
    # Registrations take turns on the app's registration threads (one here), while model PATCHes
    # hold SQLite's writer turn or the model's row lock on the shared pool: neither waits for
    # the other's threads, so everyone finishes, each registration numbered once. (Capping the
    # shared pool instead, at 3 threads, deadlocked PATCHes waiting on the row lock.)
    app.state.registration_threads = RegistrationThreads(1)
    registrations = [("POST", f"{live_url}{MODEL}/versions",
                      {**writer, **({"Idempotency-Key": f"k{i}"} if i % 2 else {})},
                      {"source": "hf://org/m"}) for i in range(PARALLEL)]
    patches = [("PATCH", f"{live_url}{MODEL}", {**writer, "If-Match": "*"},
                {"description": f"p{i}"}) for i in range(PARALLEL // 2)]
    responses = parallel(registrations + patches)
    assert [r.status_code for r in responses] == [201] * PARALLEL + [200] * (PARALLEL // 2)
    assert sorted(r.json()["number"] for r in responses[:PARALLEL]) == \
        list(range(1, PARALLEL + 1))
