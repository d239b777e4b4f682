"""How much GPU memory a vLLM engine needs: weights, KV cache and a fixed overhead (pure).

The estimate is what placement books before the engine exists; after a load the control plane
reads NVML again to check it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from control_plane.placement.accounting import GIB

# What vLLM takes on each GPU beyond weights and KV cache: the CUDA context (and NCCL buffers
# with tensor parallelism), activations of one step at max_num_batched_tokens, and the captured
# CUDA graphs. 2 GiB is a round allowance for these; the NVML reading after each load is what
# tells whether a model needs more.
DEFAULT_OVERHEAD_BYTES = 2 * GIB
# vLLM starts only if the KV cache holds one max_model_len sequence; four leave room for
# concurrent requests without sizing the cache for the worst case.
DEFAULT_KV_SEQUENCES = 4

# Bytes per element of the dtype names found in config.json (torch_dtype / dtype).
DTYPE_BYTES: dict[str, int] = {
    "float64": 8, "double": 8,
    "float32": 4, "float": 4,
    "float16": 2, "half": 2, "bfloat16": 2,
    "float8_e4m3fn": 1, "float8_e4m3fnuz": 1, "float8_e5m2": 1, "float8_e5m2fnuz": 1, "fp8": 1,
    "int8": 1, "uint8": 1,
}


def bytes_per_element(dtype: str) -> int:
    """Bytes per element of a config.json dtype name; ValueError when unknown."""
    size = DTYPE_BYTES.get(dtype.removeprefix("torch.").lower())
    if size is None:
        raise ValueError(f"unknown dtype {dtype!r}: expected one of {', '.join(DTYPE_BYTES)}")
    return size


@dataclass(frozen=True)
class ModelProfile:
    """What the memory estimate needs to know about a model; None where config.json lacks it."""

    weights_bytes: int
    dtype: str
    num_hidden_layers: int | None
    num_key_value_heads: int | None
    head_dim: int | None
    max_position_embeddings: int | None

    def kv_bytes_per_token(self, dtype_bytes: int | None = None) -> int | None:
        """K and V of every layer for one token, in ``dtype_bytes`` (default: the model's dtype);
        None when the config lacks the attention shape."""
        if self.num_hidden_layers is None or self.num_key_value_heads is None \
                or self.head_dim is None:
            return None
        element = dtype_bytes if dtype_bytes is not None else bytes_per_element(self.dtype)
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * element

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelProfile:
        fields = cls.__dataclass_fields__
        unknown = set(data) - set(fields)
        absent = set(fields) - set(data)
        if unknown or absent:
            raise ValueError(f"not a model profile: unknown keys {sorted(unknown)}, "
                             f"missing keys {sorted(absent)}")
        wrong = [key for key, value in data.items() if not _valid_field(key, value)]
        if wrong:
            raise ValueError(f"not a model profile: {', '.join(sorted(wrong))} of the wrong type "
                             f"in {data}")
        return cls(**data)


def _valid_field(key: str, value: Any) -> bool:
    if key == "dtype":
        return isinstance(value, str)
    if value is None:
        return key != "weights_bytes"
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class MemoryEstimate:
    weights_bytes: int
    kv_cache_bytes: int
    # Per GPU: every GPU of a tensor-parallel engine pays it.
    overhead_bytes: int
    # Over all GPUs: weights + KV cache + overhead x tensor_parallel_size.
    total_bytes: int
    # What each GPU needs: ceil((weights + KV cache) / tensor_parallel_size) + overhead.
    per_gpu_bytes: int
    tensor_parallel_size: int


def estimate_memory(profile: ModelProfile, *, tensor_parallel_size: int, max_model_len: int,
                    kv_cache_tokens: int | None = None, kv_cache_dtype_bytes: int | None = None,
                    overhead_bytes: int = DEFAULT_OVERHEAD_BYTES) -> MemoryEstimate:
    """Memory of one vLLM engine holding ``kv_cache_tokens`` tokens of KV cache (default: four
    sequences of ``max_model_len``), split over ``tensor_parallel_size`` GPUs."""
    if tensor_parallel_size < 1:
        raise ValueError(f"tensor_parallel_size must be at least 1, got {tensor_parallel_size}")
    if max_model_len < 1:
        raise ValueError(f"max_model_len must be at least 1, got {max_model_len}")
    tokens = max_model_len * DEFAULT_KV_SEQUENCES if kv_cache_tokens is None else kv_cache_tokens
    if tokens < max_model_len:
        raise ValueError(f"kv_cache_tokens {tokens} cannot hold one sequence of max_model_len "
                         f"{max_model_len}, and vLLM refuses to start: raise kv_cache_tokens or "
                         f"lower max_model_len")
    per_token = profile.kv_bytes_per_token(kv_cache_dtype_bytes)
    if per_token is None:
        raise ValueError("the model's config lacks num_hidden_layers, num_key_value_heads or "
                         "head_dim, so its KV cache cannot be estimated; add them to config.json")
    kv_cache = per_token * tokens
    shared = profile.weights_bytes + kv_cache
    return MemoryEstimate(
        weights_bytes=profile.weights_bytes, kv_cache_bytes=kv_cache,
        overhead_bytes=overhead_bytes,
        total_bytes=shared + overhead_bytes * tensor_parallel_size,
        per_gpu_bytes=-(-shared // tensor_parallel_size) + overhead_bytes,
        tensor_parallel_size=tensor_parallel_size)
