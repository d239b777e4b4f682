"""Models through the REST API, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime

import pytest
from fastapi.testclient import TestClient

MODELS = "/api/v1/models"


def test_create_get_update_delete(client: TestClient, writer: dict[str, str]) -> None:
    created = client.post(MODELS, headers=writer, json={
        "name": "smollm2", "description": "small chat model", "labels": {"team": "nlp"}})
    assert created.status_code == 201
    body = created.json()
    assert (body["name"], body["description"], body["labels"]) == (
        "smollm2", "small chat model", {"team": "nlp"})

    assert client.get(f"{MODELS}/smollm2", headers=writer).json() == body

    updated = client.patch(f"{MODELS}/smollm2", headers=writer, json={"labels": {"team": "infra"}})
    assert updated.status_code == 200
    assert updated.json()["labels"] == {"team": "infra"}
    assert updated.json()["description"] == "small chat model"
    assert datetime.fromisoformat(updated.json()["updated_at"]) > \
        datetime.fromisoformat(body["updated_at"])

    assert client.delete(f"{MODELS}/smollm2", headers=writer).status_code == 204
    missing = client.get(f"{MODELS}/smollm2", headers=writer)
    assert missing.status_code == 404
    assert missing.json() == {"error": "ModelNotFound", "detail": "model 'smollm2' does not exist"}


@pytest.mark.parametrize("name", [
    "Upper", "-leading", "_leading", "a/b", "..", "a.b", "x" * 65, "", "sp ace", "ünïcode",
])
def test_names_that_could_not_be_triton_model_names_are_refused(
        client: TestClient, writer: dict[str, str], name: str) -> None:
    response = client.post(MODELS, headers=writer, json={"name": name})
    assert response.status_code == 422
    assert response.json()["error"] == "InvalidRequest"
    assert response.json()["detail"].startswith("body.name:")


def test_longest_allowed_name_is_accepted(client: TestClient, writer: dict[str, str]) -> None:
    name = "a" + "b-_9" * 15 + "xyz"
    assert len(name) == 64
    assert client.post(MODELS, headers=writer, json={"name": name}).status_code == 201


def test_duplicate_name_is_a_conflict(client: TestClient, writer: dict[str, str]) -> None:
    assert client.post(MODELS, headers=writer, json={"name": "dup"}).status_code == 201
    response = client.post(MODELS, headers=writer, json={"name": "dup"})
    assert response.status_code == 409
    assert response.json()["error"] == "ModelAlreadyExists"


def test_unknown_fields_are_refused(client: TestClient, writer: dict[str, str]) -> None:
    response = client.post(MODELS, headers=writer, json={"name": "m", "colour": "red"})
    assert response.status_code == 422
    assert "body.colour" in response.json()["detail"]


def test_list_is_paginated_and_ordered_by_name(client: TestClient, writer: dict[str, str]
                                               ) -> None:
    for name in ("c", "a", "e", "b", "d"):
        client.post(MODELS, headers=writer, json={"name": name})
    first = client.get(MODELS, headers=writer, params={"limit": 2}).json()
    assert [m["name"] for m in first["items"]] == ["a", "b"]
    assert (first["total"], first["limit"], first["offset"]) == (5, 2, 0)
    last = client.get(MODELS, headers=writer, params={"limit": 2, "offset": 4}).json()
    assert [m["name"] for m in last["items"]] == ["e"]
    assert client.get(MODELS, headers=writer, params={"limit": 0}).status_code == 422


def test_list_filters_by_every_given_label(client: TestClient, writer: dict[str, str]) -> None:
    client.post(MODELS, headers=writer,
                json={"name": "a", "labels": {"team": "nlp", "env": "prod"}})
    client.post(MODELS, headers=writer, json={"name": "b", "labels": {"team": "nlp"}})
    client.post(MODELS, headers=writer, json={"name": "c", "labels": {"team": "vision"}})

    def names(*labels: str) -> list[str]:
        page = client.get(MODELS, headers=writer, params={"label": list(labels)}).json()
        assert page["total"] == len(page["items"])
        return [m["name"] for m in page["items"]]

    assert names("team=nlp") == ["a", "b"]
    assert names("team=nlp", "env=prod") == ["a"]
    assert names("team=robotics") == []
    assert names() == ["a", "b", "c"]
    bad = client.get(MODELS, headers=writer, params={"label": "no-equals-sign"})
    assert bad.status_code == 422
    assert bad.json()["detail"] == "label filter 'no-equals-sign' must look like key=value"
    # The key becomes a JSON path: a quote in it was a 503 on SQLite, a NUL a 500 on PostgreSQL.
    for key in ('te"am', "te\x00am"):
        refused = client.get(MODELS, headers=writer, params={"label": f"{key}=nlp"})
        assert (refused.status_code, refused.json()["error"]) == (422, "InvalidRequest")


@pytest.mark.parametrize("method,path,body", [
    ("POST", MODELS, {"name": "m", "description": "a\x00b"}),
    ("POST", MODELS, {"name": "m", "labels": {"team": "a\x00b"}}),
    ("GET", f"{MODELS}?label=team%3Da%00b", None),
    ("GET", f"{MODELS}/a%00b", None),
    ("GET", "/api/v1/nodes/a%00b", None),
    ("GET", "/api/v1/operations?kind=a%00b", None),
    ("GET", "/api/v1/audit?actor=a%00b", None),
])
def test_a_nul_character_is_refused_on_every_backend(
        client: TestClient, admin: dict[str, str], method: str, path: str,
        body: dict[str, object] | None) -> None:
    # PostgreSQL can neither store nor compare one; it was a 500 there and accepted on SQLite.
    response = client.request(method, path, headers=admin, json=body)
    assert (response.status_code, response.json()["error"]) == (422, "InvalidRequest")


def test_delete_is_refused_while_an_alias_serves_a_version(
        client: TestClient, writer: dict[str, str]) -> None:
    client.post(MODELS, headers=writer, json={"name": "m"})
    client.post(f"{MODELS}/m/versions", headers=writer, json={"source": "hf://org/m"})
    client.put(f"{MODELS}/m/aliases/production", headers=writer, json={"version": 1})
    refused = client.delete(f"{MODELS}/m", headers=writer)
    assert refused.status_code == 409
    assert refused.json() == {
        "error": "ModelInUse",
        "detail": "model 'm' serves through alias(es) 'production' -> 1; delete them "
                  "(DELETE /api/v1/models/m/aliases/<alias>) first"}
    assert client.get(f"{MODELS}/m/versions/1", headers=writer).status_code == 200

    assert client.delete(f"{MODELS}/m/aliases/production", headers=writer).status_code == 204
    assert client.delete(f"{MODELS}/m", headers=writer).status_code == 204
    assert client.get(f"{MODELS}/m/versions/1", headers=writer).status_code == 404
