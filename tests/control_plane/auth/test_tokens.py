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


def test_admin_lists_tokens_without_secrets(client: TestClient, admin: dict[str, str],
                                            reader: dict[str, str]) -> None:
    client.post("/api/v1/tokens", headers=admin, json={"name": "ci", "scope": "write"})
    response = client.get("/api/v1/tokens", headers=admin, params={"limit": 2})
    assert response.status_code == 200
    page = response.json()
    assert (page["total"], page["limit"], page["offset"]) == (3, 2, 0)
    assert [(t["name"], t["scope"]) for t in page["items"]] == [("admin-token", "admin"),
                                                                ("reader-token", "read")]
    assert all(set(t) == {"name", "scope", "created_at"} for t in page["items"])
    rest = client.get("/api/v1/tokens", headers=admin, params={"offset": 2}).json()
    assert [t["name"] for t in rest["items"]] == ["ci"]
    assert client.get("/api/v1/tokens", headers=reader).status_code == 403


def test_a_revoked_token_gets_401_at_once_and_the_revocation_is_audited(
        client: TestClient, admin: dict[str, str], session_factory: sessionmaker[Session]
        ) -> None:
    secret = client.post("/api/v1/tokens", headers=admin,
                         json={"name": "ci", "scope": "write"}).json()["secret"]
    ci = {"Authorization": f"Bearer {secret}"}
    assert client.get("/api/v1/models", headers=ci).status_code == 200

    assert client.delete("/api/v1/tokens/ci", headers=admin).status_code == 204
    refused = client.get("/api/v1/models", headers=ci)
    assert refused.status_code == 401
    assert refused.json()["error"] == "Unauthorized"
    with session_factory() as session:
        assert session.scalars(select(ApiToken).where(ApiToken.name == "ci")).first() is None
    events = client.get("/api/v1/audit", headers=admin, params={"action": "token.revoke"}).json()
    assert [(e["actor"], e["target"], e["before"], e["after"]) for e in events["items"]] == [
        ("admin-token", "ci", {"name": "ci", "scope": "write"}, None)]


def test_revoking_an_unknown_token_is_404_naming_it(client: TestClient, admin: dict[str, str],
                                                    writer: dict[str, str]) -> None:
    response = client.delete("/api/v1/tokens/ghost", headers=admin)
    assert response.status_code == 404
    assert response.json() == {"error": "TokenNotFound", "detail":
                               "there is no API token named 'ghost'; list them with GET "
                               "/api/v1/tokens or 'llmctl tokens list'"}
    assert client.delete("/api/v1/tokens/writer-token", headers=writer).status_code == 403
    assert client.get("/api/v1/models", headers=writer).status_code == 200
