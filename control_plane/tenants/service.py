"""Tenant and inference-key use cases. Each takes the caller's session and flushes; the caller
commits. Every change is audited (target type ``tenant``), never with a key's secret."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from control_plane.auth import audit
from control_plane.auth.scopes import Actor
from control_plane.auth.tokens import TOKEN_NAME
from control_plane.concurrency import check_if_match, etag
from control_plane.db import utcnow
from control_plane.errors import (
    Conflict,
    InferenceKeyNotFound,
    InvalidRequest,
    TenantAlreadyExists,
    TenantNotFound,
)
from control_plane.tenants import keys
from control_plane.tenants.limits import TenantLimits, model_limits_json
from control_plane.tenants.orm import ALL_MODELS, InferenceApiKey, Tenant
from control_plane.tenants.repository import InferenceKeyRepository, TenantRepository
from control_plane.tenants.schemas import KeyOut, TenantCreate, TenantOut, TenantUpdate

_NAME_RULE = "use 1-64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit"


@dataclass(frozen=True)
class IssuedKey:
    key: InferenceApiKey
    secret: str


def _snapshot(tenant: Tenant) -> dict[str, Any]:
    return TenantOut.of(tenant).model_dump(mode="json", exclude={"created_at", "updated_at"})


def _check_name(what: str, name: str) -> None:
    if not TOKEN_NAME.match(name):
        raise InvalidRequest(f"{what} name '{name}' is not allowed: {_NAME_RULE}")


def _check_priorities(max_level: int, default_level: int | None) -> None:
    # Level 1 is the most urgent, so "more urgent than the maximum" is a smaller number.
    if default_level is not None and default_level < max_level:
        raise InvalidRequest(
            f"default_priority_level {default_level} is more urgent than max_priority_level "
            f"{max_level} (1 is the most urgent level): set default_priority_level to "
            f"{max_level} or higher, or to null for the model's default, or lower "
            "max_priority_level")


def tenant_etag(tenant: Tenant) -> str:
    return etag(tenant.id, tenant.revision)


def _check_model_limits(allowed_models: list[str], model_limits: dict[str, TenantLimits]
                        ) -> None:
    if ALL_MODELS in allowed_models:
        return
    stray = sorted(set(model_limits) - set(allowed_models))
    if stray:
        raise InvalidRequest(f"model_limits name {', '.join(stray)}, which the tenant may not "
                             f"use (allowed_models: {', '.join(allowed_models)}); drop them or "
                             "allow the models")


def create_tenant(session: Session, actor: Actor, data: TenantCreate) -> Tenant:
    _check_name("tenant", data.name)
    _check_priorities(data.max_priority_level, data.default_priority_level)
    _check_model_limits(data.allowed_models, data.model_limits)
    repository = TenantRepository(session)
    if repository.get_by_name(data.name) is not None:
        raise TenantAlreadyExists(data.name)
    tenant = Tenant(name=data.name, allowed_models=data.allowed_models,
                    max_priority_level=data.max_priority_level,
                    default_priority_level=data.default_priority_level,
                    priority_over_limit=data.priority_over_limit.value, enabled=data.enabled,
                    limits=data.limits.as_json(), model_limits=model_limits_json(data.model_limits),
                    weight=data.weight)
    try:
        repository.save(tenant)
    except IntegrityError as exc:  # a concurrent create of the same name won the race
        raise TenantAlreadyExists(data.name) from exc
    audit.record(session, actor, "tenant.create", "tenant", tenant.name, after=_snapshot(tenant))
    return tenant


def get_tenant(session: Session, name: str, *, for_update: bool = False) -> Tenant:
    tenant = TenantRepository(session).get_by_name(name, for_update=for_update)
    if tenant is None:
        raise TenantNotFound(name)
    return tenant


def list_tenants(session: Session, limit: int, offset: int) -> tuple[Sequence[Tenant], int]:
    return TenantRepository(session).list(limit, offset)


def update_tenant(session: Session, actor: Actor, name: str, data: TenantUpdate,
                  if_match: str | None = None) -> Tenant:
    """Change the fields ``data`` gives; the result is checked as a whole (a PATCH of only
    max_priority_level must still leave the default level allowed)."""
    tenant = get_tenant(session, name, for_update=True)
    check_if_match(tenant_etag(tenant), if_match, f"tenant '{name}'")
    changes: dict[str, Any] = {field: getattr(data, field) for field in data.model_fields_set}
    max_level = changes.get("max_priority_level", tenant.max_priority_level)
    default_level = changes.get("default_priority_level", tenant.default_priority_level)
    _check_priorities(max_level, default_level)
    model_limits = changes.get("model_limits")
    _check_model_limits(changes.get("allowed_models", tenant.allowed_models),
                        model_limits if model_limits is not None else
                        {n: TenantLimits.model_validate(v) for n, v in tenant.model_limits.items()})
    if "priority_over_limit" in changes:
        changes["priority_over_limit"] = changes["priority_over_limit"].value
    if "limits" in changes:
        changes["limits"] = changes["limits"].as_json()
    if model_limits is not None:
        changes["model_limits"] = model_limits_json(model_limits)
    before = _snapshot(tenant)
    for field, value in changes.items():
        setattr(tenant, field, value)
    after = _snapshot(tenant)
    if after == before:
        return tenant
    tenant.updated_at = utcnow()
    TenantRepository(session).save(tenant)
    audit.record(session, actor, "tenant.update", "tenant", name, before=before, after=after)
    return tenant


def delete_tenant(session: Session, actor: Actor, name: str, if_match: str | None = None
                  ) -> None:
    """Delete the tenant and its keys: the gateway refuses them from its next routing table."""
    tenant = get_tenant(session, name, for_update=True)
    check_if_match(tenant_etag(tenant), if_match, f"tenant '{name}'")
    before = {**_snapshot(tenant),
              "active_keys": InferenceKeyRepository(session).count_active(tenant.id)}
    TenantRepository(session).delete(tenant)
    audit.record(session, actor, "tenant.delete", "tenant", name, before=before)


def create_key(session: Session, actor: Actor, tenant_name: str, key_name: str) -> IssuedKey:
    """A new key for the tenant; its secret exists only in the returned value."""
    _check_name("key", key_name)
    tenant = get_tenant(session, tenant_name, for_update=True)
    repository = InferenceKeyRepository(session)
    if repository.name_taken(tenant.id, key_name):
        raise Conflict(f"tenant '{tenant_name}' already has a key named '{key_name}' (revoked "
                       "keys keep their names); pick another name")
    issued = keys.new_key()
    key = InferenceApiKey(tenant_id=tenant.id, name=key_name, prefix=issued.prefix,
                          secret_hash=issued.secret_hash)
    repository.add(key)
    audit.record(session, actor, "tenant.key.create", "tenant", tenant_name,
                 after=_key_snapshot(key))
    return IssuedKey(key=key, secret=issued.secret)


def list_keys(session: Session, tenant_name: str, limit: int, offset: int
              ) -> tuple[Sequence[InferenceApiKey], int]:
    tenant = get_tenant(session, tenant_name)
    return InferenceKeyRepository(session).of_tenant(tenant.id, limit, offset)


def revoke_key(session: Session, actor: Actor, tenant_name: str, key_id: int) -> InferenceApiKey:
    """Revoke a key; revoking it again changes nothing (it keeps its first revoked_at)."""
    tenant = get_tenant(session, tenant_name)
    repository = InferenceKeyRepository(session)
    key = repository.get(tenant.id, key_id)
    if key is None:
        raise InferenceKeyNotFound(tenant_name, key_id)
    now: datetime = utcnow()
    if repository.revoke(key, now):
        audit.record(session, actor, "tenant.key.revoke", "tenant", tenant_name,
                     after=_key_snapshot(key))
    return key


def _key_snapshot(key: InferenceApiKey) -> dict[str, Any]:
    # The prefix identifies the key to a reader of the audit log; the secret never appears.
    return KeyOut.of(key).model_dump(mode="json", include={"id", "name", "prefix", "revoked_at"})
