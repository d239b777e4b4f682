"""Memory estimates of vLLM engines, worked by hand."""

from __future__ import annotations

import pytest

from control_plane.placement.estimate import (
    DEFAULT_OVERHEAD_BYTES,
    MemoryEstimate,
    ModelProfile,
    bytes_per_element,
    estimate_memory,
)

from .fleet import GIB

# Llama-3.1-8B: 8,030,261,248 parameters in bfloat16; 32 layers, 8 KV heads of 128.
LLAMA_8B = ModelProfile(weights_bytes=16_060_522_496, dtype="bfloat16", num_hidden_layers=32,
                        num_key_value_heads=8, head_dim=128, max_position_embeddings=131_072)


def test_kv_bytes_per_token() -> None:
    # K and V x 32 layers x 8 heads x 128 x 2 bytes.
    assert LLAMA_8B.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2 == 131_072
    assert LLAMA_8B.kv_bytes_per_token(dtype_bytes=1) == 65_536
    no_shape = ModelProfile(1, "bfloat16", None, 8, 128, None)
    assert no_shape.kv_bytes_per_token() is None


def test_default_kv_cache_holds_four_full_length_sequences() -> None:
    estimate = estimate_memory(LLAMA_8B, tensor_parallel_size=1, max_model_len=8192)
    # 4 x 8192 tokens x 128 KiB = 4 GiB.
    assert estimate == MemoryEstimate(
        weights_bytes=16_060_522_496, kv_cache_bytes=4 * GIB, overhead_bytes=2 * GIB,
        total_bytes=16_060_522_496 + 6 * GIB, per_gpu_bytes=16_060_522_496 + 6 * GIB,
        tensor_parallel_size=1)
    assert DEFAULT_OVERHEAD_BYTES == 2 * GIB


def test_tensor_parallelism_splits_weights_and_kv_but_not_the_overhead() -> None:
    estimate = estimate_memory(LLAMA_8B, tensor_parallel_size=2, max_model_len=8192)
    # (16,060,522,496 + 4,294,967,296) / 2 = 10,177,744,896, plus 2 GiB on each GPU.
    assert estimate.per_gpu_bytes == 10_177_744_896 + 2 * GIB
    assert estimate.total_bytes == 16_060_522_496 + 4 * GIB + 2 * 2 * GIB


def test_odd_split_is_rounded_up() -> None:
    profile = ModelProfile(weights_bytes=1001, dtype="float16", num_hidden_layers=1,
                           num_key_value_heads=1, head_dim=1, max_position_embeddings=None)
    # KV: 2 x 1 x 1 x 1 x 2 bytes x 10 tokens = 40; (1001 + 40) / 2 = 520.5 -> 521.
    estimate = estimate_memory(profile, tensor_parallel_size=2, max_model_len=10,
                               kv_cache_tokens=10, overhead_bytes=0)
    assert (estimate.kv_cache_bytes, estimate.per_gpu_bytes) == (40, 521)


def test_explicit_kv_tokens_dtype_and_overhead() -> None:
    estimate = estimate_memory(LLAMA_8B, tensor_parallel_size=1, max_model_len=4096,
                               kv_cache_tokens=16_384, kv_cache_dtype_bytes=1,
                               overhead_bytes=GIB)
    # fp8 KV cache: 64 KiB per token x 16,384 tokens = 1 GiB.
    assert estimate.kv_cache_bytes == GIB
    assert estimate.per_gpu_bytes == 16_060_522_496 + 2 * GIB


@pytest.mark.parametrize(("profile", "arguments", "message"), [
    (LLAMA_8B, {"tensor_parallel_size": 0, "max_model_len": 8}, "tensor_parallel_size must be"),
    (LLAMA_8B, {"tensor_parallel_size": 1, "max_model_len": 0}, "max_model_len must be"),
    (LLAMA_8B, {"tensor_parallel_size": 1, "max_model_len": 8192, "kv_cache_tokens": 8191},
     "kv_cache_tokens 8191 cannot hold one sequence of max_model_len 8192"),
    (ModelProfile(1, "bfloat16", None, None, None, None),
     {"tensor_parallel_size": 1, "max_model_len": 8}, "lacks num_hidden_layers"),
    (ModelProfile(1, "complex64", 1, 1, 1, None),
     {"tensor_parallel_size": 1, "max_model_len": 8}, "unknown dtype 'complex64'"),
], ids=["tp0", "len0", "kv-below-one-sequence", "no-shape", "unknown-dtype"])
def test_impossible_estimates_raise(profile: ModelProfile, arguments: dict[str, int],
                                    message: str) -> None:
    with pytest.raises(ValueError, match=message):
        estimate_memory(profile, **arguments)


@pytest.mark.parametrize(("dtype", "size"), [
    ("bfloat16", 2), ("float16", 2), ("torch.float32", 4), ("float8_e4m3fn", 1), ("BFloat16", 2)])
def test_bytes_per_element(dtype: str, size: int) -> None:
    assert bytes_per_element(dtype) == size


def test_profile_round_trips_through_a_dict() -> None:
    assert ModelProfile.from_dict(LLAMA_8B.to_dict()) == LLAMA_8B
    with pytest.raises(ValueError, match="missing keys"):
        ModelProfile.from_dict({"weights_bytes": 1})
    with pytest.raises(ValueError, match="weights_bytes of the wrong type"):
        ModelProfile.from_dict({**LLAMA_8B.to_dict(), "weights_bytes": "1 GB"})
