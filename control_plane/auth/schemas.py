"""JSON shapes of auth: tokens (the secret appears once, at creation) and audit events."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from control_plane.auth.orm import ApiToken, AuditEvent
from control_plane.auth.scopes import Scope


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    scope: Scope


class TokenCreated(BaseModel):
    name: str
    scope: Scope
    secret: str


class TokenOut(BaseModel):
    """A token as listed: who holds it and what it may do, never its secret or hash."""

    name: str
    scope: Scope
    created_at: datetime

    @classmethod
    def of(cls, token: ApiToken) -> TokenOut:
        return cls(name=token.name, scope=Scope(token.scope), created_at=token.created_at)


class AuditEventOut(BaseModel):
    id: int
    occurred_at: datetime
    actor: str
    action: str
    target_type: str
    target: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    request_id: str | None

    @classmethod
    def of(cls, event: AuditEvent) -> AuditEventOut:
        return cls(id=event.id, occurred_at=event.occurred_at, actor=event.actor,
                   action=event.action, target_type=event.target_type, target=event.target,
                   before=event.before, after=event.after, request_id=event.request_id)
