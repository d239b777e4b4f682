"""Placement end to end, against two real tritonserver nodes running the real backend and model.

The nodes have a simulated inventory of 4 GPUs each (this machine has none): placement decides and
books as for real GPUs, Triton gets an instance group it can load without them, and the decision
is read back from Triton's own model-config API. One version is refused for lack of memory, and
placed once an unload frees its GPU. SQLite only: the SQL of booking is tested on both databases
in test_booking.py; each load here costs ~30 s of vLLM start-up.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as httpclient
from fastapi.testclient import TestClient

from control_plane.settings import Settings
from control_plane.triton.runtime import CACHE_DIR
from control_plane.triton.server import TritonServer
from tests.control_plane.deployments.support import (
    ENGINE_ARGS,
    MODEL_SOURCE,
    finished,
    generate,
    repository_key_in,
    running_nodes,
)

pytestmark = [pytest.mark.integration,
              pytest.mark.parametrize("backend", ["sqlite"], indirect=True)]

KEY_VARIABLE = "LLMCP_TEST_PLACEMENT_TRITON_KEY"
GIB = 1024**3
GPU_MIB = 24 * 1024  # 24 GiB GPUs; 5 % headroom leaves 22.8 GiB bookable on each
BIG = 20 * GIB  # two of these never share a GPU


def inventory_file(directory: Path) -> Path:
    nodes = {node: [{"index": i, "uuid": f"GPU-{node}-{i}", "name": "NVIDIA L4 (simulated)",
                     "memory_total_mib": GPU_MIB, "memory_used_mib": 0} for i in range(4)]
             for node in ("gpu-a", "gpu-b")}
    path = directory / "inventory.json"
    path.write_text(json.dumps({"nodes": nodes}))
    return path


@pytest.fixture(scope="module")
def repository_key() -> Iterator[str]:
    yield from repository_key_in(KEY_VARIABLE)


@pytest.fixture(scope="module")
def triton_nodes(tmp_path_factory: pytest.TempPathFactory, repository_key: str
                 ) -> Iterator[dict[str, TritonServer]]:
    yield from running_nodes(tmp_path_factory, ("gpu-a", "gpu-b"), repository_key,
                             "test-placement")


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, source_roots=[CACHE_DIR / "models"],
                    reconcile_interval_seconds=0.5, _env_file=None)  # type: ignore[call-arg]


def _ok(response: Any, *codes: int) -> dict[str, Any]:
    assert response.status_code in (codes or (200,)), response.text
    body: dict[str, Any] = response.json()
    return body


def loaded_config(node: TritonServer, name: str) -> dict[str, Any]:
    """The config Triton itself loaded the model with (its model-config API)."""
    client = httpclient.InferenceServerClient(node.http_url)
    try:
        config: dict[str, Any] = client.get_model_config(name)
        return config
    finally:
        client.close()


def placement_of(config: dict[str, Any]) -> tuple[list[tuple[str, int]], dict[str, str]]:
    groups = [(group["kind"], group["count"]) for group in config["instance_group"]]
    parameters = {key: value["string_value"] for key, value in config["parameters"].items()
                  if key.startswith(("placement", "gpu_memory"))}
    return groups, parameters


def test_versions_are_placed_refused_and_placed_after_an_unload(
        client: TestClient, writer: dict[str, str], triton_nodes: dict[str, TritonServer],
        tmp_path: Path) -> None:
    http, headers = client, writer
    inventory = inventory_file(tmp_path)
    for name, node in triton_nodes.items():
        _ok(http.post("/api/v1/nodes", headers=headers, json={
            "name": name, "http_url": f"http://{node.http_url}", "grpc_url": node.grpc_url,
            "api_key_ref": f"env:{KEY_VARIABLE}", "gpu_inventory": f"simulated:{inventory}",
            # The operator keeps three of gpu-b's GPUs out of placement.
            "excluded_gpus": ["GPU-gpu-b-0", "GPU-gpu-b-1", "GPU-gpu-b-2"]
            if name == "gpu-b" else []}), 201)

    def add(model: str, alias: str, resources: dict[str, Any]) -> int:
        _ok(http.post("/api/v1/models", headers=headers, json={"name": model}), 201)
        number: int = _ok(http.post(f"/api/v1/models/{model}/versions", headers=headers, json={
            "source": str(MODEL_SOURCE), "engine_args": ENGINE_ARGS,
            "resources": resources}), 201)["number"]
        _ok(http.put(f"/api/v1/models/{model}/aliases/{alias}", headers=headers,
                     json={"version": number}), 200, 201)
        return number

    def deploy(model: str, alias: str, node: str) -> dict[str, Any]:
        return finished(http, headers, http.put(
            f"/api/v1/models/{model}/aliases/{alias}/deployments/{node}", headers=headers))

    add("small", "production", {})  # sized by the estimate from its files
    add("big", "production", {"memory_bytes": BIG})
    add("big2", "production", {"memory_bytes": BIG})

    # The estimate: SmolLM2's weights, a KV cache of 4 x 512 tokens and the per-GPU overhead.
    small = _ok(http.post("/api/v1/placements/preview", headers=headers, json={
        "model": "small", "alias": "production", "node": "gpu-a"}))
    estimate = small["demand"]["estimate"]
    assert small["decision"] == "placed"
    assert 0 < estimate["weights_bytes"] < estimate["total_bytes"] < 3 * GIB
    assert estimate["kv_cache_bytes"] > 0

    # small on gpu-a: best fit on identical GPUs takes the first.
    assert deploy("small", "production", "gpu-a")["status"] == "succeeded"
    groups, parameters = placement_of(loaded_config(triton_nodes["gpu-a"], "small"))
    assert groups == [("KIND_MODEL", 1)]
    assert parameters["placement_gpus"] == "0" and parameters["placement_simulated"] == "true"
    utilization = float(parameters["gpu_memory_utilization"])
    assert utilization * GPU_MIB * 1024**2 >= estimate["per_gpu_bytes"]
    assert generate(triton_nodes["gpu-a"], "small")

    # big2 on gpu-a would share GPU 0 with small (best fit: the fullest GPU it fits on).
    preview = _ok(http.post("/api/v1/placements/preview", headers=headers, json={
        "model": "big2", "alias": "production", "node": "gpu-a"}))
    assert preview["placement"]["engines"] == [[0]]

    # big on gpu-b: the only GPU the operator left there is 3.
    assert deploy("big", "production", "gpu-b")["status"] == "succeeded"
    groups, parameters = placement_of(loaded_config(triton_nodes["gpu-b"], "big"))
    assert parameters["placement_gpus"] == "3"
    gpus = _ok(http.get("/api/v1/nodes/gpu-b/gpus", headers=headers))["gpus"]
    booked = {gpu["index"]: gpu["booked_bytes"] for gpu in gpus}
    assert booked[3] >= BIG and booked[0] == booked[1] == booked[2] == 0
    assert [gpu["excluded"] for gpu in gpus] == [True, True, True, False]
    assert gpus[3]["reservations"][0]["model"] == "big"

    # big2 on gpu-b does not fit: refused before anything reaches the node, every GPU says why.
    refused = deploy("big2", "production", "gpu-b")
    assert refused["status"] == "failed"
    assert "gpu-b GPU 3 [fits-memory]" in refused["error"], refused["error"]
    for index in range(3):
        assert f"gpu-b GPU {index} [gpu-not-excluded]" in refused["error"], refused["error"]
    deployment = _ok(http.get("/api/v1/models/big2/aliases/production/deployments/gpu-b",
                              headers=headers))
    assert deployment["state"] == "FAILED" and "fits-memory" in deployment["error"]
    client_b = httpclient.InferenceServerClient(triton_nodes["gpu-b"].http_url)
    assert not client_b.is_model_ready("big2")

    # Unloading big frees GPU 3, and big2 is placed there.
    removed = finished(http, headers, http.delete(
        "/api/v1/models/big/aliases/production/deployments/gpu-b", headers=headers))
    assert removed["status"] == "succeeded", removed
    gpus = _ok(http.get("/api/v1/nodes/gpu-b/gpus", headers=headers))["gpus"]
    assert gpus[3]["booked_bytes"] == 0 and gpus[3]["reservations"] == []
    assert deploy("big2", "production", "gpu-b")["status"] == "succeeded"
    groups, parameters = placement_of(loaded_config(triton_nodes["gpu-b"], "big2"))
    assert parameters["placement_gpus"] == "3"
    assert generate(triton_nodes["gpu-b"], "big2")
    client_b.close()
