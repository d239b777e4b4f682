"""Read a model directory into a ``ModelProfile``: its config.json and the size of its weights.

The weights are sized from the safetensors headers (no tensor is read), so profiling a 140 GB
model reads a few megabytes. Directories without safetensors fall back to the size of their
``*.bin``, ``*.pt`` or ``*.gguf`` files.
"""

from __future__ import annotations

import json
import math
import struct
from collections import Counter
from pathlib import Path
from typing import Any

from control_plane.placement.estimate import ModelProfile

# Element sizes of the safetensors dtype codes.
SAFETENSORS_DTYPE_BYTES: dict[str, int] = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}
# config.json's name for a model whose weights are mostly of this safetensors dtype.
_CONFIG_DTYPE = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
                 "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "I8": "int8", "U8": "uint8"}
# The format caps the JSON header at 100 MB; a larger length means a corrupt or foreign file.
MAX_HEADER_BYTES = 100_000_000
FALLBACK_PATTERNS = ("*.bin", "*.pt", "*.gguf")


def profile_model_dir(path: Path) -> ModelProfile:
    """The profile of the Hugging Face model in ``path``; ValueError naming the file and problem
    when the directory cannot be read as a model."""
    config_path = path / "config.json"
    config = _read_json(config_path)
    if not isinstance(config, dict):
        # The file's content is wrong, not an argument's type: ValueError like all bad input here.
        raise ValueError(
            f"{config_path}: expected a JSON object, got {type(config).__name__}")
    # Multimodal configs (Llava, Gemma 3, Mistral 3) nest the language model under text_config.
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    weights, dominant = _weights(path)
    layers = _positive_int(text, "num_hidden_layers", config_path)
    heads = _positive_int(text, "num_attention_heads", config_path)
    kv_heads = _positive_int(text, "num_key_value_heads", config_path) or heads
    hidden = _positive_int(text, "hidden_size", config_path)
    head_dim = _positive_int(text, "head_dim", config_path)
    if head_dim is None and hidden is not None and heads is not None:
        head_dim = hidden // heads
    dtype = next((value for source in (text, config) for key in ("torch_dtype", "dtype")
                  if isinstance(value := source.get(key), str)), None) or dominant
    if dtype is None:
        raise ValueError(f"{config_path}: no torch_dtype or dtype, and no safetensors to take the "
                         "weights' dtype from; add \"torch_dtype\" to config.json")
    return ModelProfile(
        weights_bytes=weights, dtype=dtype, num_hidden_layers=layers,
        num_key_value_heads=kv_heads, head_dim=head_dim,
        max_position_embeddings=(_positive_int(text, "max_position_embeddings", config_path)
                                 or _positive_int(config, "max_position_embeddings", config_path)))


def safetensors_header(file: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file: an 8-byte little-endian length, then the JSON."""
    try:
        size = file.stat().st_size
        with file.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ValueError(f"{file}: {size} bytes, too short for a safetensors header")
            (length,) = struct.unpack("<Q", prefix)
            if length > min(MAX_HEADER_BYTES, size - 8):
                raise ValueError(f"{file}: header length {length} does not fit a {size}-byte "
                                 "file; the file is corrupt or not safetensors")
            raw = handle.read(length)
    except OSError as error:
        raise ValueError(f"{file}: cannot read: {error}") from error
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{file}: header is not JSON: {error}") from error
    if not isinstance(header, dict):
        raise ValueError(
            f"{file}: header is a JSON {type(header).__name__}, not an object")
    return header


def safetensors_weights(file: Path) -> Counter[str]:
    """Bytes of the tensors in a safetensors file, by dtype code (``__metadata__`` ignored)."""
    by_dtype: Counter[str] = Counter()
    for name, entry in safetensors_header(file).items():
        if name == "__metadata__":
            continue
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if dtype not in SAFETENSORS_DTYPE_BYTES:
            raise ValueError(f"{file}: tensor {name!r} has dtype {dtype!r}; known: "
                             f"{', '.join(SAFETENSORS_DTYPE_BYTES)}")
        if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ValueError(f"{file}: tensor {name!r} has shape {shape!r}, not a list of sizes")
        by_dtype[dtype] += math.prod(shape) * SAFETENSORS_DTYPE_BYTES[dtype]
    return by_dtype


def _weights(path: Path) -> tuple[int, str | None]:
    """Bytes of the weights, and the config.json dtype most of them have (None if unknown)."""
    shards = _safetensors_shards(path)
    if shards:
        by_dtype: Counter[str] = Counter()
        for shard in shards:
            by_dtype.update(safetensors_weights(shard))
        dominant = by_dtype.most_common(1)[0][0] if by_dtype else None
        return by_dtype.total(), _CONFIG_DTYPE.get(dominant or "")
    files = sorted(file for pattern in FALLBACK_PATTERNS for file in path.glob(pattern))
    if not files:
        raise ValueError(f"{path}: no weights found: expected *.safetensors, or "
                         f"{', '.join(FALLBACK_PATTERNS)}")
    return sum(file.stat().st_size for file in files), None


def _safetensors_shards(path: Path) -> list[Path]:
    # The index names the shards of one checkpoint; without it, prefer model*.safetensors over
    # other files (Mistral repositories ship the same weights again as consolidated.safetensors).
    index_path = path / "model.safetensors.index.json"
    if index_path.is_file():
        index = _read_json(index_path)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"{index_path}: no \"weight_map\" naming the shards")
        shards = [path / name for name in sorted(set(map(str, weight_map.values())))]
        absent = [shard.name for shard in shards if not shard.is_file()]
        if absent:
            raise ValueError(f"{index_path}: names shards that are missing: {', '.join(absent)}")
        return shards
    return sorted(path.glob("model*.safetensors")) or sorted(path.glob("*.safetensors"))


def _read_json(file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise ValueError(f"{file}: not found; a model directory needs its config.json") from error
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{file}: cannot read as JSON: {error}") from error


def _positive_int(config: dict[str, Any], key: str, file: Path) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{file}: {key} is {value!r}, expected a positive integer")
    return value
