"""Placement through the API and the booking table, on SQLite and PostgreSQL, without Triton: the
preview, a node's GPUs, refusals and their reasons, and two bookings at once on one GPU."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from control_plane.deployments.orm import Deployment
from control_plane.errors import PlacementRefused
from control_plane.gpus.monitor import GpuMonitor
from control_plane.gpus.static import StaticInventory
from control_plane.placement.model import Strategy
from control_plane.registry.orm import Model
from control_plane.reservations.orm import GpuReservation
from control_plane.reservations.placer import Booking, Placer

GIB = 1024**3


def _ok(response: Any, *codes: int) -> Any:
    assert response.status_code in (codes or (200,)), response.text
    return response.json()


def inventory(directory: Path, nodes: dict[str, list[dict[str, Any]]]) -> Path:
    path = directory / "inventory.json"
    path.write_text(json.dumps({"nodes": nodes}))
    return path


def gpus(node: str, count: int, mib: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"index": i, "uuid": f"GPU-{node}-{i}", "name": f"GPU {mib} MiB",
             "memory_total_mib": mib, "memory_used_mib": 0, **extra} for i in range(count)]


def add_node(client: TestClient, headers: dict[str, str], name: str, spec: str | None,
             excluded: list[str] | None = None) -> None:
    _ok(client.post("/api/v1/nodes", headers=headers, json={
        "name": name, "http_url": "http://127.0.0.1:9", "grpc_url": "127.0.0.1:9",
        "gpu_inventory": spec, "excluded_gpus": excluded or []}), 201)


def add_version(client: TestClient, headers: dict[str, str], model: str,
                resources: dict[str, Any], engine_args: dict[str, Any] | None = None) -> int:
    if client.get(f"/api/v1/models/{model}", headers=headers).status_code == 404:
        _ok(client.post("/api/v1/models", headers=headers, json={"name": model}), 201)
    body = _ok(client.post(f"/api/v1/models/{model}/versions", headers=headers, json={
        "source": f"s3://bucket/{model}", "resources": resources,
        "engine_args": engine_args or {"max_model_len": 4096}}), 201)
    number: int = body["number"]
    return number


def preview(client: TestClient, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    result: dict[str, Any] = _ok(client.post("/api/v1/placements/preview", headers=headers,
                                             json=body))
    return result


def rules(result: dict[str, Any]) -> set[tuple[str, int | None, str]]:
    return {(v["node"], v["gpu_index"], v["rule"]) for v in result["refusal"]["verdicts"]}


def test_tensor_parallel_engine_is_placed_on_one_node_or_refused_with_every_reason(
        client: TestClient, writer: dict[str, str], tmp_path: Path) -> None:
    path = inventory(tmp_path, {"small": gpus("small", 4, 24 * 1024),
                                "large": gpus("large", 2, 80 * 1024)})
    add_node(client, writer, "small", f"static:{path}")
    add_node(client, writer, "large", f"static:{path}", excluded=["GPU-large-1"])
    add_version(client, writer, "tp", {"memory_bytes": 30 * GIB},
                {"max_model_len": 4096, "tensor_parallel_size": 2})

    refused = preview(client, writer, model="tp", version=1)
    assert refused["decision"] == "refused" and refused["placement"] is None
    found = rules(refused)
    # 30 GiB does not fit a 24 GiB GPU; the large node has one GPU left, and needs two.
    assert {("small", i, "fits-memory") for i in range(4)} <= found
    assert ("large", 1, "gpu-not-excluded") in found
    assert any(node == "large" and index is None and rule == "tensor-parallel"
               for node, index, rule in found), found

    _ok(client.patch("/api/v1/nodes/large", headers=writer, json={"excluded_gpus": []}))
    placed = preview(client, writer, model="tp", version=1)
    assert placed["decision"] == "placed", placed
    placement = placed["placement"]
    assert (placement["node"], placement["engines"]) == ("large", [[0, 1]])
    assert placement["instance_group"] == [{"count": 1, "kind": "KIND_MODEL"}]
    utilization = placement["gpu_memory_utilization"]
    assert utilization * 80 * 1024**3 >= 30 * GIB
    assert [b["gpu_index"] for b in placement["bookings"]] == [0, 1]
    assert placed["demand"]["tensor_parallel_size"] == 2


def test_best_fit_packs_and_spread_balances(client: TestClient, writer: dict[str, str],
                                           tmp_path: Path, app: FastAPI) -> None:
    path = inventory(tmp_path, {"n": gpus("n", 2, 48 * 1024)})
    add_node(client, writer, "n", f"static:{path}")
    add_version(client, writer, "one", {"memory_bytes": 10 * GIB})
    add_version(client, writer, "two", {"memory_bytes": 10 * GIB})
    first = book(app, client, writer, "one", "n")
    assert first.placement.engines == ((0,),)
    packed = preview(client, writer, model="two", version=1, node="n")
    spread = preview(client, writer, model="two", version=1, node="n", strategy="spread")
    assert packed["placement"]["engines"] == [[0]]
    assert spread["placement"]["engines"] == [[1]]
    assert packed["placement"]["instance_group"] == [
        {"count": 1, "kind": "KIND_GPU", "gpus": [0]}]


def test_node_gpus_show_bookings_and_errors_never_as_free_memory(
        client: TestClient, writer: dict[str, str], tmp_path: Path, app: FastAPI) -> None:
    path = inventory(tmp_path, {"n": [*gpus("n", 1, 24 * 1024),
                                      {"index": 1, "uuid": "GPU-n-1", "name": "lost one",
                                       "health": "lost"}]})
    add_node(client, writer, "n", f"static:{path}")
    add_node(client, writer, "gone", f"static:{tmp_path / 'missing.yaml'}")
    add_node(client, writer, "cpu-only", None)
    add_version(client, writer, "m", {"memory_bytes": 8 * GIB})
    book(app, client, writer, "m", "n")

    node = _ok(client.get("/api/v1/nodes/n/gpus", headers=writer))
    assert node["error"] is None and len(node["gpus"]) == 2
    healthy, lost = node["gpus"]
    assert healthy["booked_bytes"] >= 8 * GIB and healthy["reservations"][0]["model"] == "m"
    assert healthy["reservations"][0]["active"] is False
    assert lost["health"] == "lost" and lost["memory_free_bytes"] is None
    assert lost["bookable_bytes"] is None

    gone = _ok(client.get("/api/v1/nodes/gone/gpus", headers=writer))
    assert gone["gpus"] == [] and "missing.yaml" in gone["error"]
    cpu = _ok(client.get("/api/v1/nodes/cpu-only/gpus", headers=writer))
    assert cpu["gpus"] == [] and "no GPU inventory" in cpu["error"]

    refused = preview(client, writer, model="m", version=1, node="gone")
    assert ("gone", None, "inventory-readable") in rules(refused)
    add_version(client, writer, "m", {"memory_bytes": 20 * GIB})
    refused = preview(client, writer, model="m", version=2, node="n")
    assert {("n", 0, "fits-memory"), ("n", 1, "gpu-healthy")} <= rules(refused)


def test_version_without_estimate_is_refused_on_gpus_and_placed_on_the_cpu(
        client: TestClient, writer: dict[str, str], tmp_path: Path) -> None:
    path = inventory(tmp_path, {"n": gpus("n", 1, 24 * 1024)})
    add_node(client, writer, "n", f"static:{path}")
    add_node(client, writer, "cpu-only", None)
    add_version(client, writer, "remote", {})
    refused = preview(client, writer, model="remote", version=1, node="n")
    assert rules(refused) == {("n", None, "memory-estimate")}
    assert "resources.memory_bytes" in refused["refusal"]["verdicts"][0]["detail"]
    assert refused["demand"]["estimate_unavailable"]

    # device auto on a node without GPUs: the CPU, as Triton's KIND_AUTO would.
    cpu = preview(client, writer, model="remote", version=1, node="cpu-only")
    assert cpu["placement"]["device"] == "cpu"
    assert cpu["placement"]["instance_group"] == [{"count": 1, "kind": "KIND_CPU"}]
    add_version(client, writer, "remote", {"device": "cpu", "replicas": 2})
    forced = preview(client, writer, model="remote", version=2, node="n")
    assert forced["placement"]["instance_group"] == [{"count": 2, "kind": "KIND_CPU"}]


def test_replicas_of_a_tensor_parallel_version_are_refused_at_registration(
        client: TestClient, writer: dict[str, str]) -> None:
    _ok(client.post("/api/v1/models", headers=writer, json={"name": "m"}), 201)
    response = client.post("/api/v1/models/m/versions", headers=writer, json={
        "source": "s3://bucket/m", "engine_args": {"tensor_parallel_size": 2},
        "resources": {"replicas": 2}})
    assert response.status_code == 422
    assert "replicas" in response.json()["detail"]


# -- booking -----------------------------------------------------------------------------------


def deployment_row(session_factory: sessionmaker[Session], model: str, node: str) -> int:
    """A deployment of alias production (the PUT would also start loading it on a node)."""
    from control_plane.nodes.orm import TritonNode
    with session_factory() as session:
        model_id = session.scalar(select(Model.id).where(Model.name == model))
        node_id = session.scalar(select(TritonNode.id).where(TritonNode.name == node))
        deployment = Deployment(model_id=model_id, alias="production", node_id=node_id,
                                triton_name=model, updated_by="test")
        session.add(deployment)
        session.commit()
        return deployment.id


def book(app: FastAPI, client: TestClient, writer: dict[str, str], model: str, node: str
         ) -> Booking:
    _ok(client.put(f"/api/v1/models/{model}/aliases/production", headers=writer,
                   json={"version": 1}), 200, 201)
    placer: Placer = app.state.placer
    return placer.book(deployment_row(app.state.session_factory, model, node), 1)


def test_two_bookings_at_once_never_double_book_a_gpu(
        client: TestClient, writer: dict[str, str], tmp_path: Path, app: FastAPI) -> None:
    path = inventory(tmp_path, {"n": gpus("n", 1, 24 * 1024)})
    add_node(client, writer, "n", f"simulated:{path}")
    placer: Placer = app.state.placer
    factory: sessionmaker[Session] = app.state.session_factory
    rounds = 5
    for round_ in range(rounds):
        ids = []
        for model in (f"a{round_}", f"b{round_}"):
            add_version(client, writer, model, {"memory_bytes": 15 * GIB})
            _ok(client.put(f"/api/v1/models/{model}/aliases/production", headers=writer,
                           json={"version": 1}), 200, 201)
            ids.append(deployment_row(factory, model, "n"))
        barrier = threading.Barrier(2)
        outcomes: list[object] = []

        def race(deployment_id: int, barrier: threading.Barrier = barrier,
                 outcomes: list[object] = outcomes) -> None:
            barrier.wait()
            try:
                outcomes.append(placer.book(deployment_id, 1))
            except PlacementRefused as exc:
                outcomes.append(exc)

        threads = [threading.Thread(target=race, args=(i,)) for i in ids]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        booked = [o for o in outcomes if isinstance(o, Booking)]
        refused = [o for o in outcomes if isinstance(o, PlacementRefused)]
        assert (len(booked), len(refused)) == (1, 1), outcomes
        assert "fits-memory" in refused[0].message
        with factory() as session:
            assert session.scalar(select(func.count()).select_from(GpuReservation)) == 1
        # The next round starts from a free GPU.
        for deployment_id in ids:
            placer.release(deployment_id)


def test_a_booking_is_reused_and_released(client: TestClient, writer: dict[str, str],
                                          tmp_path: Path, app: FastAPI) -> None:
    path = inventory(tmp_path, {"n": gpus("n", 2, 24 * 1024)})
    add_node(client, writer, "n", f"simulated:{path}")
    add_version(client, writer, "m", {"memory_bytes": 15 * GIB})
    first = book(app, client, writer, "m", "n")
    placer: Placer = app.state.placer
    factory: sessionmaker[Session] = app.state.session_factory
    with factory() as session:
        deployment_id = session.scalar(select(GpuReservation.deployment_id))
    assert deployment_id is not None
    # A second load of the same version (a retry, a restarted node) keeps its GPU.
    again = placer.book(deployment_id, 1)
    assert again.placement.engines == first.placement.engines
    assert again.placement.gpu_memory_utilization == first.placement.gpu_memory_utilization
    placer.activate(deployment_id, 1, None)
    with factory() as session:
        row = session.scalars(select(GpuReservation)).one()
        assert row.active and row.measured_bytes is None  # a file measures nothing
    placer.release(deployment_id)
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(GpuReservation)) == 0


def test_drift_after_a_load_is_what_the_gpu_took_beyond_its_booking(
        client: TestClient, writer: dict[str, str], tmp_path: Path, app: FastAPI) -> None:
    # A node whose readings measure (as NVML and Triton's metrics do), read here from a file the
    # test edits the way a loading engine changes the GPU's used memory.
    path = inventory(tmp_path, {"n": gpus("n", 1, 24 * 1024)})
    add_node(client, writer, "n", "metrics:http://127.0.0.1:9/metrics")
    add_version(client, writer, "m", {"memory_bytes": 15 * GIB})
    _ok(client.put("/api/v1/models/m/aliases/production", headers=writer, json={"version": 1}),
        200, 201)
    factory: sessionmaker[Session] = app.state.session_factory
    placer = Placer(factory, headroom_fraction=0.05, strategy=Strategy.BEST_FIT,
                    open_inventory=lambda spec, node: StaticInventory(path, node))
    deployment_id = deployment_row(factory, "m", "n")
    booking = placer.book(deployment_id, 1)
    assert booking.before is not None and booking.before.gpus[0].memory_used_bytes == 0
    inventory(tmp_path, {"n": gpus("n", 1, 24 * 1024, memory_used_mib=16 * 1024)})
    placer.activate(deployment_id, 1, booking.before)
    with factory() as session:
        row = session.scalars(select(GpuReservation)).one()
        assert row.active
        assert row.measured_bytes == 16 * GIB
        # 15 GiB of 24 is a fraction of exactly 0.625, so the booking is exactly 15 GiB.
        assert row.bytes == 15 * GIB and row.gpu_memory_utilization == 0.625
        assert row.drift_bytes == GIB


def test_node_gpus_history_keeps_earlier_readings(
        client: TestClient, writer: dict[str, str], tmp_path: Path, app: FastAPI) -> None:
    path = inventory(tmp_path, {"n": gpus("n", 2, 24 * 1024)})
    add_node(client, writer, "n", f"static:{path}")
    monitor: GpuMonitor = app.state.gpu_monitor
    monitor.poll_once()
    monitor.poll_once()
    body = _ok(client.get("/api/v1/nodes/n/gpus?history=2", headers=writer))
    assert len(body["history"]) == 2
    assert [g["index"] for g in body["history"][-1]["gpus"]] == [0, 1]
    assert body["taken_at"] == body["history"][-1]["taken_at"]
    assert _ok(client.get("/api/v1/nodes/n/gpus", headers=writer))["history"] == []
    refused = client.get("/api/v1/nodes/n/gpus?history=-1", headers=writer)
    assert refused.status_code == 422
