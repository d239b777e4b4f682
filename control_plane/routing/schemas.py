"""JSON shape of the routing table the inference gateway polls."""

from __future__ import annotations

from pydantic import BaseModel, Field

from control_plane.tenants.orm import PriorityOverLimit


class RoutedEndpoint(BaseModel):
    """One node that serves a model alias now."""

    node: str
    http_url: str = Field(description="host:port of the node's Triton HTTP endpoint")
    grpc_url: str = Field(description="host:port of the node's Triton gRPC endpoint")
    metrics_url: str | None = Field(description="the node's Prometheus page, if registered")
    triton_model: str = Field(description="the Triton model name to send requests to")
    version: int = Field(description="the version the node serves (during a swap, the old one "
                                     "until the new one is ready)")
    adapters: list[str] = Field(description="names of the LoRA adapters loaded there, sorted: "
                                            "what a request may name as lora_name")


class RoutedModel(BaseModel):
    """A served name (M for production, M.<alias> otherwise) and the nodes that serve it."""

    name: str
    model: str
    alias: str
    version: int = Field(description="the alias's current version")
    max_model_len: int | None = Field(description="from the version's engine_args; null: unset")
    endpoints: list[RoutedEndpoint]


class RoutedTenant(BaseModel):
    name: str
    enabled: bool
    allowed_models: list[str]
    max_priority_level: int
    default_priority_level: int | None
    priority_over_limit: PriorityOverLimit
    limits: dict[str, int] = Field(default_factory=dict,
                                   description="the limits set (TenantLimits' fields)")
    model_limits: dict[str, dict[str, int]] = Field(default_factory=dict)
    weight: float = Field(default=1.0, description="fair-share weight inside a priority level")
    key_hashes: list[str] = Field(description="sha256 (hex) of each active key's secret")


class RoutingTable(BaseModel):
    revision: str = Field(description="sha256 of the content: equal tables, equal revisions; "
                                      "pass it as ?after= to wait for a change")
    models: list[RoutedModel]
    tenants: list[RoutedTenant]
