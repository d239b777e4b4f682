"""Adapters on deployments through the REST API, on a node that refuses every connection: the
wanted state, the operations (and their failure with the reason), every refusal, adapter
deletion while wanted, the routing table, and the audit log. The load that succeeds is in
test_adapters_e2e.py, against a real node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from control_plane.adapters.orm import Adapter, AdapterState, DeploymentAdapter
from control_plane.db import transaction
from control_plane.deployments.orm import DeploymentState
from control_plane.settings import Settings
from tests.control_plane.adapters.support import (
    LORA_ARGS,
    VERSION_SOURCE,
    set_adapter_state,
    set_deployment,
    write_adapter,
)
from tests.control_plane.deployments.support import deployment_row, finished


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # The node has no Triton: a reconciler would find it down and mark the deployment UNKNOWN
    # under the test's feet.
    return settings.model_copy(update={"reconciler_enabled": False})


@pytest.fixture
def deployment(client: TestClient, writer: dict[str, str], source_root: Path, tmp_path: Path,
               session_factory: sessionmaker[Session]) -> int:
    """Model m: versions 1 and 2 (both LoRA-enabled), adapters 'french' and 'german' under 1,
    'spanish' under 2; production on 1, READY on node 'down', where nothing listens."""
    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    for _ in range(2):
        assert client.post("/api/v1/models/m/versions", headers=writer, json={
            "source": VERSION_SOURCE, "engine_args": LORA_ARGS}).status_code == 201
    for number, name in ((1, "french"), (1, "german"), (2, "spanish")):
        source = write_adapter(source_root / f"{tmp_path.name}-{name}")
        assert client.post(f"/api/v1/models/m/versions/{number}/adapters", headers=writer,
                           json={"name": name, "source": str(source)}).status_code == 201
    assert client.put("/api/v1/models/m/aliases/production", headers=writer,
                      json={"version": 1}).status_code == 200
    assert client.post("/api/v1/nodes", headers=writer, json={
        "name": "down", "http_url": "http://127.0.0.1:9", "grpc_url": "127.0.0.1:9"}
    ).status_code == 201
    return deployment_row(session_factory, "m", "production", "down", DeploymentState.READY, 1)


def wanted(client: TestClient, headers: dict[str, str], deployment: int) -> list[dict[str, Any]]:
    response = client.get(f"/api/v1/deployments/{deployment}/adapters", headers=headers)
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()
    return rows


def test_a_load_the_node_does_not_answer_fails_with_the_reason(
        client: TestClient, writer: dict[str, str], admin: dict[str, str],
        deployment: int) -> None:
    listed = client.get("/api/v1/deployments", headers=writer).json()["items"]
    assert [d["id"] for d in listed] == [deployment]

    started = client.post(f"/api/v1/deployments/{deployment}/adapters", headers=writer,
                          json={"name": "french"})
    assert started.status_code == 202, started.text
    body = started.json()
    assert body["operation"]["kind"] == "adapter.load"
    assert body["operation"]["arguments"]["version"] == 1
    assert started.headers["Location"] == f"/api/v1/operations/{body['operation']['id']}"
    assert {k: body["adapter"][k] for k in ("deployment_id", "name", "version", "state",
                                            "node", "triton_name")} == {
        "deployment_id": deployment, "name": "french", "version": 1, "state": "loading",
        "node": "down", "triton_name": "m"}

    operation = finished(client, writer, started, timeout=60)
    assert operation["status"] == "failed"
    assert "node 'down' did not answer the adapter load request to 'm'" in operation["error"]
    (row,) = wanted(client, writer, deployment)
    assert row["state"] == "failed"
    assert row["error"].startswith("loading failed: node 'down' did not answer")

    # Both the request and the operation are in the audit log, under the caller's name.
    events = client.get("/api/v1/audit", headers=admin,
                        params={"target": "m/production@down/french"}).json()["items"]
    assert [(e["action"], e["target_type"], e["actor"]) for e in events] == [
        ("adapter.load", "deployment_adapter", "writer-token"),
        ("adapter.load", "deployment_adapter", "writer-token")]
    assert events[1]["before"] is None and events[1]["after"]["state"] == "loading"


def test_an_unload_keeps_the_adapter_unloading_until_the_node_confirms(
        client: TestClient, writer: dict[str, str], deployment: int,
        session_factory: sessionmaker[Session]) -> None:
    finished(client, writer, client.post(f"/api/v1/deployments/{deployment}/adapters",
                                         headers=writer, json={"name": "french"}), timeout=60)
    set_adapter_state(session_factory, deployment, AdapterState.LOADED.value)
    headers = {**writer, "Idempotency-Key": "unload-1"}
    started = client.delete(f"/api/v1/deployments/{deployment}/adapters/french", headers=headers)
    replayed = client.delete(f"/api/v1/deployments/{deployment}/adapters/french", headers=headers)
    assert started.status_code == replayed.status_code == 202, started.text
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert replayed.json()["operation"]["id"] == started.json()["operation"]["id"]
    assert started.json()["operation"]["kind"] == "adapter.unload"
    assert started.json()["adapter"]["state"] == "unloading"
    operation = finished(client, writer, started, timeout=60)
    assert operation["status"] == "failed" and "did not answer" in operation["error"]
    (row,) = wanted(client, writer, deployment)
    assert row["state"] == "unloading"
    assert row["error"].startswith("unloading failed: node 'down' did not answer")
    missing = client.delete(f"/api/v1/deployments/{deployment}/adapters/german", headers=writer)
    assert missing.status_code == 404 and missing.json()["error"] == "AdapterNotOnDeployment"


def test_loads_are_refused_for_another_version_a_deployment_not_ready_or_unknown_names(
        client: TestClient, writer: dict[str, str], deployment: int,
        session_factory: sessionmaker[Session]) -> None:
    path = f"/api/v1/deployments/{deployment}/adapters"

    def refused(body: dict[str, Any], status: int, error: str, reason: str,
                where: str = path) -> None:
        response = client.post(where, headers=writer, json=body)
        assert (response.status_code, response.json()["error"]) == (status, error), response.text
        assert reason in response.json()["detail"], response.json()

    refused({"name": "spanish"}, 409, "AdapterOfAnotherVersion",
            "adapter 'spanish' is registered under version(s) 2 of 'm', and deployment "
            f"{deployment} ('m' on node 'down') serves version 1; register it under version 1")
    refused({"name": "french", "version": 2}, 409, "AdapterOfAnotherVersion",
            "serves version 1 of 'm', not version 2")
    refused({"name": "ghost"}, 404, "AdapterNotFound", "version 1 of model 'm' has no adapter")
    refused({"name": "french"}, 404, "DeploymentIdNotFound", "there is no deployment 999",
            where="/api/v1/deployments/999/adapters")
    refused({"name": "french", "extra": 1}, 422, "InvalidRequest", "extra")
    for state in (DeploymentState.LOADING, DeploymentState.UNKNOWN, DeploymentState.FAILED):
        set_deployment(session_factory, deployment, state=state.value)
        refused({"name": "french"}, 409, "DeploymentNotReady",
                f"deployment {deployment} ('m' on node 'down') is {state}")
    set_deployment(session_factory, deployment, state=DeploymentState.READY.value, wanted=False)
    refused({"name": "french"}, 409, "DeploymentNotReady", "is READY and removed")
    assert wanted(client, writer, deployment) == []
    assert client.get("/api/v1/deployments/999/adapters", headers=writer).status_code == 404


def test_an_adapter_wanted_on_a_deployment_cannot_be_deleted(
        client: TestClient, writer: dict[str, str], deployment: int,
        session_factory: sessionmaker[Session]) -> None:
    finished(client, writer, client.post(f"/api/v1/deployments/{deployment}/adapters",
                                         headers=writer, json={"name": "french"}), timeout=60)
    refused = client.delete("/api/v1/models/m/versions/1/adapters/french", headers=writer)
    assert refused.status_code == 409 and refused.json()["error"] == "AdapterInUse"
    assert f"wanted on deployment(s) {deployment} ('m' on 'down', failed)" in \
        refused.json()["detail"]
    # Once the deployment is removed its engine is gone: nothing holds the adapter any more.
    set_deployment(session_factory, deployment, wanted=False,
                   state=DeploymentState.UNLOADED.value)
    assert client.delete("/api/v1/models/m/versions/1/adapters/french", headers=writer
                         ).status_code == 204
    assert wanted(client, writer, deployment) == []


def test_the_routing_table_lists_the_adapters_loaded_for_the_version_served(
        client: TestClient, writer: dict[str, str], reader: dict[str, str], deployment: int,
        session_factory: sessionmaker[Session]) -> None:
    def endpoint() -> dict[str, Any]:
        (model,) = client.get("/api/v1/routing", headers=reader).json()["models"]
        (only,) = model["endpoints"]
        return dict(only)

    assert endpoint()["adapters"] == []
    before = client.get("/api/v1/routing", headers=reader).json()["revision"]
    for name in ("german", "french"):
        finished(client, writer, client.post(f"/api/v1/deployments/{deployment}/adapters",
                                             headers=writer, json={"name": name}), timeout=60)
    assert endpoint()["adapters"] == []  # failed ones are not routed
    set_adapter_state(session_factory, deployment, AdapterState.LOADED.value)
    assert endpoint()["adapters"] == ["french", "german"]
    assert client.get("/api/v1/routing", headers=reader).json()["revision"] != before
    # One a promotion is still gating is loaded, and not routed.
    with transaction(session_factory) as session:
        session.execute(update(DeploymentAdapter).where(
            DeploymentAdapter.adapter_id == select(Adapter.id).where(
                Adapter.name == "german").scalar_subquery()).values(routed=False))
    assert endpoint()["adapters"] == ["french"]
    # A swap moved the engine to version 2: the old version's adapters are not in it. The row is
    # set as a finished swap leaves it; a real swap here would run in the background against the
    # test's unreachable node, fail, and race the reads below.
    set_deployment(session_factory, deployment, serving_version=2)
    assert endpoint()["version"] == 2 and endpoint()["adapters"] == []


def test_adapter_promotions_that_cannot_start_are_refused_with_the_reason(
        client: TestClient, writer: dict[str, str], deployment: int, source_root: Path,
        tmp_path: Path) -> None:
    promotions = "/api/v1/models/m/promotions"

    def refused(body: dict[str, Any], status: int, reason: str) -> None:
        response = client.post(promotions, headers=writer, json=body)
        assert response.status_code == status, response.text
        assert reason in response.json()["detail"], response.json()

    refused({"to": "production", "version": 1, "adapter": {"name": "french"}}, 422,
            "exactly one of version")
    refused({"to": "production", "adapter": {"name": "french", "gates": {}}}, 422,
            "gates are given with source")
    refused({"to": "staging", "adapter": {"name": "french"}}, 422,
            "alias 'm/staging' does not exist")
    refused({"to": "production", "adapter": {"name": "spanish"}}, 404,
            "version 1 of model 'm' has no adapter 'spanish'")
    # A version that serves no adapters: refused before anything is recorded.
    assert client.post("/api/v1/models/m/versions", headers=writer, json={
        "source": VERSION_SOURCE}).status_code == 201
    assert client.put("/api/v1/models/m/aliases/plain", headers=writer,
                      json={"version": 3}).status_code == 200
    source = write_adapter(source_root / f"{tmp_path.name}-new")
    refused({"to": "plain", "adapter": {"name": "new", "source": str(source)}}, 422,
            "runs on no node")
    assert client.get(promotions, headers=writer).json()["total"] == 0, "nothing was recorded"


def test_an_adapter_promotion_that_cannot_load_ends_failed_and_routes_nothing(
        client: TestClient, writer: dict[str, str], reader: dict[str, str], deployment: int,
        source_root: Path, tmp_path: Path) -> None:
    from tests.control_plane.promotions.support import promote

    source = write_adapter(source_root / f"{tmp_path.name}-italian")
    promotion = promote(client, writer, to="production", adapter={
        "name": "italian", "source": str(source),
        "gates": {"smoke": [{"prompt": "Ciao", "expect": {"non_empty": True}}]}})
    assert (promotion["state"], promotion["failed_step"], promotion["adapter"],
            promotion["version"]) == ("failed", "load_adapter", "italian", 1), promotion
    assert [s["name"] for s in promotion["steps"]] == [
        "register", "load_adapter", "gates_adapter", "publish_adapter"]
    assert "adapter 'italian' of version 1 did not load" in promotion["error"]
    assert "127.0.0.1:9" in promotion["error"] or "down" in promotion["error"]
    # Registered by the promotion, with its gates; never routed.
    registered = client.get("/api/v1/models/m/versions/1/adapters/italian", headers=writer)
    assert registered.json()["gates"]["smoke"][0]["prompt"] == "Ciao"
    (model,) = client.get("/api/v1/routing", headers=reader).json()["models"]
    assert all("italian" not in e["adapters"] for e in model["endpoints"])
    (row,) = [r for r in wanted(client, writer, deployment) if r["name"] == "italian"]
    assert row["routed"] is False
    # The same name from other files is refused; the same files go on.
    other = write_adapter(source_root / f"{tmp_path.name}-other", rank=4)
    again = promote(client, writer, to="production",
                    adapter={"name": "italian", "source": str(other)})
    assert again["failed_step"] == "register" and "holds other files" in again["error"], again
