"""GPU rule: the engine's booking fits in what the GPU can still be booked for.

The booking is what vLLM will take (``ceil(utilization x total)``, see ``accounting``), not the
estimate itself, so an accepted GPU can never be overfilled by the rounding of the utilization.
"""

from __future__ import annotations

from functools import lru_cache

from control_plane.gpus.readings import GpuReading
from control_plane.placement.accounting import (
    GpuBook,
    engine_fit,
    foreign_bytes,
    gib,
    gpu_memory,
)
from control_plane.placement.model import NodeView, PlacementRequest


class FitsMemory:
    name = "fits-memory"
    description = ("The engine's memory fits in the GPU's total less the headroom, the memory "
                   "already booked and memory used by processes that are not our engines.")

    def check(self, request: PlacementRequest, node: NodeView, gpu: GpuReading,
              book: GpuBook) -> str | None:
        memory = gpu_memory(gpu)
        if memory is None:
            return "memory not readable"
        total, used = memory
        needed, usable = engine_fit(request.bytes_per_gpu, request.headroom_fraction, total)
        foreign = foreign_bytes(used, book)
        if needed <= usable - book.booked - foreign:
            return None
        return _detail(needed, total, usable, book.booked, foreign)


# Most of a busy fleet fails this rule on every decision, and a GPU's figures change only when
# its bookings do: the texts are cached rather than formatted a thousand times per decision.
@lru_cache(maxsize=16384)
def _detail(needed: int, total: int, usable: int, booked: int, foreign: int) -> str:
    return (f"needs {gib(needed)}, {gib(max(0, usable - booked - foreign))} bookable: "
            f"{gib(total)} total - {gib(total - usable)} headroom - {gib(booked)} booked"
            f" - {gib(foreign)} used by others")
