"""Which GPUs the engine of one model instance may use, from Triton's instance kind and the
placement the control plane wrote into the config.

vLLM takes the GPUs CUDA shows it, so the engine is pinned by environment before CUDA starts.
Indexes are NVML's (PCI bus order, what the control plane read and placed by); CUDA's default
order is "fastest first", so the order is set to PCI bus order too, or index 1 could be another
GPU than the one placement booked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _parameter(config: Mapping[str, Any], key: str) -> str | None:
    value = config.get("parameters", {}).get(key)
    return value.get("string_value") if isinstance(value, Mapping) else None


def engine_device_environment(config: Mapping[str, Any], kind: str, device_id: int
                              ) -> dict[str, str]:
    """Environment variables that pin the engine to its placed GPUs; empty when there is nothing
    to pin (a CPU instance, a simulated placement, a config written by hand without one)."""
    if _parameter(config, "placement_simulated") == "true":
        return {}
    if kind == "GPU":
        # KIND_GPU: Triton made one instance per listed GPU; this one is on device_id.
        return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": str(device_id)}
    gpus = _parameter(config, "placement_gpus")
    if kind == "MODEL" and gpus:
        # KIND_MODEL: one tensor-parallel engine over the placed GPUs.
        return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": gpus}
    return {}
