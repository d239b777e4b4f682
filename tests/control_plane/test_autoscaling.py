"""Scaling policies through the API, and the autoscaler's tick on a real database (SQLite and
PostgreSQL): every decision recorded with its reason, a change carried out as a deployment
operation, a change that cannot start recorded with why. The decision rules themselves are
table-tested in tests/unit/test_autoscaling_decision.py; scaling a real model is in the
integration tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction
from control_plane.deployments.orm import NodeHealth
from control_plane.deployments.repository import DeploymentRepository
from control_plane.nodes.repository import NodeRepository
from control_plane.settings import Settings
from tests.control_plane.deployments.support import wait_until
from tests.control_plane.reservations.test_booking import add_node, add_version

POLICY = {"min_engines": 1, "max_engines": 2, "metric": "waiting_per_engine", "target": 4,
          "scale_up_window_s": 30, "scale_down_window_s": 120, "cooldown_s": 60}
PATH = "/api/v1/models/m/aliases/production/scaling"


@pytest.fixture
def settings(database_url: str, source_root: Path) -> Settings:
    # The test drives the autoscaler's ticks itself; no reconciler marks the node down meanwhile.
    return Settings(database_url=database_url, source_roots=[source_root],
                    reconciler_enabled=False, _env_file=None)  # type: ignore[call-arg]


def _alias(client: TestClient, writer: dict[str, str]) -> None:
    add_version(client, writer, "m", {})
    assert client.put("/api/v1/models/m/aliases/production", headers=writer,
                      json={"version": 1}).status_code in (200, 201)


def test_a_policy_is_set_read_guarded_by_its_etag_audited_and_deleted(
        client: TestClient, writer: dict[str, str], reader: dict[str, str],
        admin: dict[str, str]) -> None:
    _alias(client, writer)
    assert client.get(PATH, headers=reader).status_code == 404
    created = client.put(PATH, headers=writer, json=POLICY)
    assert created.status_code == 201, created.text
    etag = created.headers["ETag"]
    body = created.json()
    assert body["model"] == "m" and body["alias"] == "production" and body["enabled"] is True
    assert client.get(PATH, headers=reader).json()["target"] == 4

    changed = client.put(PATH, headers={**writer, "If-Match": etag}, json={**POLICY, "target": 8})
    assert changed.status_code == 200 and changed.headers["ETag"] != etag
    stale = client.put(PATH, headers={**writer, "If-Match": etag}, json=POLICY)
    assert stale.status_code == 412 and "changed since you read it" in stale.json()["detail"]

    inverted = client.put(PATH, headers=writer, json={**POLICY, "min_engines": 3})
    assert inverted.status_code == 422
    assert "max_engines 2 is below min_engines 3" in inverted.text
    unknown_metric = client.put(PATH, headers=writer, json={**POLICY, "metric": "cpu"})
    assert unknown_metric.status_code == 422 and "waiting_per_engine" in unknown_metric.text
    no_alias = client.put("/api/v1/models/m/aliases/nope/scaling", headers=writer, json=POLICY)
    assert no_alias.status_code == 404 and "no alias 'nope'" in no_alias.json()["detail"]
    assert client.put(PATH, headers=reader, json=POLICY).status_code == 403

    audit = client.get("/api/v1/audit", headers=admin, params={"target": "m/production"}).json()
    assert [e["action"] for e in audit["items"]][:2] == ["scaling_policy.update",
                                                         "scaling_policy.create"]
    assert client.delete(PATH, headers=writer).status_code == 204
    assert client.get(PATH, headers=reader).status_code == 404


def test_each_tick_is_recorded_and_a_change_runs_as_a_deployment_operation(
        client: TestClient, writer: dict[str, str], reader: dict[str, str],
        session_factory: sessionmaker[Session]) -> None:
    _alias(client, writer)
    add_node(client, writer, "n", None)  # nothing listens there: the load will fail
    add_node(client, writer, "a-down", None)
    # "n" was never seen (the reconciler visits nodes with deployments): a candidate. A node
    # seen down is not.
    with transaction(session_factory) as session:
        down = NodeRepository(session).get_by_name("a-down")
        assert down is not None
        DeploymentRepository(session).record_node_health(down.id, NodeHealth.DOWN, "refused")
    assert client.put(PATH, headers=writer, json=POLICY).status_code == 201
    autoscaler = client.app.state.autoscaler  # type: ignore[attr-defined]

    # No engine yet, below the minimum: one is added on the only node, as an apply operation.
    [first] = autoscaler.tick()
    assert (first.action.value, first.desired) == ("scale_up", 1)
    decisions: dict[str, Any] = client.get(f"{PATH}/decisions", headers=reader).json()
    [recorded] = decisions["items"]
    assert recorded["action"] == "scale_up" and recorded["node"] == "n"
    assert "below the policy's minimum 1" in recorded["reason"]
    assert recorded["inputs"]["metric"] == "waiting_per_engine"
    operation = client.get(f"/api/v1/operations/{recorded['operation_id']}", headers=reader)
    assert operation.json()["kind"] == "deployment.apply"
    assert client.get(PATH, headers=reader).json()["last_change_at"] is not None

    # The load fails (nothing answers on the node); the next tick still wants an engine but no
    # node is left without one of the alias: recorded, with what to do.
    url = f"/api/v1/operations/{recorded['operation_id']}"
    wait_until(lambda: client.get(url, headers=reader).json()["status"] == "failed",
               "the load to fail", 60)
    [second] = autoscaler.tick()
    assert second.action.value == "scale_up"
    newest = client.get(f"{PATH}/decisions", headers=reader).json()["items"][0]
    assert newest["operation_id"] is None
    assert "register a node or lower max_engines" in newest["error"]

    deployments = client.get("/api/v1/deployments", headers=reader, params={"model": "m"}).json()
    [deployment] = deployments["items"]
    by_id = client.get(f"/api/v1/deployments/{deployment['id']}/scaling", headers=reader).json()
    assert by_id["total"] == 2 and by_id["policy"]["alias"] == "production"
    metrics = client.get("/metrics").text
    assert 'llmcp_autoscaler_decisions_total{action="scale_up",alias="production",model="m"} 2.0' \
        in metrics
