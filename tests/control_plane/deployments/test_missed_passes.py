"""A node that misses a reconcile pass is not down at once: its deployments stay READY (and
routed) until it has missed ``node_down_after_missed_passes`` in a row, then turn UNKNOWN; a pass
it answers in between starts the count again. Real database; the node is an address where
nothing listens."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from control_plane.deployments.orm import DeploymentState
from control_plane.settings import Settings
from tests.control_plane.deployments.support import deployment_row
from tests.control_plane.reservations.test_booking import add_node, add_version


@pytest.fixture
def settings(database_url: str, source_root: Path) -> Settings:
    # The test runs the passes itself.
    return Settings(database_url=database_url, source_roots=[source_root],
                    reconciler_enabled=False, node_down_after_missed_passes=3,
                    _env_file=None)  # type: ignore[call-arg]


def test_a_node_is_down_only_after_missing_three_passes_in_a_row(
        client: TestClient, writer: dict[str, str], reader: dict[str, str]) -> None:
    add_node(client, writer, "n", None)  # 127.0.0.1:9: nothing listens
    add_version(client, writer, "m", {})
    assert client.put("/api/v1/models/m/aliases/production", headers=writer,
                      json={"version": 1}).status_code in (200, 201)
    app = client.app
    deployment_row(app.state.session_factory, "m", "production", "n",  # type: ignore[attr-defined]
                   DeploymentState.READY, 1)
    reconciler = app.state.reconciler  # type: ignore[attr-defined]

    def state() -> str:
        return str(client.get("/api/v1/deployments", headers=reader,
                              params={"model": "m"}).json()["items"][0]["state"])

    def routed() -> bool:
        return bool(client.get("/api/v1/routing", headers=reader).json()["models"])

    for missed in (1, 2):
        [report] = reconciler.reconcile_once()
        assert f"missed {missed} pass(es) in a row; down after 3" in report.errors, report
        assert state() == "READY" and routed()
    [report] = reconciler.reconcile_once()
    assert state() == "UNKNOWN" and not routed(), report
