"""The deployment lifecycle against a real tritonserver running the real backend and model:
deploy through the API, swap versions under streaming load with no failed request, keep the old
version when the new one fails to load, mark a dead node UNKNOWN, heal after a restart, remove.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import pytest
from fastapi.testclient import TestClient

from control_plane.settings import Settings
from control_plane.triton.llm_client import GrpcStream
from control_plane.triton.runtime import CACHE_DIR
from control_plane.triton.server import TritonServer
from tests.control_plane.deployments.support import (
    ENGINE_ARGS,
    LOAD_TIMEOUT,
    finished,
    generate,
    register,
)

pytestmark = pytest.mark.integration

KEY_VARIABLE = "LLMCP_TEST_TRITON_KEY"
DEPLOYMENT = "/api/v1/models/m/aliases/production/deployments/node-a"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """A Triton node with an empty repository, its repository API locked to a key."""
    key = secrets.token_urlsafe(24)
    os.environ[KEY_VARIABLE] = key
    server = TritonServer(tmp_path_factory.mktemp("empty-repository"), repository_key=key,
                          log_path=CACHE_DIR / "logs" / "test-lifecycle-tritonserver.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, source_roots=[CACHE_DIR / "models"],
                    reconcile_interval_seconds=1.0, _env_file=None)  # type: ignore[call-arg]


def deployment(client: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    body: dict[str, Any] = client.get(DEPLOYMENT, headers=headers).json()
    return body


def wait_state(client: TestClient, headers: dict[str, str], state: str) -> dict[str, Any]:
    deadline = time.monotonic() + LOAD_TIMEOUT
    while time.monotonic() < deadline:
        current = deployment(client, headers)
        if current["state"] == state:
            return current
        time.sleep(0.25)
    raise AssertionError(f"deployment never became {state}: {deployment(client, headers)}")


class StreamingLoad:
    """Clients streaming completions back to back, counting every request that fails."""

    def __init__(self, node: TritonServer, clients: int = 2) -> None:
        self.node, self.stop = node, threading.Event()
        self.completed, self.failures = 0, []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def __enter__(self) -> Self:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)

    def _run(self) -> None:
        stream = GrpcStream(self.node.grpc_url, "m")
        try:
            while not self.stop.is_set():
                stream.submit("Write a sentence about rivers.", {"max_tokens": 24})
                result = stream.wait(120)
                if result.error is not None or not result.final:
                    self.failures.append(result.error or "no final response")
                else:
                    self.completed += 1
        finally:
            stream.close()


# On PostgreSQL only: the story is Triton's (four loads, a kill, a restart, minutes on a CPU),
# and running it again on SQLite tested the same database calls as the API tests do on both.
@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_deploy_swap_fail_heal_remove(client: TestClient, writer: dict[str, str],
                                      node: TritonServer, tmp_path: Path) -> None:
    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    assert client.post("/api/v1/nodes", headers=writer, json={
        "name": "node-a", "http_url": f"http://{node.http_url}", "grpc_url": node.grpc_url,
        "api_key_ref": f"env:{KEY_VARIABLE}"}).status_code == 201
    v1 = register(client, writer, ENGINE_ARGS)
    v2 = register(client, writer, {**ENGINE_ARGS, "max_num_seqs": 4})
    client.put("/api/v1/models/m/aliases/production", headers=writer, json={"version": v1})

    # Deploy: 202, then READY through the repository API (nothing was on the node's disk).
    started = client.put(DEPLOYMENT, headers=writer)
    assert started.json()["deployment"]["state"] == "PENDING"
    assert started.json()["deployment"]["triton_name"] == "m"
    operation = finished(client, writer, started)
    assert operation["status"] == "succeeded", operation
    assert (deployment(client, writer)["state"], deployment(client, writer)["serving_version"]) \
        == ("READY", v1)
    assert generate(node)

    # Swap under streaming load: v2 loads beside v1, traffic moves, v1 drains; nothing fails.
    with StreamingLoad(node) as load:
        time.sleep(2)
        swap = client.put("/api/v1/models/m/aliases/production", headers=writer,
                          json={"version": v2})
        assert swap.json()["kind"] == "alias.swap"
        operation = finished(client, writer, swap)
        time.sleep(2)
    assert operation["status"] == "succeeded", operation
    assert load.failures == [] and load.completed > 0
    assert client.get("/api/v1/models/m/aliases/production", headers=writer).json()["version"] \
        == v2
    assert deployment(client, writer)["serving_version"] == v2

    # A version that fails in the backend's initialize: v2 keeps serving, the alias stays.
    v3 = register(client, writer, {**ENGINE_ARGS, "max_model_len": 10**6})
    with StreamingLoad(node, clients=1) as load:
        failed = finished(client, writer, client.put(
            "/api/v1/models/m/aliases/production", headers=writer, json={"version": v3}))
    assert failed["status"] == "failed"
    assert f"'m/production' stays on version {v2}" in failed["error"]
    assert load.failures == []
    assert client.get("/api/v1/models/m/aliases/production", headers=writer).json()["version"] \
        == v2
    current = deployment(client, writer)
    assert (current["state"], current["serving_version"]) == ("READY", v2)
    assert f"loading version {v3} failed" in current["error"]
    assert generate(node)

    # The node dies: UNKNOWN, not READY. It comes back empty: the reconciler loads v2 again.
    node.kill()
    unknown = wait_state(client, writer, "UNKNOWN")
    assert "did not answer" in unknown["error"]
    status = client.get("/api/v1/nodes/node-a/status", headers=writer).json()
    assert status["health"] == "down"
    node.start()
    healed = wait_state(client, writer, "READY")
    assert healed["serving_version"] == v2
    # The pass that reloaded it records its outcome just after the deployment turns READY.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = client.get("/api/v1/nodes/node-a/status", headers=writer).json()
        if status["last_pass"]["reachable"]:
            break
        time.sleep(0.25)
    assert status["health"] == "up"
    assert status["last_pass"]["reachable"] is True
    assert generate(node)

    # Remove: drained and unloaded, the row stays as a record.
    removed = finished(client, writer, client.delete(DEPLOYMENT, headers=writer))
    assert removed["status"] == "succeeded", removed
    assert deployment(client, writer)["state"] == "UNLOADED"
    listed = client.get("/api/v1/deployments", headers=writer, params={"state": "UNLOADED"})
    assert listed.json()["total"] == 1
