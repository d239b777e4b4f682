"""Every mutating call leaves one audit event, written in the same transaction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from fastapi.testclient import TestClient

AUDIT = "/api/v1/audit"


def _events(client: TestClient, admin: dict[str, str], **filters: str) -> list[dict[str, object]]:
    response = client.get(AUDIT, headers=admin, params=filters)
    assert response.status_code == 200
    items: list[dict[str, object]] = response.json()["items"]
    return items


def test_each_mutation_records_actor_action_target_before_after_and_request_id(
        client: TestClient, writer: dict[str, str], admin: dict[str, str]) -> None:
    headers = {**writer, "X-Request-ID": "req-1"}
    client.post("/api/v1/models", headers=headers, json={"name": "m", "description": "d"})
    client.patch("/api/v1/models/m", headers=writer, json={"description": "new"})
    client.post("/api/v1/models/m/versions", headers=writer, json={"source": "hf://org/m"})
    client.patch("/api/v1/models/m/versions/1", headers=writer, json={"state": "archived"})
    client.delete("/api/v1/models/m", headers=writer)

    events = list(reversed(_events(client, admin, actor="writer-token")))
    assert [(e["action"], e["target_type"], e["target"]) for e in events] == [
        ("model.create", "model", "m"),
        ("model.update", "model", "m"),
        ("version.register", "version", "m/1"),
        ("version.update", "version", "m/1"),
        ("model.delete", "model", "m"),
    ]
    create, update, register, archive, delete = events
    assert create["request_id"] == "req-1"
    assert all(len(str(e["request_id"])) == 32 for e in events[1:])
    assert create["before"] is None and create["after"]["description"] == "d"  # type: ignore[index]
    assert update["before"]["description"] == "d"  # type: ignore[index]
    assert update["after"]["description"] == "new"  # type: ignore[index]
    assert register["after"]["source"] == "hf://org/m"  # type: ignore[index]
    assert archive["before"]["state"] == "registered"  # type: ignore[index]
    assert archive["after"]["state"] == "archived"  # type: ignore[index]
    assert delete["before"]["name"] == "m" and delete["after"] is None  # type: ignore[index]


def test_refused_and_read_calls_leave_no_event(client: TestClient, writer: dict[str, str],
                                               admin: dict[str, str]) -> None:
    client.post("/api/v1/models", headers=writer, json={"name": "m"})
    client.post("/api/v1/models", headers=writer, json={"name": "m"})
    client.post("/api/v1/models/m/versions", headers=writer,
                json={"source": "hf://org/m", "engine_args": {"nope": 1}})
    client.get("/api/v1/models/m", headers=writer)
    assert [e["action"] for e in _events(client, admin, actor="writer-token")] == ["model.create"]


def test_filters_combine(client: TestClient, writer: dict[str, str], admin: dict[str, str]
                         ) -> None:
    for name in ("a", "b"):
        client.post("/api/v1/models", headers=writer, json={"name": name})
    client.patch("/api/v1/models/a", headers=writer, json={"labels": {"x": "y"}})

    assert len(_events(client, admin, target_type="model", target="a")) == 2
    assert len(_events(client, admin, action="model.create", actor="writer-token")) == 2
    assert _events(client, admin, actor="nobody") == []
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    assert _events(client, admin, since=future) == []
    assert len(_events(client, admin, since=past, until=future, actor="writer-token")) == 3
    naive = client.get(AUDIT, headers=admin, params={"since": "2026-01-01T00:00:00"})
    assert naive.status_code == 422
    # The same instant in another zone: SQLite compared its wall-clock time and found nothing.
    offset = (datetime.now(UTC) - timedelta(hours=1)).astimezone(timezone(timedelta(hours=5)))
    assert len(_events(client, admin, since=offset.isoformat(), actor="writer-token")) == 3
    # A number was read as Unix time (2024 s after 1970); the edge of the calendar overflowed.
    for since in ("2024", "0.5", "0001-01-01T00:00:00+01:00"):
        refused = client.get(AUDIT, headers=admin, params={"since": since})
        assert (refused.status_code, refused.json()["error"]) == (422, "InvalidRequest")
    page = client.get(AUDIT, headers=admin, params={"limit": 1, "actor": "writer-token"}).json()
    assert (len(page["items"]), page["total"]) == (1, 3)


def test_the_log_is_append_only_through_the_api(client: TestClient, admin: dict[str, str]
                                                ) -> None:
    for method in ("PUT", "PATCH", "DELETE"):
        assert client.request(method, AUDIT, headers=admin).status_code == 405
