"""Recording who changed what, inside the transaction of the change itself."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from control_plane.auth.orm import AuditEvent
from control_plane.auth.repository import AuditFilter, AuditRepository
from control_plane.auth.scopes import Actor


def record(session: Session, actor: Actor, action: str, target_type: str, target: str, *,
           before: dict[str, Any] | None = None, after: dict[str, Any] | None = None) -> AuditEvent:
    """Append one event; it commits or rolls back together with the change it describes."""
    event = AuditEvent(actor=actor.name, action=action, target_type=target_type, target=target,
                       before=before, after=after, request_id=actor.request_id)
    AuditRepository(session).append(event)
    return event


def list_events(session: Session, where: AuditFilter, limit: int, offset: int
                ) -> tuple[Sequence[AuditEvent], int]:
    return AuditRepository(session).list(where, limit, offset)
