"""A node's ``gpu_inventory`` setting, and the inventory it names.

- ``nvml``: this machine's GPUs through NVML (a node running beside the control plane);
- ``metrics:<url>``: a remote Triton's own ``nv_gpu_*`` metrics, e.g. ``metrics:http://gpu-3:8002/metrics``;
- ``static:<path>``: a JSON/YAML file listing the node's GPUs (a machine whose GPUs are known but
  not readable from here);
- ``simulated:<path>``: the same file, for a Triton that has no such GPUs (demos, tests, CPU-only
  machines): placement decides and books as for real ones, and Triton gets an instance group it
  can load without a GPU, with the decision in the config's parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from control_plane.gpus.readings import GpuInventory

SPEC_PATTERN = r"^(nvml|metrics:https?://[^\s\x00]{1,580}|(static|simulated):/[^\s\x00]{1,580})$"


@dataclass(frozen=True)
class InventorySpec:
    kind: str  # nvml, metrics, static, simulated
    target: str = ""

    @classmethod
    def parse(cls, spec: str) -> InventorySpec:
        kind, _, target = spec.partition(":")
        return cls(kind, target)

    @property
    def simulated(self) -> bool:
        return self.kind == "simulated"

    @property
    def measures_usage(self) -> bool:
        """Whether readings show what engines really take, so drift after a load means
        something; a file only says what someone wrote in it."""
        return self.kind in ("nvml", "metrics")

    def open(self, node: str) -> GpuInventory:
        if self.kind == "nvml":
            from control_plane.gpus.nvml import NvmlInventory
            return NvmlInventory()
        if self.kind == "metrics":
            from control_plane.gpus.triton_metrics import TritonMetricsInventory
            return TritonMetricsInventory(self.target)
        from control_plane.gpus.static import StaticInventory
        return StaticInventory(Path(self.target), node)
