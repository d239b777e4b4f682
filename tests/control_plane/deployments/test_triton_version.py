"""The reconciler reads each node's Triton version and flags one older than the minimum: against
a real tritonserver (the bundled r24.10 is Triton 2.51.0), with no model to load, so it is quick."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction
from control_plane.deployments.orm import Deployment, DeploymentState
from control_plane.nodes.orm import TritonNode
from control_plane.registry.orm import Model
from control_plane.settings import Settings
from control_plane.triton.runtime import CACHE_DIR
from control_plane.triton.server import TritonServer
from tests.control_plane.deployments.support import repository_key_in

pytestmark = [pytest.mark.integration,
              pytest.mark.parametrize("backend", ["sqlite"], indirect=True)]
KEY_VARIABLE = "LLMCP_TEST_VERSION_TRITON_KEY"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    key_holder = repository_key_in(KEY_VARIABLE)
    key = next(key_holder)
    server = TritonServer(tmp_path_factory.mktemp("version-repository"), repository_key=key,
                          log_path=CACHE_DIR / "logs" / "test-triton-version.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()
        key_holder.close()


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # Passes run when the test says so.
    return settings.model_copy(update={"reconciler_enabled": False})


def test_an_old_triton_is_recorded_flagged_and_logged_once(
        client: TestClient, writer: dict[str, str], node: TritonServer,
        session_factory: sessionmaker[Session], caplog: pytest.LogCaptureFixture) -> None:
    assert client.post("/api/v1/nodes", headers=writer, json={
        "name": "old", "http_url": f"http://{node.http_url}", "grpc_url": node.grpc_url,
        "api_key_ref": f"env:{KEY_VARIABLE}"}).status_code == 201
    assert client.post("/api/v1/models", headers=writer, json={"name": "m"}).status_code == 201
    # The reconciler visits nodes that have deployments; this one has nothing left to do.
    with transaction(session_factory) as session:
        session.add(Deployment(
            model_id=session.scalar(select(Model.id).where(Model.name == "m")),
            node_id=session.scalar(select(TritonNode.id).where(TritonNode.name == "old")),
            alias="production", triton_name="m", wanted=False,
            state=DeploymentState.UNLOADED.value, updated_by="test"))

    reconciler = client.app.state.reconciler  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="control_plane.deployments.reconciler"):
        for _ in range(2):
            [report] = reconciler.reconcile_once()
            assert report.reachable and report.errors == [], report

    shown = client.get("/api/v1/nodes/old", headers=writer).json()
    assert shown["server_version"] == "2.51.0"
    assert shown["version_warning"].startswith(
        "Triton 2.51.0 is older than the minimum 2.70.0 (LLMCP_MIN_TRITON_VERSION)")
    logged = [r.getMessage() for r in caplog.records if "older than the minimum" in r.getMessage()]
    assert logged == [f"node old: {shown['version_warning']}"]
