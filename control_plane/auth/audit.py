"""Recording who changed what, inside the transaction of the change itself."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, FromClause, Insert, bindparam, insert, select
from sqlalchemy.orm import Session

from control_plane.auth.orm import AuditEvent
from control_plane.auth.repository import AuditFilter, AuditRepository
from control_plane.auth.scopes import Actor
from control_plane.db import utcnow


def record(session: Session, actor: Actor, action: str, target_type: str, target: str, *,
           before: dict[str, Any] | None = None, after: dict[str, Any] | None = None) -> AuditEvent:
    """Append one event; it commits or rolls back together with the change it describes."""
    event = AuditEvent(actor=actor.name, action=action, target_type=target_type, target=target,
                       before=before, after=after, request_id=actor.request_id)
    AuditRepository(session).append(event)
    return event


_EVENTS = AuditEvent.metadata.tables[AuditEvent.__tablename__]

# One event's INSERT, its values parameters (event_parameters()), for a change written by a
# statement of its own that carries the event along; it commits or rolls back with it, as
# record() does. Built once: one built per call cost more of SQLAlchemy's cache-key work than
# its execution.
_EVENT_VALUES = {column: bindparam(f"event_{column.key}", type_=column.type)
                 for column in _EVENTS.columns if not column.primary_key}
EVENT_INSERT = insert(_EVENTS).values(_EVENT_VALUES)


def event_insert_from(source: FromClause, **computed: ColumnElement[Any]) -> Insert:
    """EVENT_INSERT as an INSERT ... SELECT from ``source``, the columns named in ``computed``
    worked out in SQL (say, from a row the same statement inserts) instead of by parameters."""
    columns = list(_EVENT_VALUES)
    return insert(_EVENTS).from_select(
        [column.key for column in columns],
        select(*[computed.get(column.key, _EVENT_VALUES[column]) for column in columns]
               ).select_from(source))


def event_parameters(actor: Actor, action: str, target_type: str, target: str, *,
                     before: dict[str, Any] | None = None, after: dict[str, Any] | None = None
                     ) -> dict[str, Any]:
    """The parameters of EVENT_INSERT for one event."""
    return {"event_occurred_at": utcnow(), "event_actor": actor.name, "event_action": action,
            "event_target_type": target_type, "event_target": target, "event_before": before,
            "event_after": after, "event_request_id": actor.request_id}


def list_events(session: Session, where: AuditFilter, limit: int, offset: int
                ) -> tuple[Sequence[AuditEvent], int]:
    return AuditRepository(session).list(where, limit, offset)
