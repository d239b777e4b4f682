"""What one version asks of a node: device, tensor parallelism, engines and memory per GPU, from
its engine arguments, resource settings and the model profile measured at registration."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from control_plane.placement.estimate import MemoryEstimate, ModelProfile, estimate_memory
from control_plane.registry.resources import DeviceRequest, ResourceSettings

# Bytes per element of the dtypes vLLM's ``dtype`` and ``kv_cache_dtype`` accept.
_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2,
                "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1}


@dataclass(frozen=True)
class Demand:
    device: DeviceRequest
    tensor_parallel_size: int
    replicas: int
    # Per GPU for one engine; None when it cannot be known (then ``unknown`` says why).
    bytes_per_gpu: int | None
    estimate: MemoryEstimate | None = None
    unknown: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device.value, "tensor_parallel_size": self.tensor_parallel_size,
                "replicas": self.replicas, "bytes_per_gpu": self.bytes_per_gpu,
                "estimate": None if self.estimate is None else dataclasses.asdict(self.estimate),
                "estimate_unavailable": self.unknown}


def _int_arg(engine_args: Mapping[str, Any], key: str) -> int | None:
    value = engine_args.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def demand_of(engine_args: Mapping[str, Any], resources: Mapping[str, Any],
              profile: Mapping[str, Any] | None) -> Demand:
    settings = ResourceSettings.model_validate(resources)
    tensor_parallel = _int_arg(engine_args, "tensor_parallel_size") or 1
    base = Demand(settings.device, tensor_parallel, settings.replicas, None)
    if settings.memory_bytes is not None:
        return dataclasses.replace(base, bytes_per_gpu=settings.memory_bytes)
    if profile is None or "unavailable" in profile:
        why = (profile or {}).get("unavailable", "the source was not read at registration")
        return dataclasses.replace(base, unknown=f"no memory estimate: {why}; set "
                                   "resources.memory_bytes on the version")
    measured = ModelProfile.from_dict(dict(profile))
    dtype_bytes = _DTYPE_BYTES.get(str(engine_args.get("dtype", "auto")))
    stored_bytes = _DTYPE_BYTES.get(measured.dtype)
    if dtype_bytes and stored_bytes and dtype_bytes != stored_bytes:
        # Weights are cast to the engine's dtype when loaded.
        measured = dataclasses.replace(
            measured, weights_bytes=measured.weights_bytes * dtype_bytes // stored_bytes,
            dtype=str(engine_args["dtype"]))
    max_model_len = _int_arg(engine_args, "max_model_len") or measured.max_position_embeddings
    if max_model_len is None:
        return dataclasses.replace(base, unknown="no memory estimate: neither engine_args."
                                   "max_model_len nor the model's max_position_embeddings is set")
    estimate = estimate_memory(
        measured, tensor_parallel_size=tensor_parallel, max_model_len=max_model_len,
        kv_cache_tokens=settings.kv_cache_tokens,
        kv_cache_dtype_bytes=_DTYPE_BYTES.get(str(engine_args.get("kv_cache_dtype", "auto"))),
        overhead_bytes=settings.overhead_bytes)
    return dataclasses.replace(base, bytes_per_gpu=estimate.per_gpu_bytes, estimate=estimate)
