"""All SQL of operations. Flush only; the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from control_plane.operations.orm import Operation, OperationStatus


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
        self.session.expire_all()
        return bool(changed.rowcount)  # type: ignore[attr-defined]

    def unfinished(self, kinds: Sequence[str]) -> Sequence[Operation]:
        return self.session.scalars(select(Operation).where(
            Operation.kind.in_(kinds),
            Operation.status.in_([OperationStatus.PENDING.value, OperationStatus.RUNNING.value])
        )).all()

    def unfinished_ids(self, created_before: datetime) -> Sequence[str]:
        return self.session.scalars(select(Operation.id).where(
            Operation.created_at < created_before,
            Operation.status.in_([OperationStatus.PENDING.value, OperationStatus.RUNNING.value])
        )).all()
