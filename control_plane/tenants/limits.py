"""What a tenant may use per minute and per day, as the admin API takes it and the gateway
enforces it: requests and tokens (prompt + generated) per minute, requests in flight at once,
and tokens per UTC day. Unset: unlimited. Pure data."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from control_plane.registry.schemas import MODEL_NAME_PATTERN

_MODEL_NAME = re.compile(MODEL_NAME_PATTERN)
MAX_MODEL_LIMITS = 256
Count = Annotated[int, Field(ge=1, le=10**12)]


class TenantLimits(BaseModel):
    # A misspelt limit must not silently leave a tenant unlimited.
    model_config = ConfigDict(extra="forbid")

    requests_per_minute: Count | None = Field(default=None,
                                              description="requests started per minute")
    tokens_per_minute: Count | None = Field(
        default=None, description="prompt + generated tokens per minute; a request reserves "
                                  "its prompt and max_tokens when admitted and settles to what "
                                  "it used when it ends")
    concurrent_requests: Annotated[int, Field(ge=1, le=1_000_000)] | None = Field(
        default=None, description="requests in flight at once")
    daily_tokens: Count | None = Field(default=None,
                                       description="prompt + generated tokens per UTC day")

    def as_json(self) -> dict[str, int]:
        """Only the limits that are set."""
        return self.model_dump(exclude_none=True)


def _model_names(limits: dict[str, TenantLimits]) -> dict[str, TenantLimits]:
    for name in limits:
        if not _MODEL_NAME.match(name):
            raise ValueError(f"'{name}' is not a model name; model_limits are per model (M "
                             "covers M and every M.<alias>)")
    return limits


ModelLimits = Annotated[dict[str, TenantLimits], Field(
    max_length=MAX_MODEL_LIMITS,
    description="limits of the tenant's requests to one model, on top of its own limits"),
    AfterValidator(_model_names)]


def model_limits_json(limits: dict[str, TenantLimits]) -> dict[str, dict[str, Any]]:
    return {name: item.as_json() for name, item in sorted(limits.items()) if item.as_json()}
