"""Triton nodes through the REST API: register, list by label, update with ETags, remove; the
metrics URL, and the Triton version the reconciler read, checked against the minimum."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction
from control_plane.deployments.orm import NodeHealth
from control_plane.deployments.repository import DeploymentRepository
from control_plane.nodes.repository import NodeRepository
from control_plane.nodes.triton_version import version_warning
from control_plane.settings import Settings

NODES = "/api/v1/nodes"
NODE = {"name": "gpu-a", "http_url": "http://10.0.0.5:8000", "grpc_url": "10.0.0.5:8001",
        "labels": {"zone": "eu"}, "api_key_ref": "env:TRITON_GPU_A_KEY"}


def test_register_get_update_remove(client: TestClient, writer: dict[str, str],
                                    admin: dict[str, str]) -> None:
    created = client.post(NODES, headers=writer, json=NODE)
    assert created.status_code == 201
    body = created.json()
    assert {k: body[k] for k in NODE} == {**NODE, "http_url": "http://10.0.0.5:8000/"}
    assert client.get(f"{NODES}/gpu-a", headers=writer).json() == body

    tag = created.headers["ETag"]
    updated = client.patch(f"{NODES}/gpu-a", headers={**writer, "If-Match": tag},
                           json={"grpc_url": "10.0.0.6:8001"})
    assert updated.json()["grpc_url"] == "10.0.0.6:8001"
    stale = client.patch(f"{NODES}/gpu-a", headers={**writer, "If-Match": tag},
                         json={"labels": {}})
    assert stale.status_code == 412
    assert client.post(NODES, headers=writer, json=NODE).status_code == 409

    assert client.delete(f"{NODES}/gpu-a", headers=writer).status_code == 204
    missing = client.get(f"{NODES}/gpu-a", headers=writer)
    assert missing.json() == {"error": "NodeNotFound", "detail": "node 'gpu-a' is not registered"}
    actions = [e["action"] for e in client.get("/api/v1/audit", headers=admin,
                                               params={"target_type": "node"}).json()["items"]]
    assert actions == ["node.remove", "node.update", "node.register"]


def test_list_filters_by_label(client: TestClient, writer: dict[str, str]) -> None:
    client.post(NODES, headers=writer, json=NODE)
    client.post(NODES, headers=writer, json={**NODE, "name": "gpu-b", "labels": {"zone": "us"}})
    page = client.get(NODES, headers=writer, params={"label": "zone=us"}).json()
    assert [n["name"] for n in page["items"]] == ["gpu-b"]
    assert client.get(NODES, headers=writer).json()["total"] == 2


@pytest.mark.parametrize("field,value", [
    ("http_url", "ftp://x:1"), ("grpc_url", "http://x:8001"), ("grpc_url", "host"),
    ("api_key_ref", "plain-secret-value"), ("api_key_ref", "env:"), ("name", "GPU A"),
    # Longer than the column once normalised (each 'é' becomes '%C3%A9'), and a NUL PostgreSQL
    # cannot store: both were a 500 on PostgreSQL.
    ("http_url", "http://x/" + "é" * 100), ("api_key_ref", "file:/keys/a\x00b"),
])
def test_invalid_fields_are_refused(client: TestClient, writer: dict[str, str], field: str,
                                    value: str) -> None:
    response = client.post(NODES, headers=writer, json={**NODE, field: value})
    assert response.status_code == 422
    assert f"body.{field}" in response.json()["detail"]


def test_reading_needs_a_token_and_writing_needs_write(client: TestClient,
                                                       reader: dict[str, str]) -> None:
    assert client.get(NODES).status_code == 401
    assert client.get(NODES, headers=reader).status_code == 200
    assert client.post(NODES, headers=reader, json=NODE).status_code == 403


def test_metrics_url_is_kept_changed_and_removed(client: TestClient,
                                                 writer: dict[str, str]) -> None:
    created = client.post(NODES, headers=writer,
                          json={**NODE, "metrics_url": "http://10.0.0.5:8002/metrics"})
    assert created.json()["metrics_url"] == "http://10.0.0.5:8002/metrics"
    assert client.post(NODES, headers=writer, json={**NODE, "name": "gpu-b"}).json()[
        "metrics_url"] is None
    # Leaving it out of a PATCH keeps it; null removes it.
    kept = client.patch(f"{NODES}/gpu-a", headers=writer, json={"labels": {}})
    assert kept.json()["metrics_url"] == "http://10.0.0.5:8002/metrics"
    changed = client.patch(f"{NODES}/gpu-a", headers=writer,
                           json={"metrics_url": "https://triton.example.com/metrics"})
    assert changed.json()["metrics_url"] == "https://triton.example.com/metrics"
    removed = client.patch(f"{NODES}/gpu-a", headers=writer, json={"metrics_url": None})
    assert removed.json()["metrics_url"] is None
    for bad in ("ftp://x/metrics", "10.0.0.5:8002/metrics", "http://x/" + "é" * 100):
        response = client.patch(f"{NODES}/gpu-a", headers=writer, json={"metrics_url": bad})
        assert response.status_code == 422
        assert "body.metrics_url" in response.json()["detail"]


def test_an_old_triton_is_flagged(client: TestClient, writer: dict[str, str],
                                  admin: dict[str, str],
                                  session_factory: sessionmaker[Session]) -> None:
    client.post(NODES, headers=writer, json=NODE)
    client.post(NODES, headers=writer, json={**NODE, "name": "gpu-b"})
    fresh = client.get(f"{NODES}/gpu-a", headers=writer).json()
    assert (fresh["server_version"], fresh["version_warning"]) == (None, None)

    # As the reconciler records what it read from Triton's server metadata.
    with transaction(session_factory) as session:
        nodes = {n.name: n.id for n in NodeRepository(session).all()}
        DeploymentRepository(session).record_node_health(nodes["gpu-a"], NodeHealth.UP, "",
                                                         "2.51.0")
        DeploymentRepository(session).record_node_health(nodes["gpu-b"], NodeHealth.UP, "",
                                                         "2.70.0")
    old = client.get(f"{NODES}/gpu-a", headers=writer).json()
    assert old["server_version"] == "2.51.0"
    assert old["version_warning"] == (
        "Triton 2.51.0 is older than the minimum 2.70.0 (LLMCP_MIN_TRITON_VERSION): it predates "
        "the fixes of NVIDIA security bulletin 5828 (CVE-2026-24207 and others); use it for "
        "development only, or upgrade the node to Triton 2.70.0 or later")
    listed = {n["name"]: n for n in client.get(NODES, headers=writer).json()["items"]}
    assert listed["gpu-a"]["version_warning"] == old["version_warning"]
    assert (listed["gpu-b"]["server_version"], listed["gpu-b"]["version_warning"]) == \
        ("2.70.0", None)

    # A pass that could not read the version keeps the last one read.
    with transaction(session_factory) as session:
        DeploymentRepository(session).record_node_health(nodes["gpu-a"], NodeHealth.DOWN, "x")
    assert client.get(f"{NODES}/gpu-a", headers=writer).json()["server_version"] == "2.51.0"
    # Observations are not configuration: the audit log's snapshots leave them out.
    client.patch(f"{NODES}/gpu-a", headers=writer, json={"labels": {}})
    event = client.get("/api/v1/audit", headers=admin,
                       params={"action": "node.update"}).json()["items"][0]
    assert "server_version" not in event["after"] and "version_warning" not in event["after"]


@pytest.mark.parametrize("version,minimum,expected", [
    (None, "2.70.0", None),
    ("2.70.0", "2.70.0", None),
    ("2.71.1", "2.70.0", None),
    ("2.51.0", "2.70.0", "Triton 2.51.0 is older than the minimum 2.70.0"),
    ("2.9.0", "2.10.0", "Triton 2.9.0 is older than the minimum 2.10.0"),
    ("2.70.0rc1", "2.70.0", "Triton 2.70.0rc1 is older"),
    ("r24.10-custom", "2.70.0", ("Triton reports version 'r24.10-custom', which cannot be "
                                 "compared with the minimum 2.70.0")),
])
def test_version_warning(version: str | None, minimum: str, expected: str | None) -> None:
    warning = version_warning(version, minimum)
    if expected is None:
        assert warning is None
    else:
        assert warning is not None and warning.startswith(expected)


def test_the_minimum_must_be_a_version_number() -> None:
    with pytest.raises(ValidationError, match="'latest' is not a version number; write e.g."):
        Settings(min_triton_version="latest", _env_file=None)  # type: ignore[call-arg]
