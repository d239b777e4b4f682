"""TritonMetricsInventory against the real tritonserver's metrics endpoint."""

from __future__ import annotations

import httpx
import pytest

from control_plane.gpus.readings import InventoryUnavailable
from control_plane.gpus.triton_metrics import TritonMetricsInventory
from control_plane.triton.server import TritonServer, free_port


def test_a_cpu_triton_reports_no_gpus(triton: TritonServer):
    # The endpoint answers (CPU series present), so [] means "no GPUs", not "unreachable":
    # the session server runs with --allow-gpu-metrics=false on a machine without GPUs.
    response = httpx.get(triton.metrics_url, timeout=5)
    assert response.status_code == 200 and "nv_cpu_utilization" in response.text
    assert TritonMetricsInventory(triton.metrics_url).snapshot() == []


def test_an_unreachable_metrics_url_is_unavailable_naming_it():
    url = f"http://127.0.0.1:{free_port()}/metrics"
    with pytest.raises(InventoryUnavailable, match=rf"{url} did not answer"):
        TritonMetricsInventory(url, timeout_s=1.0).snapshot()
