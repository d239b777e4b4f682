"""JSON shapes of usage: what a gateway reports, and what a reader gets back."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from control_plane.labels import NO_NUL_PATTERN

Count = Annotated[int, Field(ge=0, le=2**62)]
# PostgreSQL's text holds no NUL byte.
Name = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=NO_NUL_PATTERN)]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UsageEntry(_Input):
    tenant: Name
    model: Name
    hour: datetime = Field(description="the UTC hour's start the counts fall in")
    requests: Count = 0
    prompt_tokens: Count = 0
    output_tokens: Count = 0
    refusals: dict[Name, Count] = Field(default_factory=dict,
                                        description="requests refused, by the limit")


class UsageReportIn(_Input):
    id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{8,64}$")] = Field(
        description="unique per report; a report sent again with the same id is counted once")
    gateway: Annotated[str, StringConstraints(min_length=1, max_length=128,
                                              pattern=NO_NUL_PATTERN)]
    entries: list[UsageEntry] = Field(max_length=10_000)


class UsageReportOut(BaseModel):
    id: str
    counted: bool = Field(description="false: a report with this id was counted before")
    entries: int


class GroupBy(StrEnum):
    MODEL = "model"
    HOUR = "hour"
    DAY = "day"


class UsageRow(BaseModel):
    model: str | None = None
    hour: datetime | None = None
    day: str | None = None
    requests: int
    prompt_tokens: int
    output_tokens: int
    refusals: dict[str, int]


class TenantUsageOut(BaseModel):
    tenant: str
    since: datetime
    until: datetime
    group_by: GroupBy
    rows: list[UsageRow]
    totals: UsageRow
