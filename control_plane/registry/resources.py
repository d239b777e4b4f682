"""What a version asks of the hardware it is placed on, as a client writes it. Placement turns it,
with the memory estimate, into GPUs and vLLM's ``gpu_memory_utilization``."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

GIB = 1024**3
MAX_REPLICAS = 8
# CUDA context, activations at max_num_batched_tokens and CUDA graphs, per GPU: what vLLM takes on
# top of weights and KV cache. Measured engines differ; the drift after each load shows by how much.
DEFAULT_OVERHEAD_BYTES = 2 * GIB


class DeviceRequest(StrEnum):
    # GPUs where the node has a GPU inventory, else the CPU (as Triton's KIND_AUTO decides).
    AUTO = "auto"
    GPU = "gpu"
    CPU = "cpu"


class ResourceSettings(BaseModel):
    """Where and how big a version's engines are. Tensor parallelism is vLLM's own
    ``engine_args.tensor_parallel_size``."""

    model_config = ConfigDict(extra="forbid")

    device: DeviceRequest = DeviceRequest.AUTO
    replicas: Annotated[int, Field(ge=1, le=MAX_REPLICAS)] = Field(
        default=1, description="engines of this version per node, each on its own GPU(s)")
    kv_cache_tokens: Annotated[int, Field(ge=1, le=1 << 31)] | None = Field(
        default=None, description="tokens the KV cache must hold; default 4 x max_model_len")
    overhead_bytes: Annotated[int, Field(ge=0, le=1 << 50)] = Field(
        default=DEFAULT_OVERHEAD_BYTES,
        description="per-GPU memory beyond weights and KV cache (CUDA context, activations)")
    memory_bytes: Annotated[int, Field(ge=1, le=1 << 50)] | None = Field(
        default=None, description="per-GPU memory of one engine, set by hand: replaces the "
        "estimate (needed for remote sources, whose files are not read at registration)")
