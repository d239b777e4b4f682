"""API tokens: 401 without a valid one, 403 with too small a scope, secrets stored hashed."""

from __future__ import annotations

import hashlib

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from control_plane.auth.orm import ApiToken
from control_plane.auth.scopes import Scope


@pytest.mark.parametrize("headers", [
    {}, {"Authorization": "Bearer llmcp_not-a-real-token"}, {"Authorization": "Basic dXNlcjpw"},
], ids=["missing", "unknown", "not-bearer"])
def test_requests_without_a_valid_token_get_401(client: TestClient, headers: dict[str, str]
                                                ) -> None:
    for method, path in (("GET", "/api/v1/models"), ("POST", "/api/v1/models"),
                         ("GET", "/api/v1/audit")):
        response = client.request(method, path, headers=headers, json={"name": "m"})
        assert response.status_code == 401
        assert response.json()["error"] == "Unauthorized"
        assert response.headers["WWW-Authenticate"] == "Bearer"


def test_scopes_include_lower_ones_and_refuse_higher_ones(
        client: TestClient, reader: dict[str, str], writer: dict[str, str],
        admin: dict[str, str]) -> None:
    assert client.get("/api/v1/models", headers=reader).status_code == 200
    refused = client.post("/api/v1/models", headers=reader, json={"name": "m"})
    assert refused.status_code == 403
    assert refused.json() == {"error": "Forbidden", "detail":
                              "token 'reader-token' has scope 'read'; this call needs 'write'"}
    assert client.get("/api/v1/models", headers=writer).status_code == 200
    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    assert client.get("/api/v1/audit", headers=writer).status_code == 403
    assert client.post("/api/v1/models", headers=admin, json={"name": "n"}).status_code == 201
    assert client.get("/api/v1/audit", headers=admin).status_code == 200


def test_admin_creates_a_token_whose_secret_is_shown_once_and_stored_hashed(
        client: TestClient, admin: dict[str, str],
        session_factory: sessionmaker[Session]) -> None:
    response = client.post("/api/v1/tokens", headers=admin, json={"name": "ci", "scope": "write"})
    assert response.status_code == 201
    secret = response.json()["secret"]
    assert secret.startswith("llmcp_") and len(secret) > 40

    with session_factory() as session:
        stored = session.scalars(select(ApiToken).where(ApiToken.name == "ci")).one()
    assert stored.scope == Scope.WRITE
    assert stored.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in (stored.secret_hash, stored.name)

    ci = {"Authorization": f"Bearer {secret}"}
    assert client.post("/api/v1/models", headers=ci, json={"name": "m"}).status_code == 201
    duplicate = client.post("/api/v1/tokens", headers=admin, json={"name": "ci", "scope": "read"})
    assert duplicate.status_code == 409


def test_only_admins_create_tokens(client: TestClient, writer: dict[str, str]) -> None:
    response = client.post("/api/v1/tokens", headers=writer, json={"name": "x", "scope": "admin"})
    assert response.status_code == 403


def test_token_names_are_checked(client: TestClient, admin: dict[str, str]) -> None:
    response = client.post("/api/v1/tokens", headers=admin, json={"name": "a b", "scope": "read"})
    assert response.status_code == 422
    assert response.json()["error"] == "InvalidRequest"
