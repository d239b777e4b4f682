"""GPU rule: the GPU is healthy and its memory was read.

An unreadable reading is never taken as "empty" or "full": a LOST GPU may still hold engines, an
UNHEALTHY one (XID error, retired pages) would fail the engine placed on it. Both are refused with
what the inventory said.
"""

from __future__ import annotations

from control_plane.gpus.readings import GpuHealth, GpuReading
from control_plane.placement.accounting import GpuBook, gpu_memory
from control_plane.placement.model import NodeView, PlacementRequest


class GpuHealthy:
    name = "gpu-healthy"
    description = "The GPU reports no fault and its total and used memory could be read."

    def check(self, request: PlacementRequest, node: NodeView, gpu: GpuReading,
              book: GpuBook) -> str | None:
        if gpu.health is not GpuHealth.OK:
            reason = f": {gpu.detail}" if gpu.detail else ""
            return f"health is {gpu.health.value}{reason}"
        if gpu_memory(gpu) is None:
            return (f"memory not readable (total {gpu.memory_total_bytes}, "
                    f"used {gpu.memory_used_bytes})")
        return None
