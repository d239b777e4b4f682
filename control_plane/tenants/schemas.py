"""JSON shapes of tenants and their inference API keys (a key's secret appears once)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from control_plane.registry.schemas import MODEL_NAME_PATTERN
from control_plane.registry.serving import Level
from control_plane.tenants.limits import ModelLimits, TenantLimits
from control_plane.tenants.orm import ALL_MODELS, InferenceApiKey, PriorityOverLimit, Tenant

_MODEL_NAME = re.compile(MODEL_NAME_PATTERN)
MAX_ALLOWED_MODELS = 256


def _allowed_models(names: list[str]) -> list[str]:
    if not names:
        raise ValueError("is empty, so the tenant could call no model; list model names, give "
                         "[\"*\"] for every model, or set enabled to false")
    if ALL_MODELS in names and len(set(names)) > 1:
        raise ValueError("\"*\" (every model) must stand alone; drop it or the other names")
    for name in names:
        if name != ALL_MODELS and not _MODEL_NAME.match(name):
            raise ValueError(
                f"'{name}' is not a model name (1-64 lowercase letters, digits, '_' or '-', "
                "starting with a letter or digit); name the model, not an alias: 'M' allows "
                "M and every M.<alias>")
    return list(dict.fromkeys(names))


AllowedModels = Annotated[list[str], Field(
    max_length=MAX_ALLOWED_MODELS,
    description="model names the tenant may call (M allows M and every M.<alias>), or [\"*\"]"),
    AfterValidator(_allowed_models)]
_MAX_LEVEL_HELP = "the most urgent priority level the tenant may use (1 = the most urgent: any)"
_DEFAULT_LEVEL_HELP = ("the level of a request that names none; null: the model's default. "
                       "Not more urgent than max_priority_level")
_WEIGHT_HELP = ("its share of a priority level against the other tenants waiting there: 2 gets "
                "twice the service (weighted tokens) of 1 while both wait")
Weight = Annotated[float, Field(gt=0, le=1000)]
_OVER_LIMIT_HELP = ("a request for a level more urgent than max_priority_level: refuse it, or "
                    "lower it to max_priority_level")


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TenantCreate(_Input):
    name: str = Field(max_length=64, description="letters, digits, '.', '_', '@' or '-'")
    allowed_models: AllowedModels = Field(default_factory=lambda: [ALL_MODELS])
    max_priority_level: Level = Field(default=1, description=_MAX_LEVEL_HELP)
    default_priority_level: Level | None = Field(default=None, description=_DEFAULT_LEVEL_HELP)
    priority_over_limit: PriorityOverLimit = Field(default=PriorityOverLimit.REFUSE,
                                                   description=_OVER_LIMIT_HELP)
    enabled: bool = Field(default=True, description="false: the gateway refuses its requests")
    limits: TenantLimits = Field(default_factory=TenantLimits,
                                 description="the tenant's limits over all models; unset: none")
    model_limits: ModelLimits = Field(default_factory=dict)
    weight: Weight = Field(default=1.0, description=_WEIGHT_HELP)


# Fields that have a value in every tenant: a PATCH may leave them out, not set them to null.
_NOT_NULLABLE = ("allowed_models", "max_priority_level", "priority_over_limit", "enabled",
                 "limits", "model_limits", "weight")


class TenantUpdate(_Input):
    """Only the fields given change; ``default_priority_level: null`` returns it to the model's
    default. ``limits`` and ``model_limits`` are replaced whole when given (``{}``: none)."""

    allowed_models: AllowedModels | None = None
    max_priority_level: Level | None = Field(default=None, description=_MAX_LEVEL_HELP)
    default_priority_level: Level | None = Field(default=None, description=_DEFAULT_LEVEL_HELP)
    priority_over_limit: PriorityOverLimit | None = Field(default=None,
                                                          description=_OVER_LIMIT_HELP)
    enabled: bool | None = None
    limits: TenantLimits | None = None
    model_limits: ModelLimits | None = None
    weight: Weight | None = Field(default=None, description=_WEIGHT_HELP)

    @model_validator(mode="after")
    def _no_null_where_a_value_is_needed(self) -> Self:
        nulls = [name for name in _NOT_NULLABLE
                 if name in self.model_fields_set and getattr(self, name) is None]
        if nulls:
            raise ValueError(f"{', '.join(nulls)} cannot be null; leave a field out to keep its "
                             "value")
        return self


class TenantOut(BaseModel):
    name: str
    allowed_models: list[str]
    max_priority_level: int
    default_priority_level: int | None
    priority_over_limit: PriorityOverLimit
    enabled: bool
    limits: TenantLimits
    model_limits: dict[str, TenantLimits]
    weight: float
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, tenant: Tenant) -> TenantOut:
        return cls(name=tenant.name, allowed_models=tenant.allowed_models,
                   max_priority_level=tenant.max_priority_level,
                   default_priority_level=tenant.default_priority_level,
                   priority_over_limit=PriorityOverLimit(tenant.priority_over_limit),
                   enabled=tenant.enabled, limits=TenantLimits.model_validate(tenant.limits),
                   model_limits={name: TenantLimits.model_validate(item)
                                 for name, item in tenant.model_limits.items()},
                   weight=tenant.weight, created_at=tenant.created_at,
                   updated_at=tenant.updated_at)


class KeyCreate(_Input):
    name: str = Field(max_length=64, description="who or what uses the key, e.g. the client app")


class KeyOut(BaseModel):
    """A key as listed: never its secret or hash; revoked ones are flagged."""

    id: int
    name: str
    prefix: str = Field(description="the start of the secret, to recognise it")
    created_at: datetime
    revoked: bool
    revoked_at: datetime | None

    @classmethod
    def of(cls, key: InferenceApiKey) -> KeyOut:
        return cls(id=key.id, name=key.name, prefix=key.prefix, created_at=key.created_at,
                   revoked=key.revoked_at is not None, revoked_at=key.revoked_at)


class KeyCreated(BaseModel):
    id: int
    name: str
    prefix: str
    key: str = Field(description="the secret clients send to the gateway; shown only here")
    created_at: datetime
