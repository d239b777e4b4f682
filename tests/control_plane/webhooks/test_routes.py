"""The webhooks API: admin only, the secret shown once, errors that name the field, and the
deliveries with their outcomes."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from control_plane.webhooks.signing import verify
from tests.control_plane.webhooks.conftest import (
    FAST_POLICY,
    Receiver,
    free_port,
    publish,
    wait_until,
)

WEBHOOKS = "/api/v1/webhooks"


def _create(client: TestClient, admin: dict[str, str], url: str,
            events: list[str] | None = None) -> dict[str, Any]:
    response = client.post(WEBHOOKS, headers=admin, json={
        "url": url, "events": events or ["promotion.succeeded"], "description": "ci"})
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def test_create_list_get_delete(client: TestClient, admin: dict[str, str]) -> None:
    created = _create(client, admin, "https://ci.example.com/hook",
                      ["promotion.failed", "promotion.rolled_back", "promotion.failed"])
    assert created["secret"].startswith("whsec_") and len(created["secret"]) > 40
    assert created["events"] == ["promotion.failed", "promotion.rolled_back"]
    assert (created["url"], created["description"], created["active"]) == \
        ("https://ci.example.com/hook", "ci", True)
    assert created["created_by"] == "admin-token"

    listed = client.get(WEBHOOKS, headers=admin).json()
    assert listed["total"] == 1 and [w["id"] for w in listed["items"]] == [created["id"]]
    fetched = client.get(f"{WEBHOOKS}/{created['id']}", headers=admin).json()
    assert "secret" not in listed["items"][0] and "secret" not in fetched
    assert fetched == {k: v for k, v in created.items() if k != "secret"}

    assert client.delete(f"{WEBHOOKS}/{created['id']}", headers=admin).status_code == 204
    missing = client.get(f"{WEBHOOKS}/{created['id']}", headers=admin)
    assert missing.status_code == 404 and missing.json()["error"] == "NotFound"
    assert created["id"] in missing.json()["detail"]
    assert client.delete(f"{WEBHOOKS}/{created['id']}", headers=admin).status_code == 404

    audit = client.get("/api/v1/audit", headers=admin, params={"target_type": "webhook"}).json()
    assert [e["action"] for e in audit["items"]] == ["webhook.delete", "webhook.create"]
    assert created["secret"] not in str(audit)


def test_webhooks_need_the_admin_scope(client: TestClient, writer: dict[str, str]) -> None:
    for method, path in [("POST", WEBHOOKS), ("GET", WEBHOOKS), ("GET", f"{WEBHOOKS}/{'0' * 32}"),
                         ("DELETE", f"{WEBHOOKS}/{'0' * 32}"),
                         ("GET", f"{WEBHOOKS}/{'0' * 32}/deliveries")]:
        response = client.request(method, path, headers=writer, json={
            "url": "https://x.example.com", "events": ["promotion.succeeded"]})
        assert response.status_code == 403, (method, path)
        assert response.json()["error"] == "Forbidden" and "'admin'" in response.json()["detail"]


@pytest.mark.parametrize(("body", "named"), [
    ({"url": "ftp://ci.example.com/hook", "events": ["promotion.failed"]}, "url"),
    ({"url": "not a url", "events": ["promotion.failed"]}, "url"),
    ({"url": "https://ci.example.com/" + "a" * 2048, "events": ["promotion.failed"]}, "url"),
    ({"url": "https://ci.example.com", "events": ["promotion.exploded"]}, "'promotion.exploded'"),
    ({"url": "https://ci.example.com", "events": []}, "events"),
    ({"url": "https://ci.example.com"}, "events"),
    ({"url": "https://ci.example.com", "events": ["promotion.failed"], "secret": "mine"},
     "secret"),
])
def test_a_bad_subscription_is_a_422_naming_what_is_wrong(
        client: TestClient, admin: dict[str, str], body: dict[str, Any], named: str) -> None:
    response = client.post(WEBHOOKS, headers=admin, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "InvalidRequest"
    assert named in response.json()["detail"]
    assert client.get(WEBHOOKS, headers=admin).json()["total"] == 0


def test_unknown_event_names_the_valid_ones(client: TestClient, admin: dict[str, str]) -> None:
    detail = client.post(WEBHOOKS, headers=admin, json={
        "url": "https://ci.example.com", "events": ["promotion.done"]}).json()["detail"]
    assert "promotion.succeeded, promotion.failed, promotion.rolled_back" in detail


def test_deliveries_list_their_outcomes(client: TestClient, app: FastAPI, admin: dict[str, str],
                                        receiver: Receiver) -> None:
    up = _create(client, admin, receiver.url)
    down = _create(client, admin, f"http://127.0.0.1:{free_port()}/")  # nothing listens there
    event_id = publish(app.state.session_factory)
    app.state.webhook_sender.trigger()

    def page(webhook: dict[str, Any], **params: str) -> dict[str, Any]:
        response = client.get(f"{WEBHOOKS}/{webhook['id']}/deliveries", headers=admin,
                              params=params)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    wait_until(lambda: page(up, state="delivered")["total"] == 1, "the delivery")
    wait_until(lambda: page(down, state="failed")["total"] == 1, "the last attempt")

    [delivered] = page(up)["items"]
    assert delivered["event_id"] == event_id and delivered["event_type"] == "promotion.succeeded"
    assert (delivered["state"], delivered["attempts"], delivered["last_status_code"]) == \
        ("delivered", 1, 200)
    assert delivered["delivered_at"] is not None and delivered["next_attempt_at"] is None
    [got] = receiver.received
    assert got.delivery_id == delivered["id"]
    assert verify(up["secret"], got.headers["X-LLMCP-Timestamp"], got.body,
                  got.headers["X-LLMCP-Signature"])

    [failed] = page(down)["items"]
    assert (failed["state"], failed["attempts"]) == ("failed", FAST_POLICY.max_attempts)
    assert failed["last_status_code"] is None and failed["delivered_at"] is None
    assert "could not reach the receiver" in failed["last_error"]
    assert page(down, state="pending")["total"] == 0


def test_deliveries_of_an_unknown_webhook_are_a_404(client: TestClient, admin: dict[str, str]
                                                    ) -> None:
    response = client.get(f"{WEBHOOKS}/{'0' * 32}/deliveries", headers=admin)
    assert response.status_code == 404 and "GET /api/v1/webhooks" in response.json()["detail"]
    bad_state = client.get(f"{WEBHOOKS}/{'0' * 32}/deliveries", headers=admin,
                           params={"state": "lost"})
    assert bad_state.status_code == 422 and "state" in bad_state.json()["detail"]
