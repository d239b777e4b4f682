"""A remote Triton node's GPUs, read from the ``nv_gpu_*`` series of its Prometheus endpoint.

For nodes the control plane cannot run NVML on: Triton samples NVML itself (through DCGM) and
publishes, per ``gpu_uuid`` label, the memory total and used in bytes and the utilization as a
0..1 ratio. It gives no index, name or temperature.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import httpx
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from control_plane.gpus.readings import GpuHealth, GpuReading, InventoryUnavailable

MEMORY_TOTAL = "nv_gpu_memory_total_bytes"
MEMORY_USED = "nv_gpu_memory_used_bytes"
UTILIZATION = "nv_gpu_utilization"
# Power and energy carry the same gpu_uuid label; they only tell that a GPU exists.
_OTHER_GPU_SERIES = ("nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption")


class TritonMetricsInventory:
    """A Triton node's GPUs from its ``/metrics`` endpoint.

    ``[]`` means Triton reports no GPUs: it was started with ``--allow-gpu-metrics=false``, or the
    node has none. An endpoint that does not answer raises InventoryUnavailable.
    """

    def __init__(self, metrics_url: str, timeout_s: float = 2.0) -> None:
        self.metrics_url = metrics_url
        self.timeout_s = timeout_s

    def snapshot(self) -> list[GpuReading]:
        """The GPUs Triton reports, indexed in the order their UUIDs first appear."""
        try:
            response = httpx.get(self.metrics_url, timeout=self.timeout_s)
        except httpx.HTTPError as error:
            raise InventoryUnavailable(
                f"Triton metrics at {self.metrics_url} did not answer: {type(error).__name__}: "
                f"{error}; check that the node is up and that this is its --metrics-port"
            ) from error
        if response.status_code != 200:
            raise InventoryUnavailable(
                f"Triton metrics at {self.metrics_url} answered HTTP {response.status_code}; "
                f"check the URL (Triton serves them at /metrics on its --metrics-port)")
        try:
            return parse_gpu_metrics(response.text)
        except ValueError as error:
            raise InventoryUnavailable(
                f"Triton metrics at {self.metrics_url} are not Prometheus text: {error}") from error


def parse_gpu_metrics(text: str) -> list[GpuReading]:
    """GPU readings from Prometheus exposition text; raises ValueError if it is malformed."""
    values: dict[str, dict[str, float]] = {MEMORY_TOTAL: {}, MEMORY_USED: {}, UTILIZATION: {}}
    uuids: dict[str, None] = {}  # insertion-ordered set: the order Triton lists its GPUs in
    for name, uuid, value in _gpu_samples(text_string_to_metric_families(text)):
        uuids.setdefault(uuid)
        if name in values:
            values[name][uuid] = value
    return [_reading(index, uuid, values) for index, uuid in enumerate(uuids)]


def _gpu_samples(families: Iterable[Metric]) -> Iterable[tuple[str, str, float]]:
    wanted = (MEMORY_TOTAL, MEMORY_USED, UTILIZATION, *_OTHER_GPU_SERIES)
    for family in families:
        for sample in family.samples:
            uuid = sample.labels.get("gpu_uuid")
            if sample.name in wanted and uuid:
                yield sample.name, uuid, float(sample.value)


def _reading(index: int, uuid: str, values: dict[str, dict[str, float]]) -> GpuReading:
    total = values[MEMORY_TOTAL].get(uuid, math.nan)
    used = values[MEMORY_USED].get(uuid, math.nan)
    missing = [name for name, value in ((MEMORY_TOTAL, total), (MEMORY_USED, used))
               if math.isnan(value)]
    if missing:
        # Unknown memory is never "0 free": placement must skip the GPU, not fill it.
        return GpuReading(index=index, uuid=uuid, name="", memory_total_bytes=None,
                          memory_used_bytes=None, memory_free_bytes=None, health=GpuHealth.LOST,
                          detail=f"Triton reports the GPU but no {' or '.join(missing)} value; "
                                 f"check the node's Triton log for DCGM/NVML errors")
    utilization = values[UTILIZATION].get(uuid, math.nan)
    return GpuReading(index=index, uuid=uuid, name="", memory_total_bytes=int(total),
                      memory_used_bytes=int(used), memory_free_bytes=int(total) - int(used),
                      utilization_percent=None if math.isnan(utilization) else utilization * 100)
