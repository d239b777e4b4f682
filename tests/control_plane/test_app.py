"""The app as a whole: health endpoints, the one error shape, a database that is down."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from starlette.types import Message, Receive, Scope, Send

from control_plane.app import RequestIdMiddleware, create_app
from control_plane.autoscaling.scaler import Autoscaler
from control_plane.settings import Settings


def test_health_and_readiness_need_no_token(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}


def test_every_response_carries_a_request_id_and_keeps_the_callers(client: TestClient) -> None:
    assert len(client.get("/healthz").headers["X-Request-ID"]) == 32
    assert client.get("/healthz", headers={"X-Request-ID": "ci-42"}).headers["X-Request-ID"] == \
        "ci-42"


def test_the_request_id_is_capped_and_on_error_answers_too(client: TestClient) -> None:
    response = client.get("/api/v1/models", headers={"X-Request-ID": "r" * 200})
    assert response.status_code == 401
    assert response.headers["X-Request-ID"] == "r" * 128


def test_the_request_id_loses_nul_and_reaches_the_endpoint() -> None:
    # An HTTP client refuses to send NUL in a header, so the middleware is called as ASGI.
    seen: dict[str, Any] = {}

    async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        seen["request_id"] = Request(scope).state.request_id
        await send({"type": "http.response.start", "status": 200,
                     "headers": [(b"x-request-id", b"set-by-the-endpoint")]})
        await send({"type": "http.response.body", "body": b""})

    async def send(message: Message) -> None:
        seen.setdefault("messages", []).append(message)

    async def receive() -> Message:
        return {"type": "http.request"}

    scope = {"type": "http", "method": "GET", "path": "/", "headers": [
        (b"x-request-id", b"a\x00b"), (b"x-request-id", b"second")]}
    asyncio.run(RequestIdMiddleware(endpoint)(scope, receive, send))
    assert seen["request_id"] == "ab"
    assert seen["messages"][0]["headers"] == [(b"x-request-id", b"ab")]


def test_unknown_route_uses_the_error_shape(client: TestClient) -> None:
    response = client.get("/api/v1/nothing-here")
    assert response.status_code == 404
    assert response.json() == {
        "error": "UnknownEndpoint",
        "detail": "GET /api/v1/nothing-here is not an endpoint of this API; every endpoint is "
                  "listed at /docs (OpenAPI document: /openapi.json)"}


def test_a_wrong_method_names_the_ones_the_url_takes(client: TestClient) -> None:
    response = client.post("/api/v1/deployments")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET"
    assert response.json() == {
        "error": "MethodNotAllowed",
        "detail": "POST /api/v1/deployments is not served; this URL takes GET (every endpoint "
                  "is listed at /docs)"}


def test_a_body_that_is_not_utf8_is_a_documented_422(client: TestClient,
                                                     admin: dict[str, str]) -> None:
    # FastAPI itself answers an undocumented 400 "There was an error parsing the body".
    response = client.post("/api/v1/models", headers={**admin, "Content-Type": "application/json"},
                           content=b'{"name": "\xff"}')
    assert response.status_code == 422
    assert response.json()["error"] == "InvalidRequest"
    assert response.json()["detail"].startswith("body: cannot be read as JSON ('utf-8' codec")


def test_openapi_documents_the_error_shape(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    create = schema["paths"]["/api/v1/models"]["post"]["responses"]
    for code in ("401", "403", "409", "422", "503"):
        assert create[code]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorBody"}
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://postgres@127.0.0.1:1/llmcp",
    "sqlite:///{missing}/control_plane.db",
], ids=["postgresql-refused", "sqlite-missing-directory"])
def test_database_down_gives_503_with_a_clear_message(url: str, tmp_path: Path) -> None:
    settings = Settings(database_url=url.format(missing=tmp_path / "missing"),
                        _env_file=None)  # type: ignore[call-arg]
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
        ready = client.get("/readyz")
        listed = client.get("/api/v1/models", headers={"Authorization": "Bearer llmcp_x"})
    for response in (ready, listed):
        assert response.status_code == 503
        body = response.json()
        assert body["error"] == "DatabaseUnavailable"
        assert body["detail"].startswith("the database is unavailable (")
        assert "nothing was changed" in body["detail"]


def test_an_unexpected_error_answers_the_documented_shape_with_the_request_id(
        app: FastAPI, caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> None:
        raise RuntimeError("secret internal state")

    app.add_api_route("/broken-for-this-test", broken)
    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.get("/broken-for-this-test", headers={"X-Request-ID": "req-42"})
    assert answer.status_code == 500
    body = answer.json()
    assert body["error"] == "InternalError" and "request id req-42" in body["detail"]
    assert "secret internal state" not in answer.text
    assert answer.headers["X-Request-ID"] == "req-42"
    assert any("req-42" in r.getMessage() and r.exc_info for r in caplog.records)


def test_a_startup_failing_part_way_stops_what_it_started(
        app: FastAPI, monkeypatch: pytest.MonkeyPatch) -> None:
    # The autoscaler starts after the runner, the pollers and the reconciler: its failure used to
    # leave those running with nobody to stop them (an embedding process, or a test session, kept
    # claiming operations and reconciling with an app that never served).
    started = {"operation-claims", "reconciler", "promotion-adopter", "gpu-monitor",
               "webhook-sender"}
    before = set(threading.enumerate())

    def running() -> list[str]:
        return sorted(thread.name for thread in set(threading.enumerate()) - before
                      if thread.name in started | {"autoscaler"} and thread.is_alive())

    def refuse(_: Autoscaler) -> None:
        raise RuntimeError("the autoscaler could not start")

    with monkeypatch.context() as patch:
        patch.setattr(Autoscaler, "start", refuse)
        with pytest.raises(RuntimeError, match="the autoscaler could not start"), \
                TestClient(app):
            pass
    assert running() == []


def test_two_servers_on_one_app_share_one_set_of_background_work(app: FastAPI) -> None:
    # A test client beside a uvicorn server (live_url) runs the lifespan twice on one app. The
    # first to stop used to stop the runner and the reconciler under the other, and stopped the
    # latest leader election twice, which left the first one contending for the leader lock on
    # a database dropped after the test, for the rest of the session.
    background = {"operation-claims", "reconciler", "autoscaler", "leader-reconciler",
                  "promotion-adopter", "gpu-monitor", "webhook-sender"}

    def running() -> list[str]:
        return sorted(thread.name for thread in set(threading.enumerate()) - before
                      if thread.name in background and thread.is_alive())

    before = set(threading.enumerate())
    with TestClient(app) as outer:
        assert running() == sorted(background)
        with TestClient(app) as inner:
            assert running() == sorted(background)
            assert inner.get("/healthz").status_code == 200
        assert running() == sorted(background)
        assert outer.get("/healthz").status_code == 200
    assert running() == []
