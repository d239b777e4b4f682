"""Model configs as Triton's protobuf ``ModelConfig``: read config.pbtxt, change it, hand it to
``load_model(config=...)`` as JSON. Never string templates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2


def read_pbtxt(path: Path) -> model_config_pb2.ModelConfig:
    """Parse a config.pbtxt; a syntax error names the file and line."""
    config = model_config_pb2.ModelConfig()
    text_format.Parse(path.read_text(), config)
    return config


def to_load_json(config: model_config_pb2.ModelConfig) -> str:
    """The JSON form ``load_model(config=...)`` expects (proto field names)."""
    return json_format.MessageToJson(config, preserving_proto_field_name=True)


def set_parameter(config: model_config_pb2.ModelConfig, key: str, value: str) -> None:
    config.parameters[key].string_value = value


def model_json_bytes(engine_args: dict[str, Any]) -> bytes:
    return json.dumps(engine_args, indent=2).encode()


def read_model_json(model_dir: Path, version: int = 1) -> dict[str, Any]:
    data = json.loads((model_dir / str(version) / "model.json").read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{model_dir}/{version}/model.json is not a JSON object")
    return data
