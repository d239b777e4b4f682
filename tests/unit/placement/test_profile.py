"""Model profiles read from real files: the demo model on disk and safetensors written here."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from control_plane.placement.profile import profile_model_dir
from control_plane.triton.runtime import CACHE_DIR

DEMO_MODEL = CACHE_DIR / "models" / "SmolLM2-135M-Instruct"


def write_safetensors(file: Path, tensors: dict[str, tuple[str, list[int]]],
                      metadata: dict[str, str] | None = None) -> None:
    """A safetensors file with zeroed data: 8-byte length, JSON header, then the tensors."""
    sizes = {"F32": 4, "F16": 2, "BF16": 2, "I8": 1, "F8_E4M3": 1, "I64": 8, "BOOL": 1}
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        length = sizes[dtype]
        for dim in shape:
            length *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + length]}
        offset += length
    raw = json.dumps(header).encode()
    file.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def write_config(directory: Path, config: dict[str, Any]) -> None:
    (directory / "config.json").write_text(json.dumps(config))


def test_demo_model_on_disk() -> None:
    config = json.loads((DEMO_MODEL / "config.json").read_text())
    weights = DEMO_MODEL / "model.safetensors"
    with weights.open("rb") as handle:
        (header_length,) = struct.unpack("<Q", handle.read(8))
    profile = profile_model_dir(DEMO_MODEL)
    # The tensors are stored back to back after the header, so their sizes add up to the data.
    assert profile.weights_bytes == weights.stat().st_size - 8 - header_length
    assert profile.dtype == config["dtype"] == "bfloat16"
    assert profile.num_hidden_layers == config["num_hidden_layers"] == 30
    assert profile.num_key_value_heads == config["num_key_value_heads"] == 3
    assert profile.head_dim == config["head_dim"] == 64
    assert profile.max_position_embeddings == config["max_position_embeddings"] == 8192
    assert profile.kv_bytes_per_token() == 2 * 30 * 3 * 64 * 2


def test_sharded_checkpoint_with_defaults_from_attention_heads(tmp_path: Path) -> None:
    write_config(tmp_path, {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
                            "torch_dtype": "float16", "max_position_embeddings": 2048})
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors",
                      {"embed": ("F16", [100, 64]), "norm": ("F32", [64])}, {"format": "pt"})
    write_safetensors(tmp_path / "model-00002-of-00002.safetensors",
                      {"layers.0.q": ("F16", [64, 64]), "scale": ("I64", [3]), "m": ("BOOL", [5])})
    profile = profile_model_dir(tmp_path)
    assert profile.weights_bytes == 100 * 64 * 2 + 64 * 4 + 64 * 64 * 2 + 3 * 8 + 5
    # No num_key_value_heads: one per attention head; no head_dim: hidden_size / heads.
    assert (profile.num_key_value_heads, profile.head_dim) == (4, 16)
    assert profile.dtype == "float16"


def test_index_names_the_shards_and_other_copies_are_ignored(tmp_path: Path) -> None:
    write_config(tmp_path, {"torch_dtype": "bfloat16"})
    write_safetensors(tmp_path / "a.safetensors", {"w": ("BF16", [10])})
    write_safetensors(tmp_path / "consolidated.safetensors", {"w": ("BF16", [1000])})
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "a.safetensors"}}))
    assert profile_model_dir(tmp_path).weights_bytes == 20


def test_multimodal_config_nests_the_language_model(tmp_path: Path) -> None:
    write_config(tmp_path, {"torch_dtype": "bfloat16", "text_config": {
        "num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 256, "hidden_size": 2560, "max_position_embeddings": 131072}})
    write_safetensors(tmp_path / "model.safetensors", {"w": ("BF16", [8])})
    profile = profile_model_dir(tmp_path)
    assert (profile.num_hidden_layers, profile.num_key_value_heads, profile.head_dim,
            profile.max_position_embeddings, profile.dtype) == (34, 4, 256, 131072, "bfloat16")


def test_dtype_taken_from_the_weights_when_the_config_has_none(tmp_path: Path) -> None:
    write_config(tmp_path, {"num_hidden_layers": 1})
    write_safetensors(tmp_path / "model.safetensors",
                      {"big": ("F8_E4M3", [1000]), "small": ("F32", [10])})
    assert profile_model_dir(tmp_path).dtype == "float8_e4m3fn"


def test_falls_back_to_file_sizes_without_safetensors(tmp_path: Path) -> None:
    write_config(tmp_path, {"torch_dtype": "float16"})
    (tmp_path / "pytorch_model.bin").write_bytes(bytes(1234))
    (tmp_path / "extra.gguf").write_bytes(bytes(66))
    assert profile_model_dir(tmp_path).weights_bytes == 1300


def _corrupt_header(directory: Path) -> None:
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"{}")


def _not_json(directory: Path) -> None:
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", 3) + b"{x}")


def _short(directory: Path) -> None:
    (directory / "model.safetensors").write_bytes(b"\x01\x02")


def _unknown_dtype(directory: Path) -> None:
    write_safetensors(directory / "model.safetensors", {"w": ("F32", [2])})
    raw = (directory / "model.safetensors").read_bytes().replace(b'"F32"', b'"C64"')
    (directory / "model.safetensors").write_bytes(raw)


def _missing_shard(directory: Path) -> None:
    (directory / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "model-1.safetensors"}}))


def _no_weights(directory: Path) -> None:
    (directory / "README.md").write_text("no weights")


@pytest.mark.parametrize(("damage", "message"), [
    (_corrupt_header, r"model.safetensors: header length 1000000000000 does not fit a 10-byte"),
    (_not_json, r"model.safetensors: header is not JSON"),
    (_short, r"model.safetensors: 2 bytes, too short for a safetensors header"),
    (_unknown_dtype, r"model.safetensors: tensor 'w' has dtype 'C64'"),
    (_missing_shard, r"model.safetensors.index.json: names shards that are missing: model-1"),
    (_no_weights, r"no weights found: expected \*.safetensors"),
])
def test_unreadable_weights_name_the_file_and_problem(tmp_path: Path, damage: Any,
                                                      message: str) -> None:
    write_config(tmp_path, {"torch_dtype": "float16"})
    damage(tmp_path)
    with pytest.raises(ValueError, match=message):
        profile_model_dir(tmp_path)


@pytest.mark.parametrize(("config", "message"), [
    (None, r"config.json: not found"),
    ("{not json", r"config.json: cannot read as JSON"),
    ("[1, 2]", r"config.json: expected a JSON object, got list"),
    ('{"num_hidden_layers": -1}', r"config.json: num_hidden_layers is -1, expected a positive"),
    ('{"num_hidden_layers": 2}', r"config.json: no torch_dtype or dtype"),
])
def test_unreadable_config_names_the_file_and_problem(tmp_path: Path, config: str | None,
                                                      message: str) -> None:
    if config is not None:
        (tmp_path / "config.json").write_text(config)
    (tmp_path / "pytorch_model.bin").write_bytes(bytes(8))
    with pytest.raises(ValueError, match=message):
        profile_model_dir(tmp_path)
