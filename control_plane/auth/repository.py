"""All SQL of auth: tokens and audit events. Flush only; the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from control_plane.auth.orm import ApiToken, AuditEvent


class TokenRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get_by_hash(self, secret_hash: str) -> ApiToken | None:
        return self.session.scalars(
            select(ApiToken).where(ApiToken.secret_hash == secret_hash)).one_or_none()

    def get_by_name(self, name: str) -> ApiToken | None:
        return self.session.scalars(select(ApiToken).where(ApiToken.name == name)).one_or_none()

    def add(self, token: ApiToken) -> None:
        self.session.add(token)
        self.session.flush()


@dataclass(frozen=True)
class AuditFilter:
    actor: str | None = None
    action: str | None = None
    target_type: str | None = None
    target: str | None = None
    since: datetime | None = None
    until: datetime | None = None


class AuditRepository:
    """Append and read only: the audit log has no update or delete, here or in the API."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def append(self, event: AuditEvent) -> None:
        self.session.add(event)
        self.session.flush()

    def list(self, where: AuditFilter, limit: int, offset: int
             ) -> tuple[Sequence[AuditEvent], int]:
        """One page of events matching ``where``, newest first, and the total count."""
        conditions = []
        if where.actor is not None:
            conditions.append(AuditEvent.actor == where.actor)
        if where.action is not None:
            conditions.append(AuditEvent.action == where.action)
        if where.target_type is not None:
            conditions.append(AuditEvent.target_type == where.target_type)
        if where.target is not None:
            conditions.append(AuditEvent.target == where.target)
        if where.since is not None:
            conditions.append(AuditEvent.occurred_at >= where.since)
        if where.until is not None:
            conditions.append(AuditEvent.occurred_at < where.until)
        total = self.session.scalar(
            select(func.count()).select_from(AuditEvent).where(*conditions))
        page = self.session.scalars(select(AuditEvent).where(*conditions)
                                    .order_by(AuditEvent.id.desc()).limit(limit).offset(offset)).all()
        return page, total or 0
