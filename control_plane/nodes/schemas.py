"""JSON shapes of Triton nodes."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, StringConstraints

from control_plane.nodes.orm import TritonNode
from control_plane.registry.schemas import MODEL_NAME_PATTERN, Labels

NodeName = Annotated[str, StringConstraints(pattern=MODEL_NAME_PATTERN)]
GrpcAddress = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9.-]{1,253}:[0-9]{1,5}$")]
ApiKeyRef = Annotated[str, StringConstraints(
    pattern=r"^(env:[A-Za-z_][A-Za-z0-9_]{0,127}|file:/\S{1,500})$")]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NodeCreate(_Input):
    name: NodeName
    http_url: AnyHttpUrl
    grpc_url: GrpcAddress = Field(description="host:port of Triton's gRPC endpoint")
    labels: Labels = Field(default_factory=dict)
    api_key_ref: ApiKeyRef | None = Field(
        default=None, description="where the repository-API key is: env:VAR or file:/path")


class NodeUpdate(_Input):
    http_url: AnyHttpUrl | None = None
    grpc_url: GrpcAddress | None = None
    labels: Labels | None = None
    api_key_ref: ApiKeyRef | None = None


class NodeOut(BaseModel):
    name: str
    http_url: str
    grpc_url: str
    labels: dict[str, str]
    api_key_ref: str | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, node: TritonNode) -> NodeOut:
        return cls(name=node.name, http_url=node.http_url, grpc_url=node.grpc_url,
                   labels=node.labels, api_key_ref=node.api_key_ref, created_at=node.created_at,
                   updated_at=node.updated_at)
