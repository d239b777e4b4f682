"""The JSON shapes of promotions: what a client asks for and what it gets back."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from control_plane.labels import NO_NUL_PATTERN
from control_plane.promotions.manifest import VersionManifest
from control_plane.promotions.orm import Promotion, PromotionState
from control_plane.registry.gates import Gates
from control_plane.registry.schemas import MODEL_NAME_PATTERN

AliasName = Annotated[str, StringConstraints(pattern=MODEL_NAME_PATTERN)]
StepState = Literal["pending", "running", "succeeded", "failed", "skipped"]
# The steps of a version's promotion, in the order they run.
STEPS = ("register", "deploy_candidate", "gates_candidate", "swap", "gates_served",
         "remove_candidate")
# The steps of an adapter's: registered under the alias's version, loaded on its deployments
# out of the routing table, gated there, then routed.
ADAPTER_STEPS = ("register", "load_adapter", "gates_adapter", "publish_adapter")


class AdapterPromotion(BaseModel):
    """A LoRA adapter to bring to the alias's deployments: already registered under the version
    the alias serves (``name`` only), or registered first from ``source`` (with its gates)."""

    model_config = ConfigDict(extra="forbid")

    name: AliasName = Field(description="the adapter's name: what clients send as lora_name")
    source: Annotated[str, StringConstraints(min_length=1, max_length=1024)] | None = Field(
        default=None, description="register it first from this adapter directory (absolute "
                                  "path under a source root); omit for a registered adapter")
    gates: Gates | None = Field(
        default=None, description="its gates, when registering it from source (a registered "
                                  "adapter's gates are the ones it was registered with)")

    @model_validator(mode="after")
    def _gates_come_with_registration(self) -> Self:
        if self.gates is not None and self.source is None:
            raise ValueError("gates are given with source, when the promotion registers the "
                             "adapter; a registered adapter is promoted with the gates it was "
                             "registered with")
        return self


class PromotionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = Field(
        default=None, description="an already registered version; or give manifest")
    manifest: VersionManifest | None = Field(
        default=None, description="a version to register first (its gates come with it)")
    adapter: AdapterPromotion | None = Field(
        default=None, description="promote a LoRA adapter of the version the alias serves "
                                  "instead of a version: the alias does not move")
    to: AliasName = Field(description="the alias to move (or, for an adapter, whose "
                                      "deployments get it), e.g. production")
    nodes: list[AliasName] = Field(
        default_factory=list, max_length=64,
        description="nodes to serve the alias on when it runs nowhere yet; ignored otherwise")
    ci_run_url: Annotated[str, StringConstraints(max_length=2048, pattern=NO_NUL_PATTERN)] | \
        None = None
    git_sha: Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{7,64}$")] | None = None

    @model_validator(mode="after")
    def _one_version(self) -> Self:
        if [self.version, self.manifest, self.adapter].count(None) != 2:
            raise ValueError("give exactly one of version (a registered version's number), "
                             "manifest (a version to register) and adapter (a LoRA adapter of "
                             "the version the alias serves)")
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
    adapter: str | None = Field(description="the LoRA adapter promoted (under version); null: "
                                            "a version's promotion")
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
                   adapter=promotion.adapter, state=PromotionState(promotion.state),
                   failed_step=promotion.failed_step,
                   error=promotion.error,
                   steps=[StepOut.model_validate(step) for step in promotion.steps],
                   gate_results=[GateResultOut.model_validate(result)
                                 for result in promotion.gate_results],
                   nodes=promotion.nodes,
                   requested_by=promotion.requested_by, ci_run_url=promotion.ci_run_url,
                   git_sha=promotion.git_sha, created_at=promotion.created_at,
                   updated_at=promotion.updated_at, finished_at=promotion.finished_at)

