"""How a version is served: priority levels, queue policies and back-pressure, as a client writes
them. The Triton config builder turns them into model config ``parameters`` that the backend's own
queue enforces; Triton's ``dynamic_batching`` is left empty, since its priority levels and queue
policies would turn payload prefetching off."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Bounds keep every value inside what Triton's protobuf fields and our database hold.
MAX_LEVELS = 16
MICROSECONDS_PER_DAY = 86_400_000_000
Level = Annotated[int, Field(ge=1, le=MAX_LEVELS)]


class QueuePolicy(BaseModel):
    """One priority level's queue, with the fields of Triton's ``ModelQueuePolicy``."""

    model_config = ConfigDict(extra="forbid")

    # The backend holds waiting requests itself and implements REJECT only (DELAY is refused).
    timeout_action: Literal["REJECT"] = "REJECT"
    default_timeout_microseconds: Annotated[int, Field(
        ge=0, le=MICROSECONDS_PER_DAY, description="0: a request may wait forever")] = 0
    allow_timeout_override: bool = Field(
        default=True, description="a request's own timeout may shorten (never lengthen) the wait")
    max_queue_size: Annotated[int, Field(ge=0, le=1_000_000, description="0: unbounded")] = 0


def _seconds(value: int) -> int:
    return value * 1_000_000


class ServingSettings(BaseModel):
    """Batching and priority settings of a version. The defaults are those of the shipped model:
    three levels (1 interactive, 2 elevated, 3 standard and default)."""

    model_config = ConfigDict(extra="forbid")

    priority_levels: Level = 3
    default_priority_level: Level | None = Field(
        default=None, description="defaults to the lowest level (priority_levels)")
    default_queue_policy: QueuePolicy = Field(default_factory=lambda: QueuePolicy(
        default_timeout_microseconds=_seconds(120), max_queue_size=256))
    priority_queue_policies: dict[Level, QueuePolicy] = Field(
        default_factory=lambda: {
            1: QueuePolicy(default_timeout_microseconds=_seconds(30), max_queue_size=16),
            2: QueuePolicy(default_timeout_microseconds=_seconds(60), max_queue_size=64),
        },
        description="per-level queue policy; a level without one uses default_queue_policy")
    max_inflight_requests: Annotated[int, Field(ge=1, le=65_536)] | None = Field(
        default=None, description="requests handed to vLLM at once; default: its max_num_seqs")
    reserved_urgent_slots: Annotated[int, Field(ge=0, le=65_535)] = Field(
        default=1, description="engine slots only levels <= urgent_priority_level may take")
    urgent_priority_level: Level = 1
    drain_timeout_seconds: Annotated[float, Field(ge=0, le=86_400)] = Field(
        default=30, description="how long an unload waits for in-flight streams")

    @model_validator(mode="after")
    def _levels_agree(self) -> Self:
        problems = []
        if self.default_priority_level is not None and \
                self.default_priority_level > self.priority_levels:
            problems.append(f"default_priority_level {self.default_priority_level} is not one of "
                            f"the {self.priority_levels} levels")
        outside = sorted(level for level in self.priority_queue_policies
                         if level > self.priority_levels)
        if outside:
            problems.append(f"priority_queue_policies names level(s) {outside} beyond "
                            f"priority_levels {self.priority_levels}")
        if self.urgent_priority_level > self.priority_levels:
            problems.append(f"urgent_priority_level {self.urgent_priority_level} is not one of "
                            f"the {self.priority_levels} levels")
        if self.max_inflight_requests is not None and \
                self.reserved_urgent_slots >= self.max_inflight_requests:
            problems.append(f"reserved_urgent_slots {self.reserved_urgent_slots} leaves none of "
                            f"the {self.max_inflight_requests} in-flight slots for other levels")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def effective_default_level(self) -> int:
        return self.default_priority_level or self.priority_levels
