"""GPU rule: the operator has not taken the GPU out of placement.

Operators exclude GPUs by UUID (``NodeView.excluded_gpus``), not by index: an index can name a
different board after a reboot or a driver reset, a UUID cannot. Engines already on an excluded GPU
keep running; only new bookings avoid it (their memory still counts on the GPU).
"""

from __future__ import annotations

from control_plane.gpus.readings import GpuReading
from control_plane.placement.accounting import GpuBook
from control_plane.placement.model import NodeView, PlacementRequest


class GpuNotExcluded:
    name = "gpu-not-excluded"
    description = "An operator has not excluded the GPU (by UUID) from placement."

    def check(self, request: PlacementRequest, node: NodeView, gpu: GpuReading,
              book: GpuBook) -> str | None:
        if gpu.uuid not in node.excluded_gpus:
            return None
        return (f"excluded by an operator ({gpu.uuid}); "
                "include it again to place new engines on it")
