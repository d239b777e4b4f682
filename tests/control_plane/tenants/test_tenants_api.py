"""Tenants and their inference API keys through the REST API: CRUD, errors that name the field
and the fix, the secret shown once, revocation, and an audit record for every change."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from control_plane.tenants.orm import InferenceApiKey

TENANTS = "/api/v1/tenants"
NO_LIMITS = {"requests_per_minute": None, "tokens_per_minute": None, "concurrent_requests": None,
             "daily_tokens": None}


def _ok(response: Any, *codes: int) -> Any:
    assert response.status_code in (codes or (200,)), response.text
    return response.json() if response.content else None


def _refused(response: Any, status: int = 422) -> str:
    assert response.status_code == status, response.text
    detail: str = response.json()["detail"]
    return detail


def test_create_get_list_update_delete(client: TestClient, admin: dict[str, str],
                                       reader: dict[str, str]) -> None:
    created = client.post(TENANTS, headers=admin, json={"name": "demo"})
    body = _ok(created, 201)
    assert created.headers["Location"] == f"{TENANTS}/demo"
    assert {k: v for k, v in body.items() if not k.endswith("_at")} == {
        "name": "demo", "allowed_models": ["*"], "max_priority_level": 1,
        "default_priority_level": None, "priority_over_limit": "refuse", "enabled": True,
        "limits": NO_LIMITS, "model_limits": {}, "weight": 1.0}
    assert _ok(client.get(f"{TENANTS}/demo", headers=reader)) == body

    _ok(client.post(TENANTS, headers=admin, json={
        "name": "batch@team", "allowed_models": ["smollm2", "chat", "smollm2"],
        "max_priority_level": 2, "default_priority_level": 3, "priority_over_limit": "lower",
        "enabled": False}), 201)
    page = _ok(client.get(TENANTS, headers=reader, params={"limit": 1}))
    assert (page["total"], [t["name"] for t in page["items"]]) == (2, ["batch@team"])
    assert page["items"][0]["allowed_models"] == ["smollm2", "chat"]

    updated = _ok(client.patch(f"{TENANTS}/demo", headers=admin, json={
        "allowed_models": ["smollm2"], "default_priority_level": 2}))
    assert (updated["allowed_models"], updated["default_priority_level"],
            updated["max_priority_level"]) == (["smollm2"], 2, 1)
    assert updated["updated_at"] > body["updated_at"]
    # null is a value for the default level: back to the model's default.
    cleared = _ok(client.patch(f"{TENANTS}/demo", headers=admin,
                               json={"default_priority_level": None}))
    assert cleared["default_priority_level"] is None and cleared["allowed_models"] == ["smollm2"]

    _ok(client.delete(f"{TENANTS}/demo", headers=admin), 204)
    missing = client.get(f"{TENANTS}/demo", headers=reader)
    assert missing.status_code == 404
    assert missing.json() == {"error": "TenantNotFound", "detail": (
        "there is no tenant named 'demo'; list them with GET /api/v1/tenants or "
        "'llmctl tenants list'")}

    audit = _ok(client.get("/api/v1/audit", headers=admin,
                           params={"target_type": "tenant", "target": "demo"}))
    assert [e["action"] for e in audit["items"]] == [
        "tenant.delete", "tenant.update", "tenant.update", "tenant.create"]
    assert audit["items"][2]["before"]["allowed_models"] == ["*"]
    assert audit["items"][2]["after"]["allowed_models"] == ["smollm2"]


def test_limits_are_set_replaced_checked_audited_and_published(
        client: TestClient, admin: dict[str, str], reader: dict[str, str]) -> None:
    created = client.post(TENANTS, headers=admin, json={
        "name": "acme", "allowed_models": ["smollm2", "chat"],
        "limits": {"requests_per_minute": 60, "tokens_per_minute": 20000},
        "model_limits": {"chat": {"concurrent_requests": 2}}})
    body = _ok(created, 201)
    assert body["limits"] == {**NO_LIMITS, "requests_per_minute": 60, "tokens_per_minute": 20000}
    assert body["model_limits"] == {"chat": {**NO_LIMITS, "concurrent_requests": 2}}
    etag = created.headers["ETag"]
    assert client.get(f"{TENANTS}/acme", headers=reader).headers["ETag"] == etag

    # Replaced whole; a stale ETag is refused and changes nothing.
    updated = client.patch(f"{TENANTS}/acme", headers={**admin, "If-Match": etag},
                           json={"limits": {"daily_tokens": 1_000_000}})
    assert _ok(updated)["limits"] == {**NO_LIMITS, "daily_tokens": 1_000_000}
    assert updated.headers["ETag"] != etag
    stale = client.patch(f"{TENANTS}/acme", headers={**admin, "If-Match": etag},
                         json={"limits": {}})
    assert "changed since you read it" in _refused(stale, 412)
    assert "changed since you read it" in _refused(
        client.delete(f"{TENANTS}/acme", headers={**admin, "If-Match": etag}), 412)

    # Errors name the field and the fix.
    assert "requests_per_mintue" in _refused(client.patch(f"{TENANTS}/acme", headers=admin, json={
        "limits": {"requests_per_mintue": 5}}))
    assert "greater than or equal to 1" in _refused(client.patch(
        f"{TENANTS}/acme", headers=admin, json={"limits": {"concurrent_requests": 0}}))
    assert "model_limits name other, which the tenant may not use" in _refused(client.patch(
        f"{TENANTS}/acme", headers=admin, json={"model_limits": {"other": {"daily_tokens": 5}}}))
    # Narrowing allowed_models under a model's limits is refused the same way.
    assert "model_limits name chat" in _refused(client.patch(
        f"{TENANTS}/acme", headers=admin, json={"allowed_models": ["smollm2"]}))
    assert "limits cannot be null" in _refused(client.patch(
        f"{TENANTS}/acme", headers=admin, json={"limits": None}))

    weighted = client.patch(f"{TENANTS}/acme", headers=admin, json={"weight": 2})
    assert _ok(weighted)["weight"] == 2.0
    assert "greater than 0" in _refused(client.patch(f"{TENANTS}/acme", headers=admin,
                                                     json={"weight": 0}))
    (routed,) = [t for t in _ok(client.get("/api/v1/routing", headers=reader))["tenants"]
                 if t["name"] == "acme"]
    assert routed["weight"] == 2.0
    assert (routed["limits"], routed["model_limits"]) == (
        {"daily_tokens": 1_000_000}, {"chat": {"concurrent_requests": 2}})
    audit = _ok(client.get("/api/v1/audit", headers=admin,
                           params={"target_type": "tenant", "target": "acme"}))
    assert [e["action"] for e in audit["items"]] == ["tenant.update", "tenant.update",
                                                     "tenant.create"]
    assert audit["items"][1]["before"]["limits"]["requests_per_minute"] == 60
    assert audit["items"][1]["after"]["limits"]["daily_tokens"] == 1_000_000


def test_a_patch_that_changes_nothing_is_not_audited(client: TestClient,
                                                      admin: dict[str, str]) -> None:
    _ok(client.post(TENANTS, headers=admin, json={"name": "demo"}), 201)
    _ok(client.patch(f"{TENANTS}/demo", headers=admin, json={"enabled": True}))
    audit = _ok(client.get("/api/v1/audit", headers=admin, params={"target_type": "tenant"}))
    assert [e["action"] for e in audit["items"]] == ["tenant.create"]


@pytest.mark.parametrize("body,expected", [
    ({"name": "a b"}, "tenant name 'a b' is not allowed: use 1-64 letters"),
    ({"name": "-x"}, "starting with a letter or digit"),
    ({"name": "x", "allowed_models": []}, "body.allowed_models: Value error, is empty"),
    ({"name": "x", "allowed_models": ["*", "m"]}, "\"*\" (every model) must stand alone"),
    ({"name": "x", "allowed_models": ["m.staging"]},
     "'m.staging' is not a model name (1-64 lowercase letters"),
    ({"name": "x", "allowed_models": ["Chat"]}, "name the model, not an alias"),
    ({"name": "x", "max_priority_level": 0}, "body.max_priority_level"),
    ({"name": "x", "max_priority_level": 17}, "body.max_priority_level"),
    ({"name": "x", "priority_over_limit": "drop"}, "body.priority_over_limit"),
    ({"name": "x", "colour": "red"}, "body.colour: Extra inputs are not permitted"),
    ({"name": "x", "max_priority_level": 2, "default_priority_level": 1},
     ("default_priority_level 1 is more urgent than max_priority_level 2 (1 is the most urgent "
      "level): set default_priority_level to 2 or higher, or to null for the model's default, "
      "or lower max_priority_level")),
])
def test_invalid_tenants_are_refused_naming_the_field(client: TestClient, admin: dict[str, str],
                                                      body: dict[str, Any], expected: str
                                                      ) -> None:
    assert expected in _refused(client.post(TENANTS, headers=admin, json=body))
    assert _ok(client.get(TENANTS, headers=admin))["total"] == 0


def test_a_patch_is_checked_against_what_it_leaves(client: TestClient,
                                                   admin: dict[str, str]) -> None:
    _ok(client.post(TENANTS, headers=admin, json={"name": "demo", "default_priority_level": 2}),
        201)
    detail = _refused(client.patch(f"{TENANTS}/demo", headers=admin,
                                   json={"max_priority_level": 3}))
    assert "default_priority_level 2 is more urgent than max_priority_level 3" in detail
    assert "cannot be null" in _refused(client.patch(f"{TENANTS}/demo", headers=admin,
                                                     json={"enabled": None}))
    assert _ok(client.get(f"{TENANTS}/demo", headers=admin))["max_priority_level"] == 1
    # Both at once is fine.
    _ok(client.patch(f"{TENANTS}/demo", headers=admin,
                     json={"max_priority_level": 3, "default_priority_level": 3}))


def test_duplicates_and_unknown_tenants(client: TestClient, admin: dict[str, str]) -> None:
    _ok(client.post(TENANTS, headers=admin, json={"name": "demo"}), 201)
    detail = _refused(client.post(TENANTS, headers=admin, json={"name": "demo"}), 409)
    assert detail == "tenant 'demo' already exists; PATCH it or pick another name"
    for method, path, body in [("PATCH", f"{TENANTS}/other", {"enabled": False}),
                               ("DELETE", f"{TENANTS}/other", None),
                               ("POST", f"{TENANTS}/other/keys", {"name": "k"}),
                               ("GET", f"{TENANTS}/other/keys", None)]:
        response = client.request(method, path, headers=admin, json=body)
        assert response.status_code == 404, (method, path)
        assert "no tenant named 'other'" in response.json()["detail"]


def test_changes_need_admin_and_reads_need_read(client: TestClient, writer: dict[str, str],
                                                reader: dict[str, str]) -> None:
    assert client.get(TENANTS).status_code == 401
    assert client.get(TENANTS, headers=reader).status_code == 200
    for method, path, body in [("POST", TENANTS, {"name": "x"}),
                               ("PATCH", f"{TENANTS}/x", {"enabled": False}),
                               ("DELETE", f"{TENANTS}/x", None),
                               ("POST", f"{TENANTS}/x/keys", {"name": "k"}),
                               ("DELETE", f"{TENANTS}/x/keys/1", None)]:
        response = client.request(method, path, headers=writer, json=body)
        assert response.status_code == 403, (method, path)
        assert "needs 'admin'" in response.json()["detail"]


def test_a_key_is_shown_once_listed_without_secret_and_revoked(
        client: TestClient, admin: dict[str, str], reader: dict[str, str]) -> None:
    _ok(client.post(TENANTS, headers=admin, json={"name": "demo"}), 201)
    created = _ok(client.post(f"{TENANTS}/demo/keys", headers=admin, json={"name": "web"}), 201)
    assert set(created) == {"id", "name", "prefix", "key", "created_at"}
    secret = created["key"]
    assert secret.startswith("llmgw_") and len(secret) > 40
    assert created["prefix"] == secret[:12]
    second = _ok(client.post(f"{TENANTS}/demo/keys", headers=admin, json={"name": "cli"}), 201)

    listed = client.get(f"{TENANTS}/demo/keys", headers=reader)
    page = _ok(listed)
    assert secret not in listed.text and hashlib.sha256(secret.encode()).hexdigest() not in \
        listed.text
    assert [(k["name"], k["revoked"]) for k in page["items"]] == [("web", False), ("cli", False)]
    assert set(page["items"][0]) == {"id", "name", "prefix", "created_at", "revoked",
                                     "revoked_at"}

    _ok(client.delete(f"{TENANTS}/demo/keys/{created['id']}", headers=admin), 204)
    page = _ok(client.get(f"{TENANTS}/demo/keys", headers=reader))
    web = page["items"][0]
    assert web["revoked"] is True and web["revoked_at"] is not None
    # Revoking again changes nothing, and is not audited again.
    _ok(client.delete(f"{TENANTS}/demo/keys/{created['id']}", headers=admin), 204)
    assert _ok(client.get(f"{TENANTS}/demo/keys", headers=reader))["items"][0] == web

    # Revoked keys keep their names.
    detail = _refused(client.post(f"{TENANTS}/demo/keys", headers=admin, json={"name": "web"}),
                      409)
    assert "already has a key named 'web'" in detail
    assert "key name 'a b' is not allowed" in _refused(
        client.post(f"{TENANTS}/demo/keys", headers=admin, json={"name": "a b"}))
    missing = client.delete(f"{TENANTS}/demo/keys/999999", headers=admin)
    assert missing.status_code == 404
    assert missing.json()["detail"].startswith("tenant 'demo' has no inference API key with id "
                                               "999999")

    audit = client.get("/api/v1/audit", headers=admin, params={"target_type": "tenant"})
    assert [e["action"] for e in _ok(audit)["items"]] == [
        "tenant.key.revoke", "tenant.key.create", "tenant.key.create", "tenant.create"]
    assert _ok(audit)["items"][0]["after"]["prefix"] == created["prefix"]
    assert secret not in audit.text and second["key"] not in audit.text


def test_a_key_belongs_to_its_tenant(client: TestClient, admin: dict[str, str]) -> None:
    for name in ("a", "b"):
        _ok(client.post(TENANTS, headers=admin, json={"name": name}), 201)
    key = _ok(client.post(f"{TENANTS}/a/keys", headers=admin, json={"name": "k"}), 201)
    assert client.delete(f"{TENANTS}/b/keys/{key['id']}", headers=admin).status_code == 404
    # The same key name under another tenant is fine.
    _ok(client.post(f"{TENANTS}/b/keys", headers=admin, json={"name": "k"}), 201)


def test_deleting_a_tenant_deletes_its_keys(client: TestClient, admin: dict[str, str],
                                            session_factory: sessionmaker[Session]) -> None:
    _ok(client.post(TENANTS, headers=admin, json={"name": "demo"}), 201)
    for name in ("one", "two"):
        _ok(client.post(f"{TENANTS}/demo/keys", headers=admin, json={"name": name}), 201)
    _ok(client.delete(f"{TENANTS}/demo", headers=admin), 204)
    with session_factory() as session:
        assert session.scalar(select(func.count()).select_from(InferenceApiKey)) == 0
    audit = _ok(client.get("/api/v1/audit", headers=admin,
                           params={"action": "tenant.delete"}))
    assert audit["items"][0]["before"]["active_keys"] == 2
