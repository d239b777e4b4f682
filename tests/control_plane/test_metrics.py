"""The control plane's ``/metrics`` on SQLite and PostgreSQL, without Triton: a load placement
refuses, a node that does not answer, a GPU's memory from a static inventory, deployments by
state and the leader gauge, each read back as Prometheus parses it."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from control_plane.db import make_engine, make_session_factory
from control_plane.gpus.monitor import GpuMonitor
from control_plane.settings import Settings
from control_plane.state_metrics import StateCollector
from tests.control_plane.deployments.support import finished, wait_until
from tests.control_plane.reservations.test_booking import (
    GIB,
    add_node,
    add_version,
    gpus,
    inventory,
)


@pytest.fixture
def settings(database_url: str, source_root: Path) -> Settings:
    return Settings(database_url=database_url, source_roots=[source_root],
                    gpu_poll_interval_seconds=0.2,
                    _env_file=None)  # type: ignore[call-arg]


def samples(client: TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(response.text)
            for s in family.samples}


def value(client: TestClient, name: str, **labels: str) -> float | None:
    return samples(client).get((name, frozenset(labels.items())))


def test_metrics_count_a_refused_load_and_show_gpus_deployments_and_the_leader(
        client: TestClient, writer: dict[str, str], tmp_path: Path) -> None:
    path = inventory(tmp_path, {"n": gpus("n", 1, 24 * 1024)})
    add_node(client, writer, "n", f"static:{path}")
    add_version(client, writer, "big", {"memory_bytes": 40 * GIB})
    assert client.put("/api/v1/models/big/aliases/production", headers=writer,
                      json={"version": 1}).status_code in (200, 201)

    operation = finished(client, writer, client.put(
        "/api/v1/models/big/aliases/production/deployments/n", headers=writer), timeout=60)
    assert operation["status"] == "failed", operation
    assert "fits-memory" in operation["error"], operation

    # The GPU as the monitor read it, with nothing booked on it (the load was refused).
    gpu = {"node": "n", "gpu": "0", "uuid": "GPU-n-0"}
    wait_until(lambda: value(client, "llmcp_gpu_memory_total_bytes", **gpu),
               "a GPU reading", 30)
    assert value(client, "llmcp_gpu_memory_total_bytes", **gpu) == 24 * GIB
    assert value(client, "llmcp_gpu_memory_used_bytes", **gpu) == 0
    assert value(client, "llmcp_gpu_memory_booked_bytes", **gpu) == 0
    assert value(client, "llmcp_gpu_healthy", health="ok", **gpu) == 1
    assert value(client, "llmcp_node_gpu_inventory_up", node="n") == 1

    assert value(client, "llmcp_operations_total", kind="deployment.apply",
                 outcome="failed") == 1
    assert value(client, "llmcp_operation_duration_seconds_count", kind="deployment.apply",
                 outcome="failed") == 1
    assert (value(client, "llmcp_placement_refusals_total", rule="fits-memory") or 0) >= 1

    metrics = samples(client)
    by_state = {dict(labels)["state"]: count for (name, labels), count in metrics.items()
                if name == "llmcp_deployments"}
    assert sum(by_state.values()) == 1 and by_state["READY"] == 0, by_state
    assert metrics[("llmcp_state_readable", frozenset())] == 1

    # The leader gauge says what this process's election holds (in a whole test session another
    # app on the same database may hold the lock); a pass finds the node's repository API
    # unreachable.
    election = client.app.state.elections[-1]  # type: ignore[attr-defined]
    assert value(client, "llmcp_leader") in (0, 1)
    assert value(client, "llmcp_leader") == (1 if election.is_leader else 0)
    # A pass skips a node whose lock another holder has (the app's own periodic pass, still
    # waiting on the node on a slow host) and sets nothing for it: pass until one reaches it.
    reconciler = client.app.state.reconciler  # type: ignore[attr-defined]
    wait_until(lambda: any(report.node == "n" for report in reconciler.reconcile_once()),
               "a reconcile pass that reaches node n", 30)
    assert value(client, "llmcp_node_reachable", node="n") == 0
    assert (value(client, "llmcp_reconcile_errors_total", node="n") or 0) >= 1
    assert (value(client, "llmcp_reconcile_passes_total") or 0) >= 1
    assert (value(client, "llmcp_reconcile_pass_duration_seconds_count") or 0) >= 1


def test_metrics_answer_without_a_token_and_name_every_family_with_help(
        client: TestClient) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200
    families = list(text_string_to_metric_families(response.text))
    names = {family.name for family in families}
    assert {"llmcp_operations", "llmcp_deployments", "llmcp_placement_refusals",
            "llmcp_webhook_deliveries", "llmcp_promotions", "llmcp_promotion_gate_checks",
            "llmcp_reconcile_pass_duration_seconds"} <= names, names
    assert all(family.documentation for family in families if family.name.startswith("llmcp_"))


def test_a_scrape_with_the_database_away_still_answers_and_says_so(tmp_path: Path) -> None:
    factory = make_session_factory(make_engine(f"sqlite:///{tmp_path / 'missing' / 'x.db'}"))
    monitor = GpuMonitor(dict, interval_s=1)
    registry = CollectorRegistry()
    registry.register(StateCollector(factory, monitor, lambda: False))
    assert registry.get_sample_value("llmcp_state_readable") == 0
    assert registry.get_sample_value("llmcp_leader") == 0
    assert registry.get_sample_value("llmcp_deployments", {"state": "READY"}) is None
