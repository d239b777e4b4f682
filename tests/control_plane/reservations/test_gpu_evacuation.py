"""A GPU that reports a fault gives up its engine: against two real tritonserver nodes running the
real backend and model, with simulated inventories (the only stand-in: this machine has no GPU).

GPU 0 of node gpu-a turns unhealthy under the alias's engine: the reconciler loads the alias on
gpu-b, and only once that one is READY drains gpu-a's (the alias serves throughout). Then the GPU
it moved to faults too while no node has a healthy GPU left: the move is reported as stuck, on
the deployment, in GET /evacuations and in the metric, and dropped once the GPU recovers.
SQLite only, on a database of its own (the SQL is shared with every other deployment test);
each load costs ~30 s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from control_plane import migrate
from control_plane.db import make_engine
from control_plane.settings import Settings
from control_plane.triton.runtime import CACHE_DIR
from control_plane.triton.server import TritonServer
from tests.control_plane.deployments.support import (
    ENGINE_ARGS,
    LOAD_TIMEOUT,
    MODEL_SOURCE,
    finished,
    generate,
    repository_key_in,
    running_nodes,
    wait_until,
)

pytestmark = pytest.mark.integration

KEY_VARIABLE = "LLMCP_TEST_EVACUATION_TRITON_KEY"
NODES = ("gpu-a", "gpu-b")
ECC = "uncorrectable ECC errors since the driver loaded: 2 (reset the GPU or replace it)"


class Inventory:
    """The simulated fleet's file: two 24 GiB GPUs per node, each one's health settable."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.health = {(node, index): ("ok", "") for node in NODES for index in range(2)}
        self.write()

    def set(self, node: str, index: int, health: str, detail: str = "") -> None:
        self.health[(node, index)] = (health, detail)
        self.write()

    def write(self) -> None:
        nodes = {node: [{"index": i, "uuid": f"GPU-{node}-{i}", "name": "NVIDIA L4 (simulated)",
                         "memory_total_mib": 24 * 1024, "memory_used_mib": 0,
                         "health": self.health[(node, i)][0],
                         "detail": self.health[(node, i)][1]} for i in range(2)]
                 for node in NODES}
        # Written whole, then renamed: the monitor never reads half a file.
        scratch = self.path.with_suffix(".tmp")
        scratch.write_text(json.dumps({"nodes": nodes}))
        scratch.replace(self.path)


@pytest.fixture(scope="module")
def repository_key() -> Iterator[str]:
    yield from repository_key_in(KEY_VARIABLE)


@pytest.fixture(scope="module")
def triton_nodes(tmp_path_factory: pytest.TempPathFactory, repository_key: str
                 ) -> Iterator[dict[str, TritonServer]]:
    yield from running_nodes(tmp_path_factory, NODES, repository_key, "test-evacuation")


@pytest.fixture(scope="module")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    # A database of its own rather than the session's: the moves are the leader's to make, and
    # in a whole test session another app on the session database can hold its leader lock.
    url = f"sqlite:///{tmp_path_factory.mktemp('evacuation') / 'control_plane.db'}"
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="module")
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, source_roots=[CACHE_DIR / "models"],
                    reconcile_interval_seconds=0.5, gpu_poll_interval_seconds=0.25,
                    _env_file=None)  # type: ignore[call-arg]


def _ok(response: Any, *codes: int) -> Any:
    assert response.status_code in (codes or (200,)), response.text
    return response.json()


def _gauge(client: TestClient, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


def test_an_engine_leaves_a_faulty_gpu_for_healthy_room_and_says_when_there_is_none(
        client: TestClient, writer: dict[str, str], admin: dict[str, str],
        triton_nodes: dict[str, TritonServer],
        tmp_path: Path) -> None:
    http, headers = client, writer
    inventory = Inventory(tmp_path / "inventory.json")
    for name, node in triton_nodes.items():
        _ok(http.post("/api/v1/nodes", headers=headers, json={
            "name": name, "http_url": f"http://{node.http_url}", "grpc_url": node.grpc_url,
            "api_key_ref": f"env:{KEY_VARIABLE}",
            "gpu_inventory": f"simulated:{inventory.path}"}), 201)
    _ok(http.post("/api/v1/models", headers=headers, json={"name": "small"}), 201)
    number = _ok(http.post("/api/v1/models/small/versions", headers=headers, json={
        "source": str(MODEL_SOURCE), "engine_args": ENGINE_ARGS}), 201)["number"]
    _ok(http.put("/api/v1/models/small/aliases/production", headers=headers,
                 json={"version": number}), 200, 201)
    deployed = finished(http, headers, http.put(
        "/api/v1/models/small/aliases/production/deployments/gpu-a", headers=headers))
    assert deployed["status"] == "succeeded", deployed

    def states() -> dict[str, str]:
        items = _ok(http.get("/api/v1/deployments", headers=headers,
                             params={"model": "small"}))["items"]
        return {item["node"]: item["state"] for item in items}

    elections = client.app.state.elections  # type: ignore[attr-defined]
    wait_until(lambda: bool(elections) and elections[-1].is_leader,
               "this app to lead (only the leader moves engines)", 30)

    # The GPU under the engine reports uncorrectable ECC errors.
    inventory.set("gpu-a", 0, "unhealthy", ECC)
    seen_moving: list[dict[str, Any]] = []
    samples: list[dict[str, str]] = []
    # Within pytest's own timeout (600 s), so that a stuck move says what it saw.
    deadline = time.monotonic() + LOAD_TIMEOUT + 150
    while True:
        samples.append(now := states())
        if not seen_moving:
            seen_moving.extend(_ok(http.get("/api/v1/evacuations", headers=headers))["items"])
        if now.get("gpu-a") == "UNLOADED" and now.get("gpu-b") == "READY":
            break
        assert time.monotonic() < deadline, (
            f"the engine did not move off gpu-a: {samples[-3:]}; evacuations "
            f"{_ok(http.get('/api/v1/evacuations', headers=headers))['items']}; "
            f"leading: {elections[-1].is_leader}")
        time.sleep(0.25)
    # The alias served throughout: gpu-a stayed READY until gpu-b was.
    assert all("READY" in sample.values() for sample in samples), samples
    moving = seen_moving[0]
    assert (moving["node"], moving["replacement_node"]) == ("gpu-a", "gpu-b"), moving
    assert "GPU 0 (GPU-gpu-a-0) of node gpu-a is unhealthy" in moving["faults"]
    assert ECC in moving["faults"] and "moving to node gpu-b" in moving["detail"]
    assert generate(triton_nodes["gpu-b"], "small")
    wait_until(lambda: _ok(http.get("/api/v1/evacuations", headers=headers))["items"] == [],
               "the end of the move", 30)
    actions = [(event["actor"], event["action"], event["target"]) for event in _ok(http.get(
        "/api/v1/audit", headers=admin, params={"target_type": "deployment"}))["items"]]
    assert ("gpu-evacuator", "deployment.apply", "small/production@gpu-b") in actions
    assert ("gpu-evacuator", "deployment.remove", "small/production@gpu-a") in actions

    # Now gpu-b's GPU faults too, and gpu-a has no healthy GPU left: nowhere to go.
    booked = [gpu["index"] for gpu in _ok(http.get("/api/v1/nodes/gpu-b/gpus",
                                                   headers=headers))["gpus"]
              if gpu["reservations"]]
    assert len(booked) == 1, booked
    inventory.set("gpu-a", 1, "lost")
    inventory.set("gpu-b", booked[0], "unhealthy", "hardware slowdown (HW slowdown)")

    def stuck() -> dict[str, Any] | None:
        items = _ok(http.get("/api/v1/evacuations", headers=headers))["items"]
        return items[0] if items and "no healthy capacity" in items[0]["detail"] else None

    report = wait_until(stuck, "the report that no node has room", 30)
    assert report["node"] == "gpu-b" and report["replacement_node"] is None, report
    assert "gpu-a GPU 0 [gpu-healthy]" in report["detail"], report
    assert "gpu-a GPU 1 [gpu-healthy]" in report["detail"], report
    deployment = _ok(http.get("/api/v1/models/small/aliases/production/deployments/gpu-b",
                              headers=headers))
    assert deployment["state"] == "READY", deployment  # it keeps serving where it is
    assert deployment["error"].startswith("GPU fault: GPU ") and \
        "no healthy capacity" in deployment["error"], deployment
    assert _gauge(http, "llmcp_gpu_evacuations", state="no_capacity") == 1
    assert _gauge(http, "llmcp_gpu_evacuations", state="moving") == 0

    # The GPU recovers before any room appeared: the move is dropped, the engine stays.
    inventory.set("gpu-b", booked[0], "ok")
    wait_until(lambda: _ok(http.get("/api/v1/evacuations", headers=headers))["items"] == [],
               "the stuck move to be dropped", 30)
    assert states() == {"gpu-a": "UNLOADED", "gpu-b": "READY"}
    assert _gauge(http, "llmcp_gpu_evacuations", state="no_capacity") == 0
