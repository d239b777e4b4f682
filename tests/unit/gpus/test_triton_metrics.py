"""Reading GPUs from Triton's Prometheus text: parsed from literal text, and served over HTTP."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from control_plane.gpus.readings import GpuHealth, GpuReading, InventoryUnavailable
from control_plane.gpus.triton_metrics import TritonMetricsInventory, parse_gpu_metrics
from control_plane.triton.server import free_port

GIB = 2**30
# As tritonserver 2.x prints it with GPU metrics on: power first, then utilization and memory.
TWO_GPUS = """\
# HELP nv_gpu_power_usage GPU power usage in watts
# TYPE nv_gpu_power_usage gauge
nv_gpu_power_usage{gpu_uuid="GPU-5d4b3a2c-0000-1111-2222-333344445555"} 71.452
nv_gpu_power_usage{gpu_uuid="GPU-0f1e2d3c-aaaa-bbbb-cccc-ddddeeeeffff"} 65.1
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-0f1e2d3c-aaaa-bbbb-cccc-ddddeeeeffff"} 0
nv_gpu_utilization{gpu_uuid="GPU-5d4b3a2c-0000-1111-2222-333344445555"} 0.37
# HELP nv_gpu_memory_total_bytes GPU total memory, in bytes
# TYPE nv_gpu_memory_total_bytes gauge
nv_gpu_memory_total_bytes{gpu_uuid="GPU-0f1e2d3c-aaaa-bbbb-cccc-ddddeeeeffff"} 85899345920
nv_gpu_memory_total_bytes{gpu_uuid="GPU-5d4b3a2c-0000-1111-2222-333344445555"} 85899345920
# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes
# TYPE nv_gpu_memory_used_bytes gauge
nv_gpu_memory_used_bytes{gpu_uuid="GPU-0f1e2d3c-aaaa-bbbb-cccc-ddddeeeeffff"} 0
nv_gpu_memory_used_bytes{gpu_uuid="GPU-5d4b3a2c-0000-1111-2222-333344445555"} 3.221225472e+09
# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]
# TYPE nv_cpu_utilization gauge
nv_cpu_utilization 0.125
"""
FIRST = "GPU-5d4b3a2c-0000-1111-2222-333344445555"
SECOND = "GPU-0f1e2d3c-aaaa-bbbb-cccc-ddddeeeeffff"
# What the test-session tritonserver serves: --allow-gpu-metrics=false, CPU series only.
CPU_ONLY = """\
# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]
# TYPE nv_cpu_utilization gauge
nv_cpu_utilization 0
# HELP nv_cpu_memory_total_bytes CPU total memory (RAM), in bytes
# TYPE nv_cpu_memory_total_bytes gauge
nv_cpu_memory_total_bytes 0
"""


def test_gpus_are_indexed_in_first_appearance_order_with_exact_values():
    assert parse_gpu_metrics(TWO_GPUS) == [
        GpuReading(index=0, uuid=FIRST, name="", memory_total_bytes=80 * GIB,
                   memory_used_bytes=3 * GIB, memory_free_bytes=77 * GIB,
                   utilization_percent=pytest.approx(37.0), temperature_c=None),
        GpuReading(index=1, uuid=SECOND, name="", memory_total_bytes=80 * GIB,
                   memory_used_bytes=0, memory_free_bytes=80 * GIB, utilization_percent=0.0),
    ]


def test_a_node_without_gpu_series_has_no_gpus():
    assert parse_gpu_metrics(CPU_ONLY) == []


def test_a_gpu_with_total_but_no_used_series_is_lost_with_unknown_memory():
    text = TWO_GPUS.replace(
        f'nv_gpu_memory_used_bytes{{gpu_uuid="{SECOND}"}} 0\n', "")
    first, second = parse_gpu_metrics(text)
    assert first.health is GpuHealth.OK
    assert second.health is GpuHealth.LOST and second.uuid == SECOND
    assert second.memory_total_bytes is None and second.memory_free_bytes is None
    assert "no nv_gpu_memory_used_bytes value" in second.detail


def test_a_gpu_seen_only_in_power_series_is_lost_naming_both_missing_series():
    text = 'nv_gpu_power_usage{gpu_uuid="GPU-x"} 40\n'
    (gpu,) = parse_gpu_metrics(text)
    assert gpu.health is GpuHealth.LOST
    assert "nv_gpu_memory_total_bytes or nv_gpu_memory_used_bytes" in gpu.detail


def test_a_nan_memory_value_is_unknown_and_a_missing_utilization_is_none():
    text = ('nv_gpu_memory_total_bytes{gpu_uuid="GPU-x"} NaN\n'
            'nv_gpu_memory_used_bytes{gpu_uuid="GPU-x"} 0\n'
            'nv_gpu_memory_total_bytes{gpu_uuid="GPU-y"} 1024\n'
            'nv_gpu_memory_used_bytes{gpu_uuid="GPU-y"} 24\n')
    nan_total, no_utilization = parse_gpu_metrics(text)
    assert nan_total.health is GpuHealth.LOST and nan_total.memory_free_bytes is None
    assert no_utilization.memory_free_bytes == 1000 and no_utilization.utilization_percent is None


def test_malformed_text_is_a_value_error():
    with pytest.raises(ValueError):
        parse_gpu_metrics('nv_gpu_utilization{gpu_uuid="x" 0.5\n')


class _Metrics(BaseHTTPRequestHandler):
    status = 200
    body = TWO_GPUS

    def do_GET(self) -> None:
        payload = self.body.encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def metrics_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def url_of(server: ThreadingHTTPServer, path: str = "/metrics") -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def test_snapshot_reads_the_endpoint_over_http(metrics_server):
    readings = TritonMetricsInventory(url_of(metrics_server)).snapshot()
    assert [(gpu.index, gpu.uuid, gpu.memory_free_bytes) for gpu in readings] == [
        (0, FIRST, 77 * GIB), (1, SECOND, 80 * GIB)]


def test_a_non_200_answer_is_unavailable_naming_the_url_and_status(metrics_server, monkeypatch):
    monkeypatch.setattr(_Metrics, "status", 404)
    url = url_of(metrics_server, "/metric")
    with pytest.raises(InventoryUnavailable, match=rf"{url} answered HTTP 404"):
        TritonMetricsInventory(url).snapshot()


def test_a_body_that_is_not_prometheus_text_is_unavailable(metrics_server, monkeypatch):
    monkeypatch.setattr(_Metrics, "body", "<html>not metrics</html>\n")
    with pytest.raises(InventoryUnavailable, match="are not Prometheus text"):
        TritonMetricsInventory(url_of(metrics_server)).snapshot()


def test_nothing_listening_is_unavailable_naming_the_url_and_the_error():
    url = f"http://127.0.0.1:{free_port()}/metrics"
    with pytest.raises(InventoryUnavailable, match=rf"{url} did not answer: ConnectError"):
        TritonMetricsInventory(url, timeout_s=1.0).snapshot()
