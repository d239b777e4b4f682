"""JSON shapes of scaling policies and decisions."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from control_plane.autoscaling.orm import ScalingDecisionRow, ScalingPolicyRow
from control_plane.autoscaling.policy import ScalingMetric


class ScalingPolicyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min_engines: int = Field(ge=1, le=64, description="engines (deployments of the alias, one "
                                                      "per node) the alias never goes below")
    max_engines: int = Field(ge=1, le=64, description="engines it never goes above")
    metric: ScalingMetric = Field(description="what the target is a value of")
    target: float = Field(gt=0, le=1e6, description="waiting requests per engine, or seconds "
                                                     "of p95 queue time or TTFT")
    scale_up_window_s: float = Field(default=60.0, ge=0, le=3600, description=(
        "the metric must stay above the target this long before an engine is added"))
    scale_down_window_s: float = Field(default=300.0, ge=0, le=86400, description=(
        "and below it this long before one is removed (drained first)"))
    cooldown_s: float = Field(default=120.0, ge=0, le=86400,
                              description="no change this long after the last one")
    enabled: bool = True

    @model_validator(mode="after")
    def _bounds_in_order(self) -> Self:
        if self.max_engines < self.min_engines:
            raise ValueError(f"max_engines {self.max_engines} is below min_engines "
                             f"{self.min_engines}; raise max_engines or lower min_engines")
        return self


class ScalingPolicyOut(ScalingPolicyIn):
    model: str
    alias: str
    last_change_at: datetime | None
    created_at: datetime
    updated_at: datetime
    updated_by: str

    @classmethod
    def of(cls, row: ScalingPolicyRow, model: str) -> ScalingPolicyOut:
        return cls(model=model, alias=row.alias, min_engines=row.min_engines,
                   max_engines=row.max_engines, metric=ScalingMetric(row.metric),
                   target=row.target, scale_up_window_s=row.scale_up_window_s,
                   scale_down_window_s=row.scale_down_window_s, cooldown_s=row.cooldown_s,
                   enabled=row.enabled, last_change_at=row.last_change_at,
                   created_at=row.created_at, updated_at=row.updated_at,
                   updated_by=row.updated_by)


class ScalingDecisionOut(BaseModel):
    decided_at: datetime
    action: str = Field(description="scale_up, scale_down or hold")
    engines: int = Field(description="engines serving when it was decided")
    desired: int
    reason: str
    inputs: dict[str, Any] = Field(description="the metric's readings and recommendations")
    operation_id: str | None = Field(description="the deployment operation a change started")
    node: str | None = Field(description="where an engine was added or removed")
    error: str | None = Field(description="why a change could not start")

    @classmethod
    def of(cls, row: ScalingDecisionRow) -> ScalingDecisionOut:
        return cls(decided_at=row.decided_at, action=row.action, engines=row.engines,
                   desired=row.desired, reason=row.reason, inputs=row.inputs,
                   operation_id=row.operation_id, node=row.node, error=row.error)
