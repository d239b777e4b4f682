"""Node rule: the node has enough GPUs that passed the GPU rules for every engine.

An engine never spans nodes, so a node must offer ``tensor_parallel_size x replicas`` passing
GPUs. They must also have equal total memory: vLLM takes one ``gpu_memory_utilization`` for all of
an engine's GPUs, and one placement gives every replica the same value, so only GPUs of the same
size (in practice, the same model) are combined.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from control_plane.gpus.readings import GpuReading
from control_plane.placement.accounting import gib
from control_plane.placement.model import NodeView, PlacementRequest


class TensorParallel:
    name = "tensor-parallel"
    description = ("The node has tensor_parallel_size x replicas GPUs of equal total memory that "
                   "passed the GPU rules (an engine never spans nodes).")

    def check(self, request: PlacementRequest, node: NodeView,
              passing: Sequence[GpuReading]) -> str | None:
        needed = request.tensor_parallel_size * request.replicas
        by_total = Counter(gpu.memory_total_bytes for gpu in passing) if passing else Counter()
        if passing and max(by_total.values()) >= needed:
            return None
        wanted = "needs 1 GPU" if needed == 1 else (
            f"needs {needed} GPUs of equal memory ({request.replicas} engine"
            f"{'s' * (request.replicas > 1)} x tensor parallelism {request.tensor_parallel_size})")
        if not passing:
            return f"{wanted}, none of its {len(node.gpus)} GPUs passed the GPU rules"
        groups = ", ".join(f"{count} x {gib(total or 0)}" for total, count
                           in sorted(by_total.items(), key=lambda item: -(item[0] or 0)))
        return f"{wanted}, {len(passing)} passed the GPU rules: {groups}"
