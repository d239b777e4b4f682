"""Aliases: point a name at a version, keep every move, and let only one of two racers win."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.control_plane.conftest import parallel

MODEL = "/api/v1/models/m"
PRODUCTION = f"{MODEL}/aliases/production"
PARALLEL = 8


@pytest.fixture
def versions(client: TestClient, writer: dict[str, str]) -> None:
    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    for _ in range(3):
        created = client.post(f"{MODEL}/versions", headers=writer, json={"source": "hf://org/m"})
        assert created.status_code == 201


def test_moves_are_kept_in_history_and_audited(client: TestClient, writer: dict[str, str],
                                               admin: dict[str, str], versions: None) -> None:
    first = client.put(PRODUCTION, headers=writer, json={"version": 1})
    assert first.status_code == 200
    assert (first.json()["version"], first.json()["updated_by"]) == (1, "writer-token")
    second = client.put(PRODUCTION, headers={**writer, "If-Match": first.headers["ETag"]},
                        json={"version": 2})
    assert second.json()["version"] == 2
    client.put(f"{MODEL}/aliases/staging", headers=writer, json={"version": 3})

    assert client.get(PRODUCTION, headers=writer).json()["version"] == 2
    names = [a["name"] for a in client.get(f"{MODEL}/aliases", headers=writer).json()]
    assert names == ["production", "staging"]
    history = client.get(f"{PRODUCTION}/history", headers=writer).json()
    assert [(h["from_version"], h["to_version"], h["moved_by"]) for h in history["items"]] == [
        (1, 2, "writer-token"), (None, 1, "writer-token")]
    events = client.get("/api/v1/audit", headers=admin,
                        params={"action": "alias.move", "target": "m/production"}).json()
    assert [(e["before"], e["after"]) for e in events["items"]] == [
        ({"version": 1}, {"version": 2}), (None, {"version": 1})]


def test_moving_to_the_same_version_changes_nothing(client: TestClient, writer: dict[str, str],
                                                    versions: None) -> None:
    tag = client.put(PRODUCTION, headers=writer, json={"version": 1}).headers["ETag"]
    again = client.put(PRODUCTION, headers=writer, json={"version": 1})
    assert again.headers["ETag"] == tag
    assert client.get(f"{PRODUCTION}/history", headers=writer).json()["total"] == 1


def test_stale_etag_gets_412(client: TestClient, writer: dict[str, str], versions: None) -> None:
    tag = client.put(PRODUCTION, headers=writer, json={"version": 1}).headers["ETag"]
    client.put(PRODUCTION, headers=writer, json={"version": 2})
    stale = client.put(PRODUCTION, headers={**writer, "If-Match": tag}, json={"version": 3})
    assert stale.status_code == 412
    assert client.get(PRODUCTION, headers=writer).json()["version"] == 2
    missing = client.put(f"{MODEL}/aliases/new", headers={**writer, "If-Match": tag},
                         json={"version": 1})
    assert missing.status_code == 412


def test_targets_must_exist_and_not_be_archived(client: TestClient, writer: dict[str, str],
                                                versions: None) -> None:
    assert client.put(PRODUCTION, headers=writer, json={"version": 9}).status_code == 404
    client.patch(f"{MODEL}/versions/3", headers=writer, json={"state": "archived"})
    archived = client.put(PRODUCTION, headers=writer, json={"version": 3})
    assert archived.status_code == 409
    assert archived.json()["error"] == "InvalidAliasTarget"
    assert client.get(PRODUCTION, headers=writer).status_code == 404
    bad_name = client.put(f"{MODEL}/aliases/Prod..", headers=writer, json={"version": 1})
    assert bad_name.status_code == 422


def test_a_version_an_alias_points_at_cannot_be_archived(
        client: TestClient, writer: dict[str, str], versions: None) -> None:
    client.put(PRODUCTION, headers=writer, json={"version": 2})
    refused = client.patch(f"{MODEL}/versions/2", headers=writer, json={"state": "archived"})
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        "version 2 of 'm' is what alias(es) ['production'] point at; move them to another "
        "version before archiving it")
    assert client.get(f"{MODEL}/versions/2", headers=writer).json()["state"] == "registered"
    client.put(PRODUCTION, headers=writer, json={"version": 1})
    archived = client.patch(f"{MODEL}/versions/2", headers=writer, json={"state": "archived"})
    assert archived.json()["state"] == "archived"


def test_delete_needs_the_current_etag_and_is_audited(
        client: TestClient, writer: dict[str, str], admin: dict[str, str],
        versions: None) -> None:
    tag = client.put(PRODUCTION, headers=writer, json={"version": 1}).headers["ETag"]
    client.put(PRODUCTION, headers=writer, json={"version": 2})
    stale = client.delete(PRODUCTION, headers={**writer, "If-Match": tag})
    assert stale.status_code == 412
    current = client.get(PRODUCTION, headers=writer).headers["ETag"]
    assert client.delete(PRODUCTION, headers={**writer, "If-Match": current}).status_code == 204
    assert client.get(PRODUCTION, headers=writer).status_code == 404
    assert client.delete(PRODUCTION, headers=writer).status_code == 404
    events = client.get("/api/v1/audit", headers=admin,
                        params={"action": "alias.delete", "target": "m/production"}).json()
    assert [(e["actor"], e["before"]) for e in events["items"]] == [
        ("writer-token", {"version": 2})]


def test_parallel_moves_from_the_same_etag_have_exactly_one_winner(
        live_url: str, writer: dict[str, str], versions: None) -> None:
    with httpx.Client(base_url=live_url) as http:
        tag = http.put(PRODUCTION, headers=writer, json={"version": 1}).headers["ETag"]
    headers = {**writer, "If-Match": tag}
    responses = parallel([("PUT", f"{live_url}{PRODUCTION}", headers, {"version": 2 + i % 2})
                          for i in range(PARALLEL)])
    assert sorted(r.status_code for r in responses) == [200] + [412] * (PARALLEL - 1)
    winner = next(r for r in responses if r.status_code == 200).json()["version"]
    with httpx.Client(base_url=live_url) as http:
        assert http.get(PRODUCTION, headers=writer).json()["version"] == winner
        assert http.get(f"{PRODUCTION}/history", headers=writer).json()["total"] == 2
