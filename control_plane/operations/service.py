"""Operation use cases: start one (inside the caller's transaction), read them, finish them.

Status only moves forward: pending → running → succeeded | failed, or pending → failed. Every move
is a guarded UPDATE, so two runners (or a runner and another process's lease check) cannot both
win.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from control_plane.auth import audit
from control_plane.auth.scopes import Actor
from control_plane.db import utcnow
from control_plane.errors import OperationInProgress, OperationNotFound
from control_plane.operations.orm import Operation, OperationStatus
from control_plane.operations.repository import OperationFilter, OperationRepository

INTERRUPTED = ("interrupted: the control plane process running it stopped before it finished; "
               "start it again")


def start(session: Session, actor: Actor, kind: str, target_type: str, target: str,
          arguments: dict[str, Any] | None = None, locks: Sequence[str] = ()) -> Operation:
    """Record a pending operation holding ``locks`` (resources such as "deployment:17"); it runs
    once the caller's transaction has committed, in whichever process claims it first.

    Raises OperationInProgress where another unfinished operation holds one of the locks: the
    database's constraint decides between writers racing in separate processes."""
    operation = Operation(id=uuid.uuid4().hex, kind=kind, target_type=target_type, target=target,
                          arguments=arguments or {}, created_by=actor.name,
                          request_id=actor.request_id, status=OperationStatus.PENDING.value)
    repository = OperationRepository(session)
    repository.add(operation)
    if locks:
        try:
            # A savepoint: the caller's transaction survives to report the conflict.
            with session.begin_nested():
                repository.lock(operation.id, locks)
        except IntegrityError:
            raise OperationInProgress(
                f"another operation started on {', '.join(locks)} at the same moment; wait for "
                "it (GET /api/v1/operations?status=running) and retry") from None
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


def succeed(session: Session, operation_id: str, result: dict[str, Any]) -> bool:
    return OperationRepository(session).transition(
        operation_id, [OperationStatus.RUNNING], OperationStatus.SUCCEEDED, utcnow(),
        result=result)


def fail(session: Session, operation_id: str, error: str,
         result: dict[str, Any] | None = None) -> bool:
    return OperationRepository(session).transition(
        operation_id, [OperationStatus.PENDING, OperationStatus.RUNNING], OperationStatus.FAILED,
        utcnow(), error=error, result=result)


def fail_expired(session: Session, heard_before: datetime) -> int:
    """Fail the running operations whose process has not beaten since ``heard_before`` (it was
    killed, or lost the database); returns how many. Any process may call it: each failure is a
    guarded UPDATE that loses to a heartbeat that came in meanwhile."""
    repository = OperationRepository(session)
    now = utcnow()
    return sum(repository.fail_if_expired(operation_id, heard_before, now, INTERRUPTED)
               for operation_id in repository.expired(heard_before))
