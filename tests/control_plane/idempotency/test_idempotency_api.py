"""A POST retried with the same Idempotency-Key returns its first result, creating nothing twice."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction, utcnow
from control_plane.idempotency.orm import IdempotencyKey
from control_plane.idempotency.service import KEY_LIFETIME
from tests.control_plane.conftest import parallel

VERSIONS = "/api/v1/models/m/versions"
PARALLEL = 8


@pytest.fixture
def model(client: TestClient, writer: dict[str, str]) -> None:
    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201


def test_retry_returns_the_first_result(client: TestClient, writer: dict[str, str],
                                        admin: dict[str, str], model: None) -> None:
    headers = {**writer, "Idempotency-Key": "deploy-42"}
    first = client.post(VERSIONS, headers=headers, json={"source": "hf://org/m"})
    retry = client.post(VERSIONS, headers=headers, json={"source": "hf://org/m"})
    assert first.status_code == retry.status_code == 201
    assert retry.json() == first.json()
    assert retry.headers["ETag"] == first.headers["ETag"]
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert client.get(VERSIONS, headers=writer).json()["total"] == 1
    events = client.get("/api/v1/audit", headers=admin, params={"action": "version.register"})
    assert events.json()["total"] == 1


def test_model_creation_retry_is_not_a_conflict(client: TestClient, writer: dict[str, str]
                                                ) -> None:
    headers = {**writer, "Idempotency-Key": "create-n"}
    first = client.post("/api/v1/models", headers=headers, json={"name": "n"})
    retry = client.post("/api/v1/models", headers=headers, json={"name": "n"})
    assert (first.status_code, retry.status_code) == (201, 201)
    assert retry.json() == first.json()


def test_same_key_for_a_different_request_is_refused(client: TestClient, writer: dict[str, str],
                                                     model: None) -> None:
    headers = {**writer, "Idempotency-Key": "k"}
    assert client.post(VERSIONS, headers=headers, json={"source": "hf://org/m"}).status_code == 201
    other = client.post(VERSIONS, headers=headers, json={"source": "hf://org/other"})
    assert other.status_code == 422
    assert "already used for a different request" in other.json()["detail"]
    assert client.get(VERSIONS, headers=writer).json()["total"] == 1


def test_keys_belong_to_one_actor(client: TestClient, writer: dict[str, str],
                                  admin: dict[str, str], model: None) -> None:
    body = {"source": "hf://org/m"}
    mine = client.post(VERSIONS, headers={**writer, "Idempotency-Key": "k"}, json=body)
    theirs = client.post(VERSIONS, headers={**admin, "Idempotency-Key": "k"}, json=body)
    assert (mine.json()["number"], theirs.json()["number"]) == (1, 2)


def test_a_failed_request_stores_nothing_so_a_corrected_retry_runs(
        client: TestClient, writer: dict[str, str], model: None) -> None:
    headers = {**writer, "Idempotency-Key": "k"}
    failed = client.post(VERSIONS, headers=headers,
                         json={"source": "hf://org/m", "engine_args": {"max_model_length": 1}})
    assert failed.status_code == 422
    fixed = client.post(VERSIONS, headers=headers,
                        json={"source": "hf://org/m", "engine_args": {"max_model_len": 1}})
    assert fixed.status_code == 201
    assert "Idempotent-Replayed" not in fixed.headers


def test_overlong_key_is_refused(client: TestClient, writer: dict[str, str], model: None) -> None:
    response = client.post(VERSIONS, headers={**writer, "Idempotency-Key": "k" * 129},
                           json={"source": "hf://org/m"})
    assert response.status_code == 422
    assert client.get(VERSIONS, headers=writer).json()["total"] == 0


def test_parallel_retries_create_exactly_one_version(
        live_url: str, writer: dict[str, str], model: None) -> None:
    headers = {**writer, "Idempotency-Key": "burst"}
    responses = parallel([("POST", f"{live_url}{VERSIONS}", headers, {"source": "hf://org/m"})
                          for _ in range(PARALLEL)])
    assert [r.status_code for r in responses] == [201] * PARALLEL
    assert {r.json()["number"] for r in responses} == {1}
    assert sum(r.headers.get("Idempotent-Replayed") == "true" for r in responses) == PARALLEL - 1
    with httpx.Client(base_url=live_url) as http:
        assert http.get(VERSIONS, headers=writer).json()["total"] == 1


def test_a_key_is_forgotten_after_its_lifetime(client: TestClient, writer: dict[str, str],
                                               session_factory: sessionmaker[Session],
                                               model: None) -> None:
    headers = {**writer, "Idempotency-Key": "nightly"}
    first = client.post(VERSIONS, headers=headers, json={"source": "hf://org/m"})
    with transaction(session_factory) as session:
        session.execute(update(IdempotencyKey).values(
            created_at=utcnow() - KEY_LIFETIME - timedelta(minutes=1)))
    later = client.post(VERSIONS, headers=headers, json={"source": "hf://org/m"})
    assert later.status_code == 201
    assert "Idempotent-Replayed" not in later.headers
    assert (first.json()["number"], later.json()["number"]) == (1, 2)
    with transaction(session_factory) as session:
        assert session.scalar(select(func.count()).select_from(IdempotencyKey)) == 1
