"""JSON shapes of serving statistics."""

from __future__ import annotations

from pydantic import BaseModel, Field

from control_plane.stats.aggregate import WindowStats
from control_plane.stats.service import ModelStats


class QuantilesOut(BaseModel):
    p50: float | None = Field(description="None: nothing was counted in the window")
    p95: float | None


class StatsOut(BaseModel):
    seconds: float = Field(description="between the two readings the figures come from")
    requests_per_second: float
    errors_per_second: float = Field(description="requests Triton answered with an error")
    errors: dict[str, float] = Field(
        description="requests ended badly in the window: failed (Triton's count), abort and "
                    "error (vLLM's finished reasons)")
    prompt_tokens_per_second: float
    generated_tokens_per_second: float
    queue_time_seconds: QuantilesOut = Field(description="in vLLM's scheduler")
    time_to_first_token_seconds: QuantilesOut = Field(
        description="from the backend receiving a request")
    inter_token_latency_seconds: QuantilesOut
    waiting: dict[str, float] = Field(description="now, in the backend's queue, by priority level")
    running: dict[str, float] = Field(description="now, in the engine, by priority level")

    @classmethod
    def of(cls, stats: WindowStats) -> StatsOut:
        return cls(
            seconds=round(stats.seconds, 3), requests_per_second=stats.requests_per_second,
            errors_per_second=stats.errors_per_second, errors=stats.errors,
            prompt_tokens_per_second=stats.prompt_tokens_per_second,
            generated_tokens_per_second=stats.generated_tokens_per_second,
            queue_time_seconds=QuantilesOut(**vars(stats.queue_time_seconds)),
            time_to_first_token_seconds=QuantilesOut(**vars(stats.time_to_first_token_seconds)),
            inter_token_latency_seconds=QuantilesOut(**vars(stats.inter_token_latency_seconds)),
            waiting=stats.waiting, running=stats.running)


class DeploymentStatsOut(BaseModel):
    alias: str
    node: str
    version: int | None = Field(description="the version serving there (None: none yet)")
    triton_model: str
    state: str
    stats: StatsOut | None
    unavailable: str | None = Field(description="why stats is None")


class ModelStatsOut(BaseModel):
    model: str
    alias: str | None
    window_seconds: float
    deployments: list[DeploymentStatsOut]
    by_version: dict[int, StatsOut]
    total: StatsOut | None = Field(description="every deployment together (None: no figures)")

    @classmethod
    def of(cls, stats: ModelStats) -> ModelStatsOut:
        return cls(
            model=stats.model, alias=stats.alias, window_seconds=stats.window_seconds,
            deployments=[DeploymentStatsOut(
                alias=d.alias, node=d.node, version=d.version, triton_model=d.triton_model,
                state=d.state, stats=None if d.stats is None else StatsOut.of(d.stats),
                unavailable=d.unavailable) for d in stats.deployments],
            by_version={v: StatsOut.of(s) for v, s in stats.by_version.items()},
            total=None if stats.total is None else StatsOut.of(stats.total))
