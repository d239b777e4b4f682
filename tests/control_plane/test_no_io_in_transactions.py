"""No transaction stays open across a disk or network read of a model or of a node's GPUs.

The database engine's own events count, per thread, the transactions open on it; each seam that
reads a model's files (the checksum, the memory profile) or a node's GPUs (a simulated inventory
file, a node's Triton metrics over HTTP from a real local server) records how many were open in
its thread when it read. Registration, placement preview, the node GPU page, booking during a
deployment and the drift check after a load all go through them, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event

from control_plane.db import transaction
from control_plane.deployments.orm import Deployment
from control_plane.gpus import static, triton_metrics
from control_plane.registry import service as registry_service
from control_plane.registry import sources
from control_plane.triton.server import free_port
from tests.control_plane.deployments.support import finished

GIB = 2**30
KEY_VARIABLE = "LLMCP_TEST_NO_IO_TRITON_KEY"
METRICS = """# TYPE nv_gpu_memory_total_bytes gauge
nv_gpu_memory_total_bytes{gpu_uuid="GPU-remote-0"} 25769803776
# TYPE nv_gpu_memory_used_bytes gauge
nv_gpu_memory_used_bytes{gpu_uuid="GPU-remote-0"} 1073741824
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-remote-0"} 0.1
"""


class OpenTransactions:
    """Transactions open on the engine, per thread, from SQLAlchemy's connection events."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._local = threading.local()
        self.reads: list[tuple[str, int]] = []

    def now(self) -> int:
        return int(getattr(self._local, "open", 0))

    def _begin(self, _connection: Any) -> None:
        self._local.open = self.now() + 1

    def _end(self, _connection: Any) -> None:
        self._local.open = max(0, self.now() - 1)

    def __enter__(self) -> Self:
        event.listen(self.engine, "begin", self._begin)
        event.listen(self.engine, "commit", self._end)
        event.listen(self.engine, "rollback", self._end)
        return self

    def __exit__(self, *_: object) -> None:
        event.remove(self.engine, "begin", self._begin)
        event.remove(self.engine, "commit", self._end)
        event.remove(self.engine, "rollback", self._end)

    def watching(self, seam: str, read: Callable[..., Any]) -> Callable[..., Any]:
        def watched(*args: Any, **kwargs: Any) -> Any:
            self.reads.append((seam, self.now()))
            return read(*args, **kwargs)
        return watched


@pytest.fixture
def metrics_url() -> Iterator[str]:
    """A real HTTP server on loopback answering like a Triton node's metrics port."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = METRICS.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


@pytest.fixture
def watch(db: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenTransactions]:
    with OpenTransactions(db) as watch:
        for owner, name, seam in (
                (static.StaticInventory, "snapshot", "gpu file"),
                (triton_metrics.TritonMetricsInventory, "snapshot", "gpu metrics over http"),
                (sources, "local_checksum", "model checksum"),
                (registry_service, "profile_model_dir", "model profile")):
            monkeypatch.setattr(owner, name, watch.watching(seam, getattr(owner, name)))
        yield watch


def test_no_transaction_is_open_while_a_model_or_gpus_are_read(
        watch: OpenTransactions, client: TestClient, writer: dict[str, str],
        admin: dict[str, str], source_root: Path, tmp_path: Path, metrics_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VARIABLE, "key")
    model_dir = source_root / "tiny-model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (model_dir / "model.safetensors").write_bytes(b"weights")
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"nodes": {"files": [
        {"index": 0, "uuid": "GPU-files-0", "memory_total_mib": 24576}]}}))

    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    registered = client.post("/api/v1/models/m/versions", headers=writer, json={
        "source": str(model_dir), "resources": {"memory_bytes": 2 * GIB}})
    assert registered.status_code == 201, registered.text
    dry_run = client.post("/api/v1/models/m/versions", headers=writer, params={"dry_run": True},
                          json={"source": str(model_dir)})
    assert dry_run.status_code == 200, dry_run.text
    assert client.put("/api/v1/models/m/aliases/production", headers=writer,
                      json={"version": 1}).status_code in (200, 201)
    for name, spec in (("files", f"simulated:{inventory}"), ("remote", f"metrics:{metrics_url}")):
        created = client.post("/api/v1/nodes", headers=writer, json={
            "name": name, "http_url": f"http://127.0.0.1:{free_port()}",
            "grpc_url": f"127.0.0.1:{free_port()}", "api_key_ref": f"env:{KEY_VARIABLE}",
            "gpu_inventory": spec})
        assert created.status_code == 201, created.text

    preview = client.post("/api/v1/placements/preview", headers=writer,
                          json={"model": "m", "alias": "production"})
    assert preview.status_code == 200 and preview.json()["decision"] == "placed", preview.text
    for name in ("files", "remote"):
        gpus = client.get(f"/api/v1/nodes/{name}/gpus", headers=writer)
        assert gpus.status_code == 200 and len(gpus.json()["gpus"]) == 1, gpus.text

    # The load books the remote node's GPU (read over HTTP), then finds no Triton there.
    deployed = finished(client, writer, client.put(
        "/api/v1/models/m/aliases/production/deployments/remote", headers=writer), 60)
    assert deployed["status"] == "failed", deployed
    booked = client.get("/api/v1/nodes/remote/gpus", headers=writer).json()["gpus"][0]
    assert booked["booked_bytes"] >= 2 * GIB, booked
    # After a load the placer reads the node again for the drift of its booking.
    placer = client.app.state.placer  # type: ignore[attr-defined]
    with transaction(client.app.state.session_factory, read_only=True) as session:  # type: ignore[attr-defined]
        deployment = session.query(Deployment).one()
        node = deployment.node
    placer.activate(deployment.id, 1, placer.view(node))

    seams = {seam for seam, _ in watch.reads}
    assert seams == {"gpu file", "gpu metrics over http", "model checksum", "model profile"}, \
        watch.reads
    inside = [(seam, count) for seam, count in watch.reads if count]
    assert inside == [], f"reads made with a transaction open: {inside}"
