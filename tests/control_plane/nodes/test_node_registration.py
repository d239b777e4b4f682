"""A node's agent registers its node and takes it out: ``PUT/DELETE /nodes/{name}/registration``
with a ``node``-scope token. Joining is safe to repeat and brings a cordoned node back; leaving
cordons the node (no longer routed) and forgets it only when nothing is deployed there."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from control_plane.auth.scopes import Scope
from control_plane.deployments.orm import DeploymentState
from control_plane.settings import Settings
from tests.control_plane.conftest import issue_token
from tests.control_plane.deployments.support import deployment_row
from tests.control_plane.routing.test_routing_api import add_version, point, table

NODES = "/api/v1/nodes"
JOIN = {"http_url": "http://triton-0.triton:8000", "grpc_url": "triton-0.triton:8001",
        "metrics_url": "http://triton-0.triton:8002/metrics", "labels": {"pool": "cpu"},
        "api_key_ref": "file:/run/secrets/triton-repository-key"}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # The nodes here have no Triton: a reconciler would find them down and, after its missed
    # passes, mark the deployments made here UNKNOWN, which takes them out of routing under the
    # test's feet (seen in CI, on a loaded machine, between two reads of the routing table).
    return settings.model_copy(update={"reconciler_enabled": False})


def _node_agent(factory: sessionmaker[Session]) -> dict[str, str]:
    return issue_token(factory, "node-agent", Scope.NODE)


def _actions(client: TestClient, admin: dict[str, str]) -> list[str]:
    events = client.get("/api/v1/audit", headers=admin, params={"target_type": "node"}).json()
    return [event["action"] for event in events["items"]]


def test_join_creates_then_refreshes(client: TestClient, session_factory: sessionmaker[Session],
                                     admin: dict[str, str]) -> None:
    agent = _node_agent(session_factory)
    first = client.put(f"{NODES}/triton-0/registration", headers=agent, json=JOIN)
    assert first.status_code == 201, first.text
    assert first.json()["http_url"] == "http://triton-0.triton:8000/"
    assert first.json()["cordoned_at"] is None

    # The pod restarted with a new address: the same node, refreshed.
    moved = {**JOIN, "http_url": "http://10.1.2.3:8000"}
    again = client.put(f"{NODES}/triton-0/registration", headers=agent, json=moved)
    assert again.status_code == 200, again.text
    assert again.json()["http_url"] == "http://10.1.2.3:8000/"
    assert client.get(NODES, headers=agent).json()["total"] == 1
    assert _actions(client, admin) == ["node.join", "node.register"]


def test_a_node_token_can_do_nothing_else(client: TestClient,
                                          session_factory: sessionmaker[Session],
                                          reader: dict[str, str]) -> None:
    agent = _node_agent(session_factory)
    refused = client.put(f"{NODES}/triton-0/registration", headers=reader, json=JOIN)
    assert refused.status_code == 403 and "node" in refused.json()["detail"]
    assert client.put(f"{NODES}/triton-0/registration", headers=agent, json=JOIN).status_code == 201
    # Operators' changes stay operators': a node token cannot edit, remove or deploy.
    assert client.patch(f"{NODES}/triton-0", headers=agent,
                        json={"excluded_gpus": ["GPU-1"]}).status_code == 403
    assert client.delete(f"{NODES}/triton-0", headers=agent).status_code == 403
    assert client.post("/api/v1/models", headers=agent, json={"name": "x"}).status_code == 403


def test_bad_registration_names_the_field(client: TestClient,
                                          session_factory: sessionmaker[Session]) -> None:
    agent = _node_agent(session_factory)
    bad = client.put(f"{NODES}/triton-0/registration", headers=agent,
                     json={**JOIN, "api_key_ref": "the-key-itself"})
    assert bad.status_code == 422
    assert "api_key_ref" in bad.text
    assert client.get(f"{NODES}/triton-0", headers=agent).status_code == 404


def test_leave_forgets_an_empty_node(client: TestClient,
                                     session_factory: sessionmaker[Session],
                                     admin: dict[str, str]) -> None:
    agent = _node_agent(session_factory)
    client.put(f"{NODES}/triton-0/registration", headers=agent, json=JOIN)
    left = client.delete(f"{NODES}/triton-0/registration", headers=agent)
    assert left.status_code == 200, left.text
    assert left.json()["removed"] is True
    assert client.get(f"{NODES}/triton-0", headers=agent).status_code == 404
    assert _actions(client, admin) == ["node.leave", "node.register"]
    gone = client.delete(f"{NODES}/triton-0/registration", headers=agent)
    assert gone.status_code == 404 and gone.json()["error"] == "NodeNotFound"


def _routed_nodes(client: TestClient, headers: dict[str, str]) -> list[str]:
    models: list[dict[str, Any]] = table(client, headers)["models"]
    return sorted(endpoint["node"] for model in models for endpoint in model["endpoints"])


def test_leave_with_deployments_cordons_until_it_joins_again(
        client: TestClient, session_factory: sessionmaker[Session],
        writer: dict[str, str]) -> None:
    agent = _node_agent(session_factory)
    for name in ("triton-0", "triton-1"):
        host = f"{name}.triton"
        client.put(f"{NODES}/{name}/registration", headers=agent, json={
            **JOIN, "http_url": f"http://{host}:8000", "grpc_url": f"{host}:8001"})
    add_version(client, writer, "smollm2", {"max_model_len": 512})
    point(client, writer, "smollm2", "production", 1)
    for name in ("triton-0", "triton-1"):
        deployment_row(session_factory, "smollm2", "production", name, DeploymentState.READY, 1)
    assert _routed_nodes(client, agent) == ["triton-0", "triton-1"]

    left = client.delete(f"{NODES}/triton-0/registration", headers=agent)
    assert left.status_code == 200, left.text
    assert left.json()["removed"] is False and "cordoned" in left.json()["detail"]
    node = client.get(f"{NODES}/triton-0", headers=agent).json()
    assert node["cordoned_at"] is not None
    # Gateways stop sending it new requests; the other node keeps serving.
    assert _routed_nodes(client, agent) == ["triton-1"]

    back = client.put(f"{NODES}/triton-0/registration", headers=agent, json={
        **JOIN, "http_url": "http://triton-0.triton:8000", "grpc_url": "triton-0.triton:8001"})
    assert back.status_code == 200 and back.json()["cordoned_at"] is None
    assert _routed_nodes(client, agent) == ["triton-0", "triton-1"]


def test_an_operator_cordons_and_uncordons(client: TestClient,
                                           session_factory: sessionmaker[Session],
                                           writer: dict[str, str]) -> None:
    agent = _node_agent(session_factory)
    client.put(f"{NODES}/triton-0/registration", headers=agent, json=JOIN)
    cordoned = client.patch(f"{NODES}/triton-0", headers=writer, json={"cordoned": True})
    assert cordoned.status_code == 200 and cordoned.json()["cordoned_at"] is not None
    since = cordoned.json()["cordoned_at"]
    # Saying it again keeps the first time.
    assert client.patch(f"{NODES}/triton-0", headers=writer,
                        json={"cordoned": True}).json()["cordoned_at"] == since
    assert client.patch(f"{NODES}/triton-0", headers=writer,
                        json={"cordoned": False}).json()["cordoned_at"] is None
