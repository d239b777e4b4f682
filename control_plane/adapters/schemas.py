"""JSON shapes of adapters and of the adapters wanted on deployments."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from control_plane.adapters.orm import Adapter, AdapterState, DeploymentAdapter
from control_plane.operations.schemas import OperationOut
from control_plane.registry.gates import Gates
from control_plane.registry.schemas import MODEL_NAME_PATTERN

# Clients send it as sampling_parameters.lora_name and the gateway routes M:<name>: nothing that
# could be read as a path, a separator or a Triton name.
ADAPTER_NAME_PATTERN = MODEL_NAME_PATTERN
AdapterName = Annotated[str, StringConstraints(pattern=ADAPTER_NAME_PATTERN)]


class _Input(BaseModel):
    # An unknown field is refused rather than ignored: a typo must not silently do nothing.
    model_config = ConfigDict(extra="forbid")


class AdapterCreate(_Input):
    name: AdapterName = Field(description="what clients send as sampling_parameters.lora_name")
    source: Annotated[str, StringConstraints(min_length=1, max_length=1024)] = Field(
        description="absolute path, under a configured source root, of a PEFT adapter "
                    "directory (adapter_config.json and adapter_model.safetensors); the node "
                    "loads it from the same path")
    gates: Gates = Field(default_factory=Gates,
                         description="what a promotion of the adapter runs against it (POST "
                                     "/api/v1/models/{name}/promotions with adapter), as a "
                                     "version's gates: smoke prompts sent with lora_name, and a "
                                     "comparison with the version's answers without an adapter")


class AdapterOut(BaseModel):
    model: str
    version: int
    name: str
    source: str
    checksum: str | None
    rank: int = Field(description="the LoRA rank (adapter_config.json's r)")
    target_modules: list[str]
    base_model: str = Field(description="adapter_config.json's base_model_name_or_path")
    gates: Gates
    created_by: str
    created_at: datetime

    @classmethod
    def of(cls, adapter: Adapter) -> AdapterOut:
        return cls(model=adapter.version.model.name, version=adapter.version.number,
                   name=adapter.name, source=adapter.source, checksum=adapter.checksum,
                   rank=adapter.rank, target_modules=adapter.target_modules,
                   base_model=adapter.base_model, gates=Gates.model_validate(adapter.gates),
                   created_by=adapter.created_by, created_at=adapter.created_at)


class AdapterLoadRequest(_Input):
    name: AdapterName
    version: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = Field(
        default=None, description="the version the adapter is registered under; default (and "
                                  "the only one accepted): the version the deployment serves")


class DeploymentAdapterOut(BaseModel):
    """An adapter wanted on a deployment, and its state there."""

    deployment_id: int
    model: str
    alias: str
    node: str
    triton_name: str
    name: str
    version: int
    rank: int
    state: AdapterState
    routed: bool = Field(description="in the routing table once loaded; false while a "
                                     "promotion gates it")
    error: str | None
    updated_by: str
    updated_at: datetime

    @classmethod
    def of(cls, row: DeploymentAdapter) -> DeploymentAdapterOut:
        deployment, adapter = row.deployment, row.adapter
        return cls(deployment_id=deployment.id, model=adapter.version.model.name,
                   alias=deployment.alias, node=deployment.node.name,
                   triton_name=deployment.triton_name, name=adapter.name,
                   version=adapter.version.number, rank=adapter.rank,
                   state=AdapterState(row.state), routed=row.routed, error=row.error,
                   updated_by=row.updated_by,
                   updated_at=row.updated_at)


class DeploymentAdapterStarted(BaseModel):
    """A 202: the adapter as now wanted on the deployment, and the operation that makes it so."""

    adapter: DeploymentAdapterOut
    operation: OperationOut
