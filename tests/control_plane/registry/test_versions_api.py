"""Versions through the REST API: numbering, validation, immutability, lifecycle."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction
from control_plane.registry.orm import ModelVersion
from control_plane.registry.serving import ServingSettings
from control_plane.registry.sources import local_checksum

VERSIONS = "/api/v1/models/m/versions"


@pytest.fixture
def model(client: TestClient, writer: dict[str, str]) -> str:
    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    return "m"


def test_numbers_are_assigned_per_model(client: TestClient, writer: dict[str, str],
                                        model: str) -> None:
    client.post("/api/v1/models", headers=writer, json={"name": "other"})
    numbers = [client.post(VERSIONS, headers=writer, json={"source": "hf://org/m"}).json()["number"]
               for _ in range(3)]
    other = client.post("/api/v1/models/other/versions", headers=writer,
                        json={"source": "s3://bucket/other"}).json()
    assert numbers == [1, 2, 3]
    assert other["number"] == 1


def test_registered_version_records_everything(client: TestClient, writer: dict[str, str],
                                               model: str, source_root: Path) -> None:
    weights = source_root / "m-weights"
    weights.mkdir(exist_ok=True)
    (weights / "model.safetensors").write_bytes(b"weights")
    response = client.post(VERSIONS, headers=writer, json={
        "source": str(weights), "engine_args": {"max_model_len": 2048},
        "labels": {"commit": "abc123"}})
    assert response.status_code == 201
    body = response.json()
    assert body["model"] == "m"
    assert body["source"] == str(weights.resolve())
    assert body["checksum"] == local_checksum(weights)
    assert body["engine_args"] == {"max_model_len": 2048}
    assert body["state"] == "registered"
    assert body["labels"] == {"commit": "abc123"}
    assert body["created_by"] == "writer-token"
    assert client.get(f"{VERSIONS}/1", headers=writer).json() == body


def test_unknown_engine_argument_is_refused_with_close_matches(
        client: TestClient, writer: dict[str, str], model: str) -> None:
    response = client.post(VERSIONS, headers=writer, json={
        "source": "hf://org/m", "engine_args": {"gpu_memory_utilisation": 0.9}})
    assert response.status_code == 422
    assert response.json()["error"] == "UnknownEngineArgument"
    assert "did you mean 'gpu_memory_utilization'" in response.json()["detail"]
    assert client.get(VERSIONS, headers=writer).json()["total"] == 0


def test_source_outside_roots_or_of_another_kind_is_refused(
        client: TestClient, writer: dict[str, str], model: str, tmp_path: Path) -> None:
    for source in (str(tmp_path), "http://example.com/w", "gs://bucket/w"):
        response = client.post(VERSIONS, headers=writer, json={"source": source})
        assert response.status_code == 422
        assert response.json()["error"] == "InvalidSource"
    assert client.get(VERSIONS, headers=writer).json()["total"] == 0


def test_version_of_missing_model_is_404(client: TestClient, writer: dict[str, str]) -> None:
    response = client.post("/api/v1/models/ghost/versions", headers=writer,
                           json={"source": "hf://org/m"})
    assert response.status_code == 404
    assert client.get("/api/v1/models/m/versions/7", headers=writer).status_code == 404


def test_list_is_newest_first_and_paginated(client: TestClient, writer: dict[str, str],
                                            model: str) -> None:
    for _ in range(3):
        client.post(VERSIONS, headers=writer, json={"source": "hf://org/m"})
    page = client.get(VERSIONS, headers=writer, params={"limit": 2}).json()
    assert [v["number"] for v in page["items"]] == [3, 2]
    assert page["total"] == 3
    rest = client.get(VERSIONS, headers=writer, params={"limit": 2, "offset": 2}).json()
    assert ([v["number"] for v in rest["items"]], rest["total"]) == ([1], 3)
    # Past the end the page is empty and still counts every version.
    beyond = client.get(VERSIONS, headers=writer, params={"offset": 5}).json()
    assert beyond == {"items": [], "total": 3, "limit": 50, "offset": 5}


def test_list_of_a_model_without_versions_or_of_none(client: TestClient, writer: dict[str, str],
                                                     model: str) -> None:
    assert client.get(VERSIONS, headers=writer).json() == {
        "items": [], "total": 0, "limit": 50, "offset": 0}
    assert client.get(VERSIONS, headers=writer, params={"offset": 3}).json()["total"] == 0
    missing = client.get("/api/v1/models/ghost/versions", headers=writer, params={"offset": 3})
    assert missing.status_code == 404
    assert missing.json() == {"error": "ModelNotFound", "detail": "model 'ghost' does not exist"}


def test_listed_versions_are_what_each_version_answers(client: TestClient, writer: dict[str, str],
                                                       model: str, source_root: Path) -> None:
    # The list serializes stored rows without the response model; it must say the same.
    weights = source_root / "m-listed"
    weights.mkdir(exist_ok=True)
    (weights / "model.safetensors").write_bytes(b"weights")
    client.post(VERSIONS, headers=writer, json={"source": "hf://org/m"})
    client.post(VERSIONS, headers=writer, json={
        "source": str(weights), "engine_args": {"max_model_len": 2048, "dtype": "half"},
        "serving": {"priority_levels": 4, "max_inflight_requests": 8,
                    "priority_queue_policies": {"4": {"max_queue_size": 3}}},
        "labels": {"commit": "abc123", "note": "ünïcode \"quoted\""}})
    client.patch(f"{VERSIONS}/1", headers=writer, json={"state": "archived"})
    listed = client.get(VERSIONS, headers=writer)
    assert listed.headers["content-type"] == "application/json"
    singles = [client.get(f"{VERSIONS}/{n}", headers=writer) for n in (2, 1)]
    assert listed.json()["items"] == [single.json() for single in singles]
    # Byte for byte, too: the same field order and number formatting as the response model's.
    assert listed.content.startswith(b'{"items":[' + singles[0].content + b"," +
                                     singles[1].content + b"]")


def test_a_version_stored_before_serving_settings_lists_the_defaults(
        client: TestClient, writer: dict[str, str], model: str,
        session_factory: sessionmaker[Session]) -> None:
    client.post(VERSIONS, headers=writer, json={"source": "hf://org/m"})
    # What the migration that added the column left in versions registered before it.
    with transaction(session_factory) as session:
        session.execute(update(ModelVersion).values(serving={}))
    listed = client.get(VERSIONS, headers=writer).json()["items"]
    assert listed == [client.get(f"{VERSIONS}/1", headers=writer).json()]
    assert listed[0]["serving"] == ServingSettings().model_dump(mode="json")


@pytest.mark.parametrize("field,value", [
    ("source", "hf://org/other"), ("engine_args", {"max_model_len": 1}), ("number", 9),
    ("checksum", "0" * 64), ("created_by", "me"),
])
def test_only_state_and_labels_can_change(client: TestClient, writer: dict[str, str], model: str,
                                          field: str, value: object) -> None:
    client.post(VERSIONS, headers=writer, json={"source": "hf://org/m"})
    response = client.patch(f"{VERSIONS}/1", headers=writer, json={field: value})
    assert response.status_code == 422
    assert f"body.{field}" in response.json()["detail"]
    labelled = client.patch(f"{VERSIONS}/1", headers=writer, json={"labels": {"ok": "yes"}})
    assert labelled.json()["labels"] == {"ok": "yes"}
    assert labelled.json()["source"] == "hf://org/m"


def test_lifecycle_moves_forward_only(client: TestClient, writer: dict[str, str],
                                      model: str) -> None:
    client.post(VERSIONS, headers=writer, json={"source": "hf://org/m"})

    def move(state: str) -> tuple[int, dict[str, str]]:
        response = client.patch(f"{VERSIONS}/1", headers=writer, json={"state": state})
        return response.status_code, response.json()

    assert move("validated")[1]["state"] == "validated"
    status, body = move("registered")
    assert status == 409
    assert body["error"] == "InvalidStateTransition"
    assert "is validated; it cannot become registered (allowed: archived)" in body["detail"]
    assert move("archived")[1]["state"] == "archived"
    status, body = move("validated")
    assert (status, body["error"]) == (409, "InvalidStateTransition")
    assert "archived is final" in body["detail"]
    assert move("bogus")[0] == 422


def test_registered_can_be_archived_directly(client: TestClient, writer: dict[str, str],
                                             model: str) -> None:
    client.post(VERSIONS, headers=writer, json={"source": "hf://org/m"})
    response = client.patch(f"{VERSIONS}/1", headers=writer, json={"state": "archived"})
    assert response.json()["state"] == "archived"


def test_a_dry_run_checks_everything_and_stores_nothing(
        client: TestClient, writer: dict[str, str], admin: dict[str, str], model: str) -> None:
    client.post(VERSIONS, headers=writer, json={"source": "hf://org/m"})
    preview = client.post(VERSIONS, headers=writer, params={"dry_run": "true"}, json={
        "source": "hf://org/m", "engine_args": {"max_model_len": 256},
        "gates": {"smoke": [{"prompt": "Hi", "expect": {"contains": ["Hello"]}}]}})
    assert preview.status_code == 200, preview.text
    assert (preview.json()["number"], preview.json()["state"]) == (2, "registered")
    assert preview.json()["gates"]["smoke"][0]["expect"]["contains"] == ["Hello"]
    refused = client.post(VERSIONS, headers=writer, params={"dry_run": "true"}, json={
        "source": "hf://org/m", "engine_args": {"gpu_memory_utilisation": 0.9}})
    assert refused.status_code == 422 and "gpu_memory_utilisation" in refused.json()["detail"]
    assert client.get(VERSIONS, headers=writer).json()["total"] == 1
    events = client.get("/api/v1/audit", headers=admin, params={"action": "version.register"})
    assert events.json()["total"] == 1
    assert client.post(VERSIONS, headers=writer, json={"source": "hf://org/m"}).json()[
        "number"] == 2, "the number a dry run showed is still free"
