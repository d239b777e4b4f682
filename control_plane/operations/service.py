"""Operation use cases: start one (inside the caller's transaction), read them, finish them.

Status only moves forward: pending → running → succeeded | failed, or pending → failed. Every move
is a guarded UPDATE, so two runners (or a runner and the restart recovery) cannot both win.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from control_plane.auth import audit
from control_plane.auth.scopes import Actor
from control_plane.db import utcnow
from control_plane.errors import OperationNotFound
from control_plane.operations.orm import Operation, OperationStatus
from control_plane.operations.repository import OperationFilter, OperationRepository

INTERRUPTED = "interrupted: the control plane stopped before the operation finished; start it again"


def start(session: Session, actor: Actor, kind: str, target_type: str, target: str,
          arguments: dict[str, Any] | None = None) -> Operation:
    """Record a pending operation; it runs once the caller's transaction has committed."""
    operation = Operation(id=uuid.uuid4().hex, kind=kind, target_type=target_type, target=target,
                          arguments=arguments or {}, created_by=actor.name,
                          request_id=actor.request_id, status=OperationStatus.PENDING.value)
    OperationRepository(session).add(operation)
    audit.record(session, actor, kind, target_type, target,
                 after={"operation": operation.id, "arguments": operation.arguments})
    return operation


def get(session: Session, operation_id: str) -> Operation:
    operation = OperationRepository(session).get(operation_id)
    if operation is None:
        raise OperationNotFound(operation_id)
    return operation


def list_operations(session: Session, where: OperationFilter, limit: int, offset: int
                    ) -> tuple[Sequence[Operation], int]:
    return OperationRepository(session).list(where, limit, offset)


def mark_running(session: Session, operation_id: str) -> bool:
    return OperationRepository(session).transition(
        operation_id, [OperationStatus.PENDING], OperationStatus.RUNNING, utcnow())


def succeed(session: Session, operation_id: str, result: dict[str, Any]) -> bool:
    return OperationRepository(session).transition(
        operation_id, [OperationStatus.RUNNING], OperationStatus.SUCCEEDED, utcnow(),
        result=result)


def fail(session: Session, operation_id: str, error: str,
         result: dict[str, Any] | None = None) -> bool:
    return OperationRepository(session).transition(
        operation_id, [OperationStatus.PENDING, OperationStatus.RUNNING], OperationStatus.FAILED,
        utcnow(), error=error, result=result)


def fail_interrupted(session: Session, created_before: datetime) -> int:
    """At start-up, fail what a previous process left unfinished; returns how many.

    One control plane runs operations at a time (the lifecycle issue's leader lock extends this to
    several replicas), so whatever it did not create itself and is still pending or running was
    abandoned."""
    return sum(fail(session, operation_id, INTERRUPTED)
               for operation_id in OperationRepository(session).unfinished_ids(created_before))
