"""JSON shapes of placement previews and of a node's GPUs."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from control_plane.placement.model import Strategy
from control_plane.registry.schemas import MODEL_NAME_PATTERN

Name = Annotated[str, Field(pattern=MODEL_NAME_PATTERN)]


class PreviewRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Name
    version: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = Field(
        default=None, description="the version to place; or name an alias")
    alias: Name | None = Field(default=None, description="place the alias's current version")
    node: Name | None = Field(default=None, description="only this node; default: every node")
    strategy: Strategy | None = Field(
        default=None, description="best_fit or spread; default: the control plane's setting")

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        if (self.version is None) == (self.alias is None):
            raise ValueError("name exactly one of 'version' and 'alias'")
        return self


class VerdictOut(BaseModel):
    node: str
    gpu_index: int | None
    gpu_uuid: str | None
    rule: str
    detail: str


class RefusalOut(BaseModel):
    summary: str
    verdicts: list[VerdictOut]


class EstimateOut(BaseModel):
    weights_bytes: int
    kv_cache_bytes: int
    overhead_bytes: int
    total_bytes: int
    per_gpu_bytes: int
    tensor_parallel_size: int


class DemandOut(BaseModel):
    device: str
    tensor_parallel_size: int
    replicas: int
    bytes_per_gpu: int | None
    estimate: EstimateOut | None
    estimate_unavailable: str | None


class BookingOut(BaseModel):
    gpu_index: int | None
    gpu_uuid: str
    bytes: int


class PlacementOut(BaseModel):
    node: str
    device: str
    engines: list[list[int]]
    tensor_parallel_size: int
    gpu_memory_utilization: float | None
    simulated: bool = Field(description="the node's Triton has no such GPUs (simulated "
                            "inventory): it loads the engine without them")
    instance_group: list[dict[str, Any]] = Field(
        description="what Triton's config gets (ModelConfig JSON form)")
    bookings: list[BookingOut]
    passed_over: list[VerdictOut]


class PreviewOut(BaseModel):
    decision: Literal["placed", "refused"]
    model: str
    version: int
    demand: DemandOut
    placement: PlacementOut | None
    refusal: RefusalOut | None


class GpuReservationOut(BaseModel):
    model: str
    alias: str
    version: int
    bytes: int
    gpu_memory_utilization: float
    active: bool
    measured_bytes: int | None
    drift_bytes: int | None


class GpuOut(BaseModel):
    index: int
    uuid: str
    name: str
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    memory_free_bytes: int | None
    utilization_percent: float | None
    temperature_c: float | None
    health: str
    detail: str
    excluded: bool
    booked_bytes: int
    bookable_bytes: int | None
    reservations: list[GpuReservationOut]


class GpuSampleOut(BaseModel):
    index: int
    memory_used_bytes: int | None
    utilization_percent: float | None
    health: str


class ReadingOut(BaseModel):
    taken_at: datetime
    error: str | None
    gpus: list[GpuSampleOut]


class NodeGpusOut(BaseModel):
    node: str
    inventory: str | None
    taken_at: datetime | None
    error: str | None
    headroom_fraction: float
    gpus: list[GpuOut]
    history: list[ReadingOut] = Field(description="earlier readings, oldest first (?history=N)")
