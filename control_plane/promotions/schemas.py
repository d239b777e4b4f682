"""The JSON shapes of promotions: what a client asks for and what it gets back."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from control_plane.labels import NO_NUL_PATTERN
from control_plane.promotions.manifest import VersionManifest
from control_plane.promotions.orm import Promotion, PromotionState
from control_plane.registry.schemas import MODEL_NAME_PATTERN

AliasName = Annotated[str, StringConstraints(pattern=MODEL_NAME_PATTERN)]
StepState = Literal["pending", "running", "succeeded", "failed", "skipped"]
# The steps of every promotion, in the order they run.
STEPS = ("register", "deploy_candidate", "gates_candidate", "swap", "gates_served",
         "remove_candidate")


class PromotionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = Field(
        default=None, description="an already registered version; or give manifest")
    manifest: VersionManifest | None = Field(
        default=None, description="a version to register first (its gates come with it)")
    to: AliasName = Field(description="the alias to move, e.g. production")
    nodes: list[AliasName] = Field(
        default_factory=list, max_length=64,
        description="nodes to serve the alias on when it runs nowhere yet; ignored otherwise")
    ci_run_url: Annotated[str, StringConstraints(max_length=2048, pattern=NO_NUL_PATTERN)] | \
        None = None
    git_sha: Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{7,64}$")] | None = None

    @model_validator(mode="after")
    def _one_version(self) -> Self:
        if (self.version is None) == (self.manifest is None):
            raise ValueError("give exactly one of version (a registered version's number) and "
                             "manifest (a version to register)")
        return self


class StepOut(BaseModel):
    name: str
    state: StepState
    started_at: datetime | None = None
    finished_at: datetime | None = None
    detail: str | None = None


class GateResultOut(BaseModel):
    gate: str
    kind: Literal["smoke", "compare"]
    phase: Literal["candidate", "served"]
    passed: bool | None = Field(description="None: skipped (see reason)")
    prompt: str | None = None
    expectation: dict[str, Any] = Field(default_factory=dict)
    actual: dict[str, Any] = Field(default_factory=dict,
                                   description="what the version answered and the measured values")
    reason: str | None = None


class PromotionOut(BaseModel):
    id: str
    model: str
    alias: str
    version: int | None
    from_version: int | None
    state: PromotionState
    failed_step: str | None
    error: str | None
    steps: list[StepOut]
    gate_results: list[GateResultOut]
    nodes: list[str]
    requested_by: str
    ci_run_url: str | None
    git_sha: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    @classmethod
    def of(cls, promotion: Promotion) -> PromotionOut:
        return cls(id=promotion.id, model=promotion.model.name, alias=promotion.alias,
                   version=promotion.version, from_version=promotion.from_version,
                   state=PromotionState(promotion.state), failed_step=promotion.failed_step,
                   error=promotion.error, steps=promotion.steps,
                   gate_results=promotion.gate_results, nodes=promotion.nodes,
                   requested_by=promotion.requested_by, ci_run_url=promotion.ci_run_url,
                   git_sha=promotion.git_sha, created_at=promotion.created_at,
                   updated_at=promotion.updated_at, finished_at=promotion.finished_at)

