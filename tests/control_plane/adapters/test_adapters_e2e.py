"""LoRA adapters end to end, against a real tritonserver running the real backend and model: an
adapter made by ``make_random_adapter`` registered through the API, loaded on a deployment,
chosen per request with ``lora_name`` (a different greedy answer), unloaded, loaded again, and
loaded back by the reconciler after the node restarts empty.

SQLite only, as the other fault tests: each model load costs ~35 s on this machine (two here,
the deployment and its reload after the restart); the API and its SQL run on both databases in
the other tests of this package.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from control_plane.settings import Settings
from control_plane.triton.llm_client import GrpcStream, StreamResult
from control_plane.triton.runtime import CACHE_DIR
from control_plane.triton.server import TritonServer
from tests.control_plane.adapters.support import LORA_ARGS
from tests.control_plane.deployments.support import (
    ENGINE_ARGS,
    finished,
    register,
    repository_key_in,
    running_nodes,
    wait_until,
)

pytestmark = [pytest.mark.integration,
              pytest.mark.parametrize("backend", ["sqlite"], indirect=True)]

KEY_VARIABLE = "LLMCP_TEST_ADAPTERS_TRITON_KEY"
DEPLOYMENT = "/api/v1/models/m/aliases/production/deployments/node-a"
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def repository_key() -> Iterator[str]:
    yield from repository_key_in(KEY_VARIABLE)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, repository_key: str
         ) -> Iterator[TritonServer]:
    for nodes in running_nodes(tmp_path_factory, ["node-a"], repository_key, "test-adapters"):
        yield nodes["node-a"]


@pytest.fixture(scope="module")
def adapter_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("adapters")


@pytest.fixture
def settings(database_url: str, adapter_root: Path) -> Settings:
    return Settings(database_url=database_url,
                    source_roots=[CACHE_DIR / "models", adapter_root],
                    reconcile_interval_seconds=1.0, _env_file=None)  # type: ignore[call-arg]


def generate(node: TritonServer, lora_name: str | None = None) -> StreamResult:
    sampling: dict[str, Any] = {"max_tokens": 12, "temperature": 0}
    if lora_name is not None:
        sampling["lora_name"] = lora_name
    stream = GrpcStream(node.grpc_url, "m")
    try:
        stream.submit(PROMPT, sampling)
        result = stream.wait(120)
    finally:
        stream.close(cancel=stream.result.done_at is None)
    return result


def text(node: TritonServer, lora_name: str | None = None) -> str:
    result = generate(node, lora_name)
    assert result.error is None and result.final, result
    return result.text


def test_register_load_generate_unload_and_heal(client: TestClient, writer: dict[str, str],
                                                node: TritonServer, adapter_root: Path) -> None:
    from control_plane.demo_adapter import make_random_adapter

    source = make_random_adapter(adapter_root / "random", rank=8, seed=1)
    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    assert client.post("/api/v1/nodes", headers=writer, json={
        "name": "node-a", "http_url": f"http://{node.http_url}", "grpc_url": node.grpc_url,
        "api_key_ref": f"env:{KEY_VARIABLE}"}).status_code == 201
    number = register(client, writer, {**ENGINE_ARGS, **LORA_ARGS})
    registered = client.post(f"/api/v1/models/m/versions/{number}/adapters", headers=writer,
                             json={"name": "random", "source": str(source)})
    assert registered.status_code == 201, registered.text
    assert (registered.json()["rank"], registered.json()["target_modules"]) == \
        (8, ["q_proj", "v_proj"])
    client.put("/api/v1/models/m/aliases/production", headers=writer, json={"version": number})
    started = time.monotonic()
    deployed = client.put(DEPLOYMENT, headers=writer)
    assert finished(client, writer, deployed)["status"] == "succeeded"
    print(f"[adapters] first load: {time.monotonic() - started:.1f} s")
    deployment_id = deployed.json()["deployment"]["id"]
    adapters = f"/api/v1/deployments/{deployment_id}/adapters"
    base = text(node)

    # Load through the API: the operation answers with the engine's adapters.
    loaded = finished(client, writer, client.post(adapters, headers=writer,
                                                  json={"name": "random"}), timeout=120)
    assert loaded["status"] == "succeeded", loaded
    assert [a["name"] for a in loaded["result"]["backend"]["adapters"]] == ["random"]
    (row,) = client.get(adapters, headers=writer).json()
    assert (row["state"], row["error"]) == ("loaded", None)
    (endpoint,) = client.get("/api/v1/routing", headers=writer).json()["models"][0]["endpoints"]
    assert endpoint["adapters"] == ["random"]
    adapted = text(node, "random")
    assert adapted != base, (adapted, base)
    assert text(node) == base

    # Unload: gone from the engine and from the wanted list; a request naming it is refused.
    unloaded = finished(client, writer, client.delete(f"{adapters}/random", headers=writer),
                        timeout=120)
    assert unloaded["status"] == "succeeded", unloaded
    assert unloaded["result"]["backend"]["adapters"] == []
    assert client.get(adapters, headers=writer).json() == []
    assert generate(node, "random").error is not None

    # Loaded again, then the node dies and comes back empty: the reconciler loads the model
    # back and, in the same pass, the adapter into its new engine.
    assert finished(client, writer, client.post(adapters, headers=writer,
                                                json={"name": "random"}), timeout=120
                    )["status"] == "succeeded"
    node.kill()
    wait_until(lambda: client.get(DEPLOYMENT, headers=writer).json()["state"] == "UNKNOWN",
               "the deployment marked UNKNOWN", 60)
    node.start()
    started = time.monotonic()

    def adapter_back() -> bool:
        state = client.get(DEPLOYMENT, headers=writer).json()["state"]
        rows = client.get(adapters, headers=writer).json()
        return state == "READY" and [r["state"] for r in rows] == ["loaded"]

    wait_until(adapter_back, "the model and its adapter loaded back", 300)
    print(f"[adapters] healed after the restart in {time.monotonic() - started:.1f} s")
    (row,) = client.get(adapters, headers=writer).json()
    assert (row["updated_by"], row["error"]) == ("reconciler", None)
    assert text(node, "random") != text(node)

    def left_alone() -> bool:
        # A later pass finds it in the engine and does nothing.
        status = client.get("/api/v1/nodes/node-a/status", headers=writer).json()
        (seen,) = status["last_pass"]["steps"]["adapters"]["deployments"]
        return seen.get("engine") == ["random"] and seen["actions"] == []

    wait_until(left_alone, "a pass that finds the adapter in the engine", 30)
    # The engine outlives this test's database (the node is the module's): leave it empty.
    assert finished(client, writer, client.delete(f"{adapters}/random", headers=writer),
                    timeout=120)["status"] == "succeeded"


def test_adapter_promotions_gate_adapters_and_a_swap_carries_them_to_the_next_version(
        client: TestClient, writer: dict[str, str], node: TritonServer, adapter_root: Path
        ) -> None:
    """Promoted onto the deployments of production: loaded out of the routing table, gated
    through lora_name (and compared with the version without it), then routed. A failing gate
    unloads it again, and production keeps serving throughout. A swap to a version that has an
    adapter of the same name carries it over; one it does not have is failed with the reason."""
    from control_plane.demo_adapter import make_random_adapter
    from tests.control_plane.promotions.support import promote

    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    assert client.post("/api/v1/nodes", headers=writer, json={
        "name": "node-a", "http_url": f"http://{node.http_url}", "grpc_url": node.grpc_url,
        "api_key_ref": f"env:{KEY_VARIABLE}"}).status_code == 201
    number = register(client, writer, {**ENGINE_ARGS, **LORA_ARGS})
    client.put("/api/v1/models/m/aliases/production", headers=writer, json={"version": number})
    deployed = client.put(DEPLOYMENT, headers=writer)
    assert finished(client, writer, deployed)["status"] == "succeeded"
    adapters = f"/api/v1/deployments/{deployed.json()['deployment']['id']}/adapters"
    base = text(node)

    def routed() -> list[str]:
        (model,) = client.get("/api/v1/routing", headers=writer).json()["models"]
        (endpoint,) = model["endpoints"]
        return list(endpoint["adapters"])

    # Gates that the adapter's answer meets (it differs from the base's, so min_identical_share
    # 0 and a generous speed ratio), checked through lora_name on the real engine.
    good = make_random_adapter(adapter_root / "promoted", rank=8, seed=2)
    promotion = promote(client, writer, to="production", adapter={
        "name": "promoted", "source": str(good), "gates": {
            "smoke": [{"name": "answers", "prompt": PROMPT, "max_tokens": 12,
                       "expect": {"non_empty": True, "min_output_tokens": 1}}],
            "compare": {"prompts": [PROMPT], "max_tokens": 12,
                        "min_tokens_per_second_ratio": 0.01}}})
    assert promotion["state"] == "succeeded", promotion["error"]
    assert [s["state"] for s in promotion["steps"]] == ["succeeded"] * 4
    smoke, compare = promotion["gate_results"]
    assert smoke["passed"] and smoke["actual"]["text"] == text(node, "promoted")
    assert smoke["actual"]["text"] != base
    assert compare["passed"] and compare["actual"]["candidate_adapter"] == "promoted"
    assert compare["actual"]["first_difference"] == {"current": base,
                                                     "candidate": smoke["actual"]["text"]}
    assert routed() == ["promoted"]
    (row,) = client.get(adapters, headers=writer).json()
    assert (row["name"], row["state"], row["routed"]) == ("promoted", "loaded", True)

    # A gate the adapter misses: loaded, gated, unloaded again; never routed.
    bad = make_random_adapter(adapter_root / "rejected", rank=8, seed=3)
    failed = promote(client, writer, to="production", adapter={
        "name": "rejected", "source": str(bad), "gates": {
            "smoke": [{"prompt": PROMPT, "max_tokens": 12,
                       "expect": {"contains": ["this text never comes out"]}}]}})
    assert (failed["state"], failed["failed_step"]) == ("failed", "gates_adapter"), \
        failed["error"]
    assert "does not contain 'this text never comes out'" in failed["error"]
    assert "unloaded from 1 deployment(s)" in failed["error"]
    assert [r["name"] for r in client.get(adapters, headers=writer).json()] == ["promoted"]
    assert routed() == ["promoted"]
    assert generate(node, "rejected").error is not None
    assert text(node) == base and text(node, "promoted") == smoke["actual"]["text"]

    # Version 2 has 'promoted' too (same files), not 'kept': the swap carries the first over.
    kept = make_random_adapter(adapter_root / "kept", rank=8, seed=4)
    assert client.post(f"/api/v1/models/m/versions/{number}/adapters", headers=writer,
                       json={"name": "kept", "source": str(kept)}).status_code == 201
    assert finished(client, writer, client.post(adapters, headers=writer,
                                                json={"name": "kept"}), timeout=120
                    )["status"] == "succeeded"
    second = register(client, writer, {**ENGINE_ARGS, **LORA_ARGS})
    assert client.post(f"/api/v1/models/m/versions/{second}/adapters", headers=writer,
                       json={"name": "promoted", "source": str(good)}).status_code == 201
    swapped = client.put("/api/v1/models/m/aliases/production", headers=writer,
                         json={"version": second})
    assert finished(client, writer, swapped)["status"] == "succeeded"

    def carried() -> dict[str, Any] | None:
        rows = {r["name"]: r for r in client.get(adapters, headers=writer).json()}
        done = rows["promoted"]["version"] == second and \
            rows["promoted"]["state"] == "loaded" and rows["kept"]["state"] == "failed"
        return rows if done else None

    rows = wait_until(carried, "'promoted' carried to version 2", 120)
    assert "register it under version" in rows["kept"]["error"]
    (model,) = client.get("/api/v1/routing", headers=writer).json()["models"]
    (endpoint,) = model["endpoints"]
    assert (endpoint["version"], endpoint["adapters"]) == (second, ["promoted"])
    assert text(node, "promoted") == smoke["actual"]["text"]
