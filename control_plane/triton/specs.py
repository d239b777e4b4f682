"""What the actuator hands to the outside world: a version to load, a node to reach."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from control_plane.registry.orm import ModelVersion


@dataclass(frozen=True)
class VersionSpec:
    """What a node needs to load one version: everything comes from the registry."""

    model: str
    number: int
    source: str
    engine_args: dict[str, Any]
    serving: dict[str, Any]
    triton_config: dict[str, Any]

    @classmethod
    def of(cls, version: ModelVersion) -> VersionSpec:
        return cls(model=version.model.name, number=version.number, source=version.source,
                   engine_args=dict(version.engine_args), serving=dict(version.serving),
                   triton_config=dict(version.triton_config))


@dataclass(frozen=True)
class NodeEndpoint:
    name: str
    http_url: str
    grpc_url: str
    api_key_ref: str | None
