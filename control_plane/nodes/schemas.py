"""JSON shapes of Triton nodes."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import (
    AfterValidator,
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    UrlConstraints,
)

from control_plane.gpus.sources import SPEC_PATTERN
from control_plane.nodes.orm import TritonNode
from control_plane.nodes.triton_version import ObservedVersion
from control_plane.registry.schemas import MODEL_NAME_PATTERN, Labels

NodeName = Annotated[str, StringConstraints(pattern=MODEL_NAME_PATTERN)]
GrpcAddress = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9.-]{1,253}:[0-9]{1,5}$")]
# No NUL in the path: PostgreSQL cannot store one.
ApiKeyRef = Annotated[str, StringConstraints(
    pattern=r"^(env:[A-Za-z_][A-Za-z0-9_]{0,127}|file:/[^\s\x00]{1,500})$")]
MAX_URL_LENGTH = 512  # the column's size


def _fits_column(url: AnyHttpUrl) -> AnyHttpUrl:
    # Normalising can lengthen a URL (percent-encoding, a trailing slash), so the stored form is
    # what is measured; a longer one failed the INSERT on PostgreSQL with a 500.
    if len(str(url)) > MAX_URL_LENGTH:
        raise ValueError(f"is longer than {MAX_URL_LENGTH} characters once normalised")
    return url


GpuInventorySpec = Annotated[str, StringConstraints(pattern=SPEC_PATTERN)]
GpuUuid = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9:._-]{0,95}$")]
ExcludedGpus = Annotated[list[GpuUuid], Field(max_length=64)]
_INVENTORY_HELP = ("where the node's GPU readings come from: nvml, metrics:<url of Triton's "
                   "/metrics>, static:<file> or simulated:<file> (JSON/YAML); none: no GPUs")
_EXCLUDED_HELP = "GPU UUIDs kept out of placement"
_METRICS_HELP = ("Triton's Prometheus metrics page, e.g. http://10.0.0.5:8002/metrics; the "
                 "inference gateway reads the backend's queue gauges there")

NodeHttpUrl = Annotated[AnyHttpUrl, UrlConstraints(max_length=MAX_URL_LENGTH),
                        AfterValidator(_fits_column)]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NodeCreate(_Input):
    name: NodeName
    http_url: NodeHttpUrl
    grpc_url: GrpcAddress = Field(description="host:port of Triton's gRPC endpoint")
    metrics_url: NodeHttpUrl | None = Field(default=None, description=_METRICS_HELP)
    labels: Labels = Field(default_factory=dict)
    api_key_ref: ApiKeyRef | None = Field(
        default=None, description="where the repository-API key is: env:VAR or file:/path")
    gpu_inventory: GpuInventorySpec | None = Field(default=None, description=_INVENTORY_HELP)
    excluded_gpus: ExcludedGpus = Field(default_factory=list, description=_EXCLUDED_HELP)


class NodeRegistration(_Input):
    """What a node's agent says of itself when it joins: how to reach it, never what operators
    decide for it (excluded GPUs)."""

    http_url: NodeHttpUrl
    grpc_url: GrpcAddress = Field(description="host:port of Triton's gRPC endpoint")
    metrics_url: NodeHttpUrl | None = Field(default=None, description=_METRICS_HELP)
    labels: Labels = Field(default_factory=dict)
    api_key_ref: ApiKeyRef | None = Field(
        default=None, description="where the control plane reads the node's repository-API key: "
                                  "env:VAR or file:/path")
    gpu_inventory: GpuInventorySpec | None = Field(default=None, description=_INVENTORY_HELP)


class NodeLeave(BaseModel):
    node: str
    removed: bool = Field(description="true: nothing was deployed there and the node is "
                                      "forgotten; false: it stays, cordoned, for its deployments")
    detail: str


class NodeUpdate(_Input):
    http_url: NodeHttpUrl | None = None
    grpc_url: GrpcAddress | None = None
    metrics_url: NodeHttpUrl | None = Field(default=None,
                                            description=_METRICS_HELP + "; null removes it")
    labels: Labels | None = None
    api_key_ref: ApiKeyRef | None = None
    gpu_inventory: GpuInventorySpec | None = Field(default=None, description=_INVENTORY_HELP)
    excluded_gpus: ExcludedGpus | None = Field(default=None, description=_EXCLUDED_HELP)
    cordoned: bool | None = Field(
        default=None, description="true: route nothing to the node and place nothing new there; "
                                  "false: back in service")


# Observed by the reconciler, not configured: left out of the audit log's snapshots.
OBSERVED_FIELDS = frozenset({"server_version", "version_warning"})


class NodeOut(BaseModel):
    name: str
    http_url: str
    grpc_url: str
    metrics_url: str | None
    labels: dict[str, str]
    api_key_ref: str | None
    gpu_inventory: str | None
    excluded_gpus: list[str]
    cordoned_at: datetime | None = Field(
        description="since when the node is out of service (routing and placement skip it); "
                    "null while it serves")
    created_at: datetime
    updated_at: datetime
    server_version: str | None = Field(
        description="Triton's version as the reconciler last read it; null before its first look")
    version_warning: str | None = Field(
        description="set when the version is older than LLMCP_MIN_TRITON_VERSION")

    @classmethod
    def of(cls, node: TritonNode, version: ObservedVersion | None = None) -> NodeOut:
        return cls(name=node.name, http_url=node.http_url, grpc_url=node.grpc_url,
                   metrics_url=node.metrics_url, labels=node.labels,
                   api_key_ref=node.api_key_ref, gpu_inventory=node.gpu_inventory,
                   excluded_gpus=node.excluded_gpus, cordoned_at=node.cordoned_at,
                   created_at=node.created_at,
                   updated_at=node.updated_at,
                   server_version=None if version is None else version.server_version,
                   version_warning=None if version is None else version.warning)
