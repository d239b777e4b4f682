"""GPU rule: replicas of one deployment version never share a GPU.

The replicas of a version share a holder (``Reservation.holder``); a GPU that already holds a
reservation of the request's holder is refused, so losing one GPU takes down one replica only and
two engines of one version never compete for one GPU's memory.

The engines of one request are put on distinct GPUs by the choice itself; this rule keeps them
apart from the version's engines that are already booked.
"""

from __future__ import annotations

from control_plane.gpus.readings import GpuReading
from control_plane.placement.accounting import GpuBook
from control_plane.placement.model import NodeView, PlacementRequest


class AntiAffinity:
    name = "anti-affinity"
    description = "The GPU holds no engine of the same deployment version (replicas stay apart)."

    def check(self, request: PlacementRequest, node: NodeView, gpu: GpuReading,
              book: GpuBook) -> str | None:
        if not book.holds_holder:
            return None
        return f"already holds an engine of {request.holder}"
