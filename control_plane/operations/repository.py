"""All SQL of operations. Flush only; the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.orm import Session

from control_plane.operations.orm import Operation, OperationLock, OperationStatus


@dataclass(frozen=True)
class OperationFilter:
    kind: str | None = None
    status: OperationStatus | None = None
    target_type: str | None = None
    target: str | None = None


class OperationRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, operation: Operation) -> None:
        self.session.add(operation)
        self.session.flush()

    def get(self, operation_id: str) -> Operation | None:
        return self.session.get(Operation, operation_id)

    def list(self, where: OperationFilter, limit: int, offset: int
             ) -> tuple[Sequence[Operation], int]:
        """One page, newest first, and the total count."""
        conditions = []
        if where.kind is not None:
            conditions.append(Operation.kind == where.kind)
        if where.status is not None:
            conditions.append(Operation.status == where.status.value)
        if where.target_type is not None:
            conditions.append(Operation.target_type == where.target_type)
        if where.target is not None:
            conditions.append(Operation.target == where.target)
        total = self.session.scalar(select(func.count()).select_from(Operation).where(*conditions))
        page = self.session.scalars(select(Operation).where(*conditions).order_by(
            Operation.created_at.desc(), Operation.id).limit(limit).offset(offset)).all()
        return page, total or 0

    def transition(self, operation_id: str, expected: Sequence[OperationStatus],
                   new: OperationStatus, now: datetime, *, result: dict[str, Any] | None = None,
                   error: str | None = None) -> bool:
        """Move to ``new`` only from one of ``expected``; False if another writer moved it first."""
        values: dict[str, Any] = {"status": new.value}
        if new is OperationStatus.RUNNING:
            values["started_at"] = now
        if new.finished:
            values.update(finished_at=now, result=result, error=error)
        changed = self.session.execute(
            update(Operation)
            .where(Operation.id == operation_id,
                   Operation.status.in_([status.value for status in expected]))
            .values(**values)
            .execution_options(synchronize_session=False))
        moved = bool(changed.rowcount)  # type: ignore[attr-defined]
        if moved and new.finished:
            self.session.execute(delete(OperationLock).where(
                OperationLock.operation_id == operation_id))
        self.session.expire_all()
        return moved

    def lock(self, operation_id: str, resources: Sequence[str]) -> None:
        """Hold ``resources`` for the operation; the flush raises IntegrityError where another
        unfinished operation holds one."""
        self.session.add_all(OperationLock(resource=resource, operation_id=operation_id)
                             for resource in resources)
        self.session.flush()

    def locked(self, prefix: str) -> Sequence[str]:
        """The resources starting with ``prefix`` that unfinished operations hold."""
        return self.session.scalars(select(OperationLock.resource).where(
            OperationLock.resource.startswith(prefix, autoescape=True))).all()

    def claim_next(self, claimer: str, now: datetime) -> Operation | None:
        """Take the oldest pending operation for ``claimer``: running, with its heartbeat.

        PostgreSQL: FOR UPDATE SKIP LOCKED, so processes claiming at once take different rows
        without waiting on each other; SQLite ignores it, its write lock lets one claim at a
        time. The guarded UPDATE keeps a claim single either way."""
        candidate = self.session.scalars(
            select(Operation.id).where(Operation.status == OperationStatus.PENDING.value)
            .order_by(Operation.created_at, Operation.id).limit(1)
            .with_for_update(skip_locked=True)).first()
        if candidate is None:
            return None
        changed = self.session.execute(
            update(Operation)
            .where(Operation.id == candidate,
                   Operation.status == OperationStatus.PENDING.value)
            .values(status=OperationStatus.RUNNING.value, started_at=now, claimed_by=claimer,
                    heartbeat_at=now, attempts=Operation.attempts + 1)
            .execution_options(synchronize_session=False))
        self.session.expire_all()
        if not changed.rowcount:  # type: ignore[attr-defined]
            return None
        return self.session.get(Operation, candidate)

    def beat(self, claimer: str, now: datetime) -> int:
        """Renew the heartbeat of every operation ``claimer`` runs."""
        changed = self.session.execute(
            update(Operation)
            .where(Operation.claimed_by == claimer,
                   Operation.status == OperationStatus.RUNNING.value)
            .values(heartbeat_at=now).execution_options(synchronize_session=False))
        return int(changed.rowcount)  # type: ignore[attr-defined]

    def expired(self, heard_before: datetime) -> Sequence[str]:
        """Running operations whose process last beat before ``heard_before`` (or, claimed by a
        release without heartbeats, started before it)."""
        return self.session.scalars(select(Operation.id).where(
            Operation.status == OperationStatus.RUNNING.value,
            or_(Operation.heartbeat_at < heard_before,
                Operation.heartbeat_at.is_(None) & (Operation.started_at < heard_before)))).all()

    def fail_if_expired(self, operation_id: str, heard_before: datetime, now: datetime,
                        error: str) -> bool:
        """Fail a running operation only if its heartbeat is still older than ``heard_before``
        (its process may have beaten meanwhile)."""
        changed = self.session.execute(
            update(Operation)
            .where(Operation.id == operation_id,
                   Operation.status == OperationStatus.RUNNING.value,
                   or_(Operation.heartbeat_at < heard_before, Operation.heartbeat_at.is_(None)))
            .values(status=OperationStatus.FAILED.value, finished_at=now, error=error)
            .execution_options(synchronize_session=False))
        moved = bool(changed.rowcount)  # type: ignore[attr-defined]
        if moved:
            self.session.execute(delete(OperationLock).where(
                OperationLock.operation_id == operation_id))
        self.session.expire_all()
        return moved
