"""The routing table the inference gateway polls: which deployments serve now, the tenants with
their active key hashes, a revision that follows the content, and the long poll."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction
from control_plane.deployments.orm import Deployment, DeploymentState
from control_plane.registry.orm import Model, ModelAlias, ModelVersion
from control_plane.settings import Settings
from tests.control_plane.deployments.support import deployment_row

ROUTING = "/api/v1/routing"
S = DeploymentState


def _ok(response: Any, *codes: int) -> Any:
    assert response.status_code in (codes or (200,)), response.text
    return response.json() if response.content else None


def add_node(client: TestClient, headers: dict[str, str], name: str, host: str,
             metrics: bool = True) -> None:
    """A node whose Triton listens on 8000 (HTTP), 8001 (gRPC) and 8002 (metrics)."""
    _ok(client.post("/api/v1/nodes", headers=headers, json={
        "name": name, "http_url": f"http://{host}:8000", "grpc_url": f"{host}:8001",
        "metrics_url": f"http://{host}:8002/metrics" if metrics else None}), 201)


def add_version(client: TestClient, headers: dict[str, str], model: str,
                engine_args: dict[str, Any]) -> int:
    if client.get(f"/api/v1/models/{model}", headers=headers).status_code == 404:
        _ok(client.post("/api/v1/models", headers=headers, json={"name": model}), 201)
    body = _ok(client.post(f"/api/v1/models/{model}/versions", headers=headers, json={
        "source": f"s3://bucket/{model}", "engine_args": engine_args}), 201)
    number: int = body["number"]
    return number


def point(client: TestClient, headers: dict[str, str], model: str, alias: str,
          version: int) -> None:
    _ok(client.put(f"/api/v1/models/{model}/aliases/{alias}", headers=headers,
                   json={"version": version}), 200, 201)


def set_state(factory: sessionmaker[Session], deployment_id: int, state: DeploymentState,
              serving_version: int | None) -> None:
    with transaction(factory) as session:
        session.execute(update(Deployment).where(Deployment.id == deployment_id)
                        .values(state=state.value, serving_version=serving_version))


def move_alias_row(factory: sessionmaker[Session], model: str, alias: str, number: int) -> None:
    """Where a swap leaves the alias (through the API, moving a deployed alias starts one)."""
    with transaction(factory) as session:
        model_id = session.scalar(select(Model.id).where(Model.name == model))
        version_id = session.scalar(select(ModelVersion.id).where(
            ModelVersion.model_id == model_id, ModelVersion.number == number))
        session.execute(update(ModelAlias).where(ModelAlias.model_id == model_id,
                                                 ModelAlias.name == alias)
                        .values(version_id=version_id))


def table(client: TestClient, headers: dict[str, str], **params: Any) -> dict[str, Any]:
    document: dict[str, Any] = _ok(client.get(ROUTING, headers=headers, params=params))
    return document


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # The nodes here have no Triton: a reconciler would find them down and mark every
    # deployment UNKNOWN under the test's feet.
    return settings.model_copy(update={"reconciler_enabled": False})


@pytest.fixture
def served(client: TestClient, writer: dict[str, str],
           session_factory: sessionmaker[Session]) -> dict[str, int]:
    """smollm2: production → 1 (max_model_len 2048), staging → 2 (no max_model_len); chat:
    production → 1. Deployments in every state that matters, by name."""
    add_node(client, writer, "node-b", "10.0.0.2")
    add_node(client, writer, "node-a", "10.0.0.1", metrics=False)
    add_node(client, writer, "node-c", "10.0.0.3")
    add_version(client, writer, "smollm2", {"max_model_len": 2048})
    add_version(client, writer, "smollm2", {})
    add_version(client, writer, "chat", {"max_model_len": 512})
    point(client, writer, "smollm2", "production", 1)
    point(client, writer, "smollm2", "staging", 2)
    point(client, writer, "chat", "production", 1)
    f = session_factory
    return {
        "prod-b": deployment_row(f, "smollm2", "production", "node-b", S.READY, 1),
        # A swap on node-a: the old version serves under the same name while the new one loads.
        "prod-a": deployment_row(f, "smollm2", "production", "node-a", S.LOADING, 1),
        "prod-c": deployment_row(f, "smollm2", "production", "node-c", S.FAILED, None),
        "staging-a": deployment_row(f, "smollm2", "staging", "node-a", S.READY, 2),
        # A first load: nothing serves yet.
        "staging-b": deployment_row(f, "smollm2", "staging", "node-b", S.LOADING, None),
        "staging-c": deployment_row(f, "smollm2", "staging", "node-c", S.PENDING, None),
        "chat-a": deployment_row(f, "chat", "production", "node-a", S.UNKNOWN, 1),
        "chat-b": deployment_row(f, "chat", "production", "node-b", S.DRAINING, 1),
        # Removed but still READY for a moment: no longer wanted, so no longer routed.
        "chat-c": deployment_row(f, "chat", "production", "node-c", S.READY, 1, wanted=False),
    }


def test_the_table_lists_what_serves_now(client: TestClient, reader: dict[str, str],
                                         served: dict[str, int]) -> None:
    document = table(client, reader)
    assert set(document) == {"revision", "models", "tenants"}
    assert len(document["revision"]) == 64
    assert document["models"] == [
        {"name": "smollm2", "model": "smollm2", "alias": "production", "version": 1,
         "max_model_len": 2048, "endpoints": [
             {"node": "node-a", "http_url": "10.0.0.1:8000", "grpc_url": "10.0.0.1:8001",
              "metrics_url": None, "triton_model": "smollm2", "version": 1, "adapters": []},
             {"node": "node-b", "http_url": "10.0.0.2:8000", "grpc_url": "10.0.0.2:8001",
              "metrics_url": "http://10.0.0.2:8002/metrics", "triton_model": "smollm2",
              "version": 1, "adapters": []}]},
        {"name": "smollm2.staging", "model": "smollm2", "alias": "staging", "version": 2,
         "max_model_len": None, "endpoints": [
             {"node": "node-a", "http_url": "10.0.0.1:8000", "grpc_url": "10.0.0.1:8001",
              "metrics_url": None, "triton_model": "smollm2.staging", "version": 2,
              "adapters": []}]},
    ]
    assert document["tenants"] == []


def test_a_swap_shows_the_alias_version_and_each_node_its_serving_version(
        client: TestClient, writer: dict[str, str], reader: dict[str, str],
        served: dict[str, int], session_factory: sessionmaker[Session]) -> None:
    add_version(client, writer, "smollm2", {"max_model_len": 4096})
    # Mid-swap: node-b serves the new version, node-a still the old one.
    move_alias_row(session_factory, "smollm2", "production", 3)
    set_state(session_factory, served["prod-b"], S.READY, 3)
    production = table(client, reader)["models"][0]
    assert (production["version"], production["max_model_len"]) == (3, 4096)
    assert [(e["node"], e["version"]) for e in production["endpoints"]] == [
        ("node-a", 1), ("node-b", 3)]


def test_tenants_carry_their_active_key_hashes(client: TestClient, admin: dict[str, str],
                                               reader: dict[str, str]) -> None:
    _ok(client.post("/api/v1/tenants", headers=admin, json={
        "name": "zeta", "allowed_models": ["smollm2"], "max_priority_level": 2,
        "default_priority_level": 3, "priority_over_limit": "lower"}), 201)
    _ok(client.post("/api/v1/tenants", headers=admin, json={"name": "demo"}), 201)
    keys = [_ok(client.post("/api/v1/tenants/demo/keys", headers=admin, json={"name": n}), 201)
            for n in ("one", "two")]
    hashes = sorted(hashlib.sha256(k["key"].encode()).hexdigest() for k in keys)

    before = table(client, reader)
    assert before["tenants"] == [
        {"name": "demo", "enabled": True, "allowed_models": ["*"], "max_priority_level": 1,
         "default_priority_level": None, "priority_over_limit": "refuse", "limits": {},
         "model_limits": {}, "weight": 1.0, "key_hashes": hashes},
        {"name": "zeta", "enabled": True, "allowed_models": ["smollm2"],
         "max_priority_level": 2, "default_priority_level": 3, "priority_over_limit": "lower",
         "limits": {}, "model_limits": {}, "weight": 1.0, "key_hashes": []}]

    _ok(client.delete(f"/api/v1/tenants/demo/keys/{keys[0]['id']}", headers=admin), 204)
    _ok(client.patch("/api/v1/tenants/zeta", headers=admin, json={"enabled": False}))
    after = table(client, reader)
    assert after["tenants"][0]["key_hashes"] == \
        [hashlib.sha256(keys[1]["key"].encode()).hexdigest()]
    assert after["tenants"][1]["enabled"] is False
    assert after["revision"] != before["revision"]


def test_the_revision_follows_the_content(client: TestClient, admin: dict[str, str],
                                          reader: dict[str, str], served: dict[str, int],
                                          session_factory: sessionmaker[Session]) -> None:
    revisions = [table(client, reader)["revision"]]
    # Nothing changed: the same revision (on any replica: it is a hash of the content).
    assert table(client, reader)["revision"] == revisions[0]

    def changed() -> str:
        revision: str = table(client, reader)["revision"]
        assert revision not in revisions
        revisions.append(revision)
        return revision

    _ok(client.post("/api/v1/tenants", headers=admin, json={"name": "demo"}), 201)
    changed()
    key = _ok(client.post("/api/v1/tenants/demo/keys", headers=admin, json={"name": "k"}), 201)
    changed()
    set_state(session_factory, served["staging-c"], S.READY, 2)
    changed()
    _ok(client.patch("/api/v1/tenants/demo", headers=admin, json={"max_priority_level": 2}))
    changed()
    # Back to what was: the revision it had then (its only key revoked, the tenant has none).
    _ok(client.patch("/api/v1/tenants/demo", headers=admin, json={"max_priority_level": 1}))
    set_state(session_factory, served["staging-c"], S.PENDING, None)
    _ok(client.delete(f"/api/v1/tenants/demo/keys/{key['id']}", headers=admin), 204)
    assert table(client, reader)["revision"] == revisions[1]
    # What the table does not show (a deployment that stays out of it) changes nothing.
    set_state(session_factory, served["prod-c"], S.LOADING, None)
    assert table(client, reader)["revision"] == revisions[1]


def _timed(call: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def test_a_long_poll_answers_at_once_when_the_caller_is_behind(
        client: TestClient, reader: dict[str, str], served: dict[str, int]) -> None:
    current = table(client, reader)["revision"]
    for after in ("", "0" * 64):
        document, elapsed = _timed(lambda after=after: table(client, reader, after=after,
                                                             wait=30))
        assert document["revision"] == current and elapsed < 5


def test_a_long_poll_answers_with_the_change_made_while_it_waits(
        client: TestClient, admin: dict[str, str], reader: dict[str, str],
        session_factory: sessionmaker[Session], served: dict[str, int]) -> None:
    current = table(client, reader)["revision"]

    def change_later() -> None:
        time.sleep(1.0)
        set_state(session_factory, served["staging-b"], S.READY, 2)

    changer = threading.Thread(target=change_later)
    changer.start()
    document, elapsed = _timed(lambda: table(client, reader, after=current, wait=20))
    changer.join()
    assert document["revision"] != current
    assert [e["node"] for e in document["models"][1]["endpoints"]] == ["node-a", "node-b"]
    assert 0.9 < elapsed < 10


def test_a_long_poll_without_change_answers_the_same_revision_after_wait(
        client: TestClient, reader: dict[str, str]) -> None:
    current = table(client, reader)["revision"]
    document, elapsed = _timed(lambda: table(client, reader, after=current, wait=1.2))
    assert document["revision"] == current
    assert 1.1 < elapsed < 5
    # wait=0 (the default) never waits: no default wait of the order of a long poll's. The bound
    # is loose because a loaded CI machine once took 2 s to answer a plain read.
    _, elapsed = _timed(lambda: table(client, reader, after=current))
    assert elapsed < 5


def test_waiting_polls_hold_no_worker_or_connection(live_url: str, admin: dict[str, str],
                                                    reader: dict[str, str]) -> None:
    """More waiting polls than the thread pool has workers (40) and the database pool has
    connections: other requests are still answered at once (a poll that held either while it
    waited made them wait for the pool's 30 s timeout), and every poll ends with its answer."""
    with httpx.Client(base_url=live_url, headers=reader, timeout=30) as http:
        current = http.get(ROUTING).json()["revision"]

    def poll(_: int) -> int:
        with httpx.Client(base_url=live_url, headers=reader, timeout=30) as http:
            return http.get(ROUTING, params={"after": current, "wait": 4}).status_code

    with ThreadPoolExecutor(48) as pool:
        statuses = pool.map(poll, range(48))
        time.sleep(1.5)
        with httpx.Client(base_url=live_url, headers=admin, timeout=30) as http:
            started = time.monotonic()
            assert http.post("/api/v1/tenants", json={"name": "demo"}).status_code == 201
            assert http.get("/api/v1/tenants").json()["total"] == 1
            answered_in = time.monotonic() - started
        assert set(statuses) == {200}
    assert answered_in < 5, answered_in


@pytest.mark.parametrize("params,expected", [
    ({"wait": 61}, "query.wait"), ({"wait": -1}, "query.wait"),
    ({"after": "abc"}, "query.after"), ({"after": "A" * 64}, "query.after"),
])
def test_bad_parameters_are_refused(client: TestClient, reader: dict[str, str],
                                    params: dict[str, Any], expected: str) -> None:
    response = client.get(ROUTING, headers=reader, params=params)
    assert response.status_code == 422
    assert expected in response.json()["detail"]


def test_the_table_needs_a_token(client: TestClient) -> None:
    assert client.get(ROUTING).status_code == 401
    assert client.get(ROUTING, headers={"Authorization": "Bearer llmcp_nope"}).status_code == 401
