"""Faults in the deployment lifecycle, against real tritonserver nodes running the real backend and
model: one model on two nodes with one of them killed and restarted, a node killed in the middle
of a load, configs the node refuses, and the control plane itself killed mid-operation.

These run on SQLite only: the faults are in the nodes, the operation runner and the reconciler,
not in SQL, and each costs vLLM loads of ~30 s; test_lifecycle.py runs the main path on both
databases. The in-process tests reconcile every 0.5 s; the control-plane restart test runs
``llm-control-plane serve`` as separate processes (reconciling every second) on a SQLite file.
The measured times are printed (pytest -s).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session, sessionmaker

from control_plane.deployments.actuator import ready_versions
from control_plane.deployments.orm import Deployment, NodeStatus
from control_plane.nodes.orm import TritonNode
from control_plane.settings import Settings
from control_plane.triton.grpc_control import TritonGrpcControl
from control_plane.triton.runtime import CACHE_DIR
from control_plane.triton.server import TritonServer
from tests.control_plane.deployments.support import (
    ENGINE_ARGS,
    LOAD_TIMEOUT,
    ControlPlane,
    Http,
    finished,
    generate,
    register,
    repository_key_in,
    running_nodes,
    wait_until,
)

pytestmark = pytest.mark.integration
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

KEY_VARIABLE = "LLMCP_TEST_FAULTS_TRITON_KEY"
NODE_NAMES = ("node-a", "node-b")
# A path the node does not have: only the node can tell, so our own checks let it through.
MISSING_ENV = "/nonexistent/llm-faults-env.tar.gz"
# Configs that pass the control plane's checks and that the node refuses, by model name.
REFUSED_CONFIGS: dict[str, dict[str, Any]] = {
    # Triton's Python backend refuses it and says why.
    "bad-env": {"parameters": {"EXECUTION_ENV_PATH": {"string_value": MISSING_ENV}}},
    # The node has no such repository agent: Triton answers only "failed to poll from model
    # repository" and names the cause in its log.
    "bad-agent": {"model_repository_agents": {"agents": [{"name": "checksum"}]}},
}


def note(message: str) -> None:
    print(f"[faults] {message}", flush=True)


# -- nodes -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def repository_key() -> Iterator[str]:
    """The key both nodes lock their repository API to; the control plane reads it from env."""
    yield from repository_key_in(KEY_VARIABLE)


@pytest.fixture(scope="module")
def triton_nodes(tmp_path_factory: pytest.TempPathFactory, repository_key: str
                 ) -> Iterator[dict[str, TritonServer]]:
    """Two tritonserver nodes with empty repositories, shared by the module's tests."""
    yield from running_nodes(tmp_path_factory, NODE_NAMES, repository_key, "test-faults")


def served(node: TritonServer, key: str) -> dict[str, set[int]]:
    """What the node serves: each model name with its ready versions."""
    with TritonGrpcControl(node.grpc_url, repository_key=key) as control:
        return dict(ready_versions(control))


def empty(node: TritonServer, key: str) -> None:
    """Start ``node`` if it is down, and unload whatever it serves."""
    if not node.is_live():
        node.kill()
        node.start()
    with TritonGrpcControl(node.grpc_url, repository_key=key) as control:
        for name in ready_versions(control):
            control.unload(name)
        wait_until(lambda: not ready_versions(control), f"emptying {node.http_url}", 60)


@pytest.fixture
def nodes(triton_nodes: dict[str, TritonServer], repository_key: str
          ) -> dict[str, TritonServer]:
    """The module's nodes, running and serving nothing, whatever an earlier test left there."""
    for node in triton_nodes.values():
        empty(node, repository_key)
    return triton_nodes


# -- the API -----------------------------------------------------------------------------------


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, source_roots=[CACHE_DIR / "models"],
                    reconcile_interval_seconds=0.5, _env_file=None)  # type: ignore[call-arg]


def deployment_path(model: str, node: str) -> str:
    return f"/api/v1/models/{model}/aliases/production/deployments/{node}"


def get_deployment(http: Http, headers: dict[str, str], model: str, node: str
                   ) -> dict[str, Any]:
    response = http.get(deployment_path(model, node), headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_state(http: Http, headers: dict[str, str], model: str, node: str, state: str,
               timeout: float = LOAD_TIMEOUT, interval: float = 0.25) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        current = get_deployment(http, headers, model, node)
        return current if current["state"] == state else None

    try:
        return wait_until(reached, f"'{model}' on {node} becoming {state}", timeout, interval)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {get_deployment(http, headers, model, node)}") from None


def add_node(http: Http, headers: dict[str, str], name: str, node: TritonServer) -> None:
    created = http.post("/api/v1/nodes", headers=headers, json={
        "name": name, "http_url": f"http://{node.http_url}", "grpc_url": node.grpc_url,
        "api_key_ref": f"env:{KEY_VARIABLE}"})
    assert created.status_code == 201, created.text


def add_model(http: Http, headers: dict[str, str], name: str,
              triton_config: dict[str, Any] | None = None) -> int:
    """A model with one version that alias ``production`` names; returns the version."""
    created = http.post("/api/v1/models", headers=headers, json={"name": name})
    assert created.status_code == 201, created.text
    version = register(http, headers, ENGINE_ARGS, model=name, triton_config=triton_config)
    moved = http.put(f"/api/v1/models/{name}/aliases/production", headers=headers,
                     json={"version": version})
    assert moved.status_code in (200, 201), moved.text
    return version


# -- several nodes -----------------------------------------------------------------------------


@sqlite_only
def test_one_model_on_two_nodes_survives_losing_one(
        client: TestClient, writer: dict[str, str], nodes: dict[str, TritonServer],
        repository_key: str) -> None:
    for name, node in nodes.items():
        add_node(client, writer, name, node)
    version = add_model(client, writer, "m")
    # A second model on node-a alone: after its restart both come back side by side.
    second = add_model(client, writer, "m2")

    began = time.monotonic()
    started = [client.put(deployment_path("m", name), headers=writer) for name in nodes]
    started.append(client.put(deployment_path("m2", "node-a"), headers=writer))
    for operation in [finished(client, writer, response) for response in started]:
        assert operation["status"] == "succeeded", operation
    note(f"two nodes: both loaded in {time.monotonic() - began:.1f} s")
    for name, node in nodes.items():
        current = get_deployment(client, writer, "m", name)
        assert (current["state"], current["serving_version"]) == ("READY", version)
        assert generate(node)

    # node-a dies: its deployment is UNKNOWN, not READY; node-b goes on serving.
    killed = time.monotonic()
    nodes["node-a"].kill()
    unknown = wait_state(client, writer, "m", "node-a", "UNKNOWN")
    note(f"two nodes: node-a UNKNOWN {time.monotonic() - killed:.1f} s after kill -9")
    assert "node 'node-a' did not answer" in unknown["error"]
    assert get_deployment(client, writer, "m", "node-b")["state"] == "READY"
    ready = client.get("/api/v1/deployments", headers=writer, params={"state": "READY"}).json()
    assert [item["node"] for item in ready["items"]] == ["node-b"]
    assert generate(nodes["node-b"])

    # node-a comes back on its ports, empty: the reconciler loads both models there again, at
    # once (LLMCP_NODE_PARALLEL_LOADS): they are seen LOADING together.
    restarted = time.monotonic()
    nodes["node-a"].start()
    seen: list[tuple[str, str]] = []

    def both_ready() -> bool:
        states = (get_deployment(client, writer, "m", "node-a")["state"],
                  get_deployment(client, writer, "m2", "node-a")["state"])
        seen.append(states)
        return states == ("READY", "READY")

    wait_until(both_ready, "both models READY again on node-a", LOAD_TIMEOUT)
    note(f"two nodes: node-a's two models READY {time.monotonic() - restarted:.1f} s after its "
         "restart")
    assert ("LOADING", "LOADING") in seen, seen
    healed = get_deployment(client, writer, "m", "node-a")
    assert (healed["serving_version"], healed["error"]) == (version, None)
    assert healed["updated_by"] == "reconciler"
    assert served(nodes["node-a"], repository_key) == {"m": {version}, "m2": {second}}
    assert generate(nodes["node-a"])
    assert generate(nodes["node-a"], "m2")

    listed = client.get("/api/v1/deployments", headers=writer).json()
    assert listed["total"] == 3
    assert sorted((item["model"], item["node"], item["state"], item["serving_version"])
                  for item in listed["items"]) == [("m", "node-a", "READY", version),
                                                   ("m", "node-b", "READY", version),
                                                   ("m2", "node-a", "READY", second)]


# -- a node lost in the middle of a load -------------------------------------------------------


@sqlite_only
def test_node_killed_during_a_load(client: TestClient, writer: dict[str, str],
                                   nodes: dict[str, TritonServer], repository_key: str) -> None:
    node = nodes["node-a"]
    add_node(client, writer, "node-a", node)
    version = add_model(client, writer, "m")

    started = client.put(deployment_path("m", "node-a"), headers=writer)
    wait_state(client, writer, "m", "node-a", "LOADING", timeout=30, interval=0.05)
    # Give the load time to reach Triton (it takes ~30 s there, so it is still going).
    time.sleep(2)
    node.kill()
    operation = finished(client, writer, started)
    assert operation["status"] == "failed", operation
    note(f"node lost mid-load: operation error: {operation['error']}")
    assert operation["error"].startswith(
        f"node 'node-a' did not answer during the load of version {version} as 'm'")
    lost = get_deployment(client, writer, "m", "node-a")
    assert lost["state"] == "UNKNOWN", lost
    assert lost["serving_version"] is None
    assert "node 'node-a' did not answer" in lost["error"]

    restarted = time.monotonic()
    node.start()
    healed = wait_state(client, writer, "m", "node-a", "READY")
    note(f"node lost mid-load: READY {time.monotonic() - restarted:.1f} s after the restart")
    assert (healed["serving_version"], healed["error"]) == (version, None)
    assert served(node, repository_key) == {"m": {version}}
    assert generate(node)


# -- configs the node refuses ------------------------------------------------------------------


def last_pass(factory: sessionmaker[Session], node: str) -> dict[str, Any]:
    """The reconciler's record of its last pass on ``node`` (NodeStatus.last_pass)."""
    with factory() as session:
        status = session.scalars(select(NodeStatus).join(TritonNode, TritonNode.id ==
                                                         NodeStatus.node_id)
                                 .where(TritonNode.name == node)).one()
        assert status.last_pass is not None
        return dict(status.last_pass)


@sqlite_only
def test_configs_the_node_refuses_fail_once(client: TestClient, writer: dict[str, str],
                                            nodes: dict[str, TritonServer],
                                            session_factory: sessionmaker[Session]) -> None:
    add_node(client, writer, "node-b", nodes["node-b"])
    versions = {name: add_model(client, writer, name, config)
                for name, config in REFUSED_CONFIGS.items()}
    operations = {name: finished(client, writer,
                                 client.put(deployment_path(name, "node-b"), headers=writer))
                  for name in REFUSED_CONFIGS}
    for name, operation in operations.items():
        note(f"refused config {name}: {operation['error']}")
        assert operation["status"] == "failed", operation
        assert f"did not load as '{name}' on node 'node-b'" in operation["error"]
    # Triton's own reason reaches the operation and the deployment.
    assert f"Failed to get the canonical path for {MISSING_ENV}" in operations["bad-env"]["error"]
    # Where Triton gives none, the error says where to look.
    assert "failed to poll from model repository" in operations["bad-agent"]["error"]
    assert "the node's log names the cause" in operations["bad-agent"]["error"]
    failed = {name: get_deployment(client, writer, name, "node-b") for name in REFUSED_CONFIGS}
    for name, current in failed.items():
        assert (current["state"], current["serving_version"]) == ("FAILED", None), current
        assert current["error"].startswith(f"loading version {versions[name]} failed: ")
        assert operations[name]["error"].endswith(current["error"].split(": ", 1)[1])

    # The reconciler does not retry them in a loop: several passes later nothing has changed,
    # and its plan says why it leaves them alone.
    reconciler = client.app.state.reconciler  # type: ignore[attr-defined]
    passes = reconciler.passes
    wait_until(lambda: reconciler.passes >= passes + 4, "four reconcile passes", 30, 0.1)
    for name, before in failed.items():
        assert get_deployment(client, writer, name, "node-b") == before
    with session_factory() as session:
        ids = dict(session.execute(select(Deployment.triton_name, Deployment.id)).all())
    report = last_pass(session_factory, "node-b")
    assert report["reachable"] and report["errors"] == []
    assert report["plan"]["actions"] == []
    assert sorted(map(tuple, report["plan"]["skipped"])) == sorted(
        (ids[name], "its last load failed; apply it again") for name in REFUSED_CONFIGS)

    # Applying it again is the retry: one more load, refused for the same reason.
    again = finished(client, writer, client.put(deployment_path("bad-env", "node-b"),
                                                headers=writer))
    assert again["status"] == "failed"
    assert f"Failed to get the canonical path for {MISSING_ENV}" in again["error"]
    assert get_deployment(client, writer, "bad-env", "node-b")["state"] == "FAILED"


# -- the control plane killed in the middle of an operation ------------------------------------


@pytest.fixture
def control_plane(tmp_path: Path) -> Iterator[ControlPlane]:
    control_plane = ControlPlane(tmp_path)
    yield control_plane
    control_plane.stop()


def node_report(database_url: str, node: str) -> dict[str, Any]:
    engine = create_engine(database_url)
    try:
        return last_pass(sessionmaker(engine), node)
    finally:
        engine.dispose()


def interrupted(http: httpx.Client, location: str) -> dict[str, Any]:
    """The operation once it is failed as interrupted (within a lease and a check of it)."""
    def ended() -> dict[str, Any] | None:
        operation: dict[str, Any] = http.get(location).json()
        return operation if operation["status"] != "running" else None

    operation = wait_until(ended, "the killed process's operation to be failed", 60, 0.5)
    assert operation["status"] == "failed", operation
    assert operation["error"].startswith("interrupted:"), operation
    return operation


def test_control_plane_killed_mid_operation(control_plane: ControlPlane,
                                            nodes: dict[str, TritonServer],
                                            repository_key: str) -> None:
    node = nodes["node-a"]
    http = control_plane.start()
    add_node(http, {}, "node-a", node)
    v1 = add_model(http, {}, "m")
    v2 = register(http, {}, {**ENGINE_ARGS, "max_num_seqs": 4})

    # 1. Killed while a deployment loads; the node finishes the load on its own.
    started = http.put(deployment_path("m", "node-a"))
    assert started.status_code == 202, started.text
    wait_state(http, {}, "m", "node-a", "LOADING", timeout=30, interval=0.05)
    time.sleep(2)
    control_plane.kill()
    http.close()
    restarted = time.monotonic()
    http = control_plane.start()
    note(f"control plane restart: a new process answers in {time.monotonic() - restarted:.1f} s")
    # The killed process's claim lapses (LLMCP_OPERATION_LEASE_SECONDS) and the new process
    # fails the operation as interrupted.
    operation = interrupted(http, started.headers["Location"])
    ready = wait_state(http, {}, "m", "node-a", "READY")
    note(f"control plane restart mid-apply: READY {time.monotonic() - restarted:.1f} s after "
         "the new process started")
    assert (ready["serving_version"], ready["error"]) == (v1, None)
    assert served(node, repository_key) == {"m": {v1}}
    assert generate(node)

    # 2. Killed while a swap loads v2, and the node restarts meanwhile: nothing finishes that
    # load. The swap is failed as interrupted, the alias stays on v1, and the reconciler takes
    # the abandoned LOADING deployment over and loads v1 again.
    swap = http.put("/api/v1/models/m/aliases/production", json={"version": v2})
    assert swap.status_code == 202, swap.text
    wait_state(http, {}, "m", "node-a", "LOADING", timeout=30, interval=0.05)
    time.sleep(2)
    control_plane.kill()
    http.close()
    node.kill()
    node.start()
    restarted = time.monotonic()
    http = control_plane.start()
    operation = interrupted(http, swap.headers["Location"])
    assert operation["kind"] == "alias.swap", operation
    assert http.get("/api/v1/models/m/aliases/production").json()["version"] == v1
    healed = wait_state(http, {}, "m", "node-a", "READY")
    note(f"control plane and node restart mid-swap: READY {time.monotonic() - restarted:.1f} s "
         "after the new process started")
    assert (healed["serving_version"], healed["error"]) == (v1, None)
    assert served(node, repository_key) == {"m": {v1}}
    assert generate(node)

    # Desired and observed agree: the reconciler's next pass finds nothing to do.
    def quiet_pass() -> dict[str, Any] | None:
        report = node_report(control_plane.database_url, "node-a")
        return report if report["plan"] and not report["plan"]["actions"] else None

    report = wait_until(quiet_pass, "a reconcile pass with nothing to do", 30)
    assert report["errors"] == [] and report["plan"]["skipped"] == []
    running = http.get("/api/v1/operations", params={"status": "running"}).json()
    assert running["total"] == 0
    http.close()
