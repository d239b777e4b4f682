"""All SQL of auth: tokens and audit events. Flush only; the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from control_plane.auth.orm import ApiToken, AuditEvent

# Every request runs it, so it is built once: SQLAlchemy memoizes a statement's cache key on the
# statement object, and building the key anew for each request cost more than executing it.
_NAME_AND_SCOPE_BY_HASH = select(ApiToken.name, ApiToken.scope).where(
    ApiToken.secret_hash == bindparam("secret_hash"))


class TokenRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def name_and_scope_by_hash(self, secret_hash: str) -> tuple[str, str] | None:
        """What every request needs of its token, by the cheapest path: plain columns through
        the connection, from a statement built once (see _NAME_AND_SCOPE_BY_HASH)."""
        found = self.session.connection().execute(
            _NAME_AND_SCOPE_BY_HASH, {"secret_hash": secret_hash}).one_or_none()
        return None if found is None else (found.name, found.scope)

    def get_by_name(self, name: str) -> ApiToken | None:
        return self.session.scalars(select(ApiToken).where(ApiToken.name == name)).one_or_none()

    def add(self, token: ApiToken) -> None:
        self.session.add(token)
        self.session.flush()

    def list(self, limit: int, offset: int) -> tuple[Sequence[ApiToken], int]:
        """One page of tokens in the order they were created, and the total count."""
        total = self.session.scalar(select(func.count()).select_from(ApiToken))
        page = self.session.scalars(select(ApiToken).order_by(ApiToken.id)
                                    .limit(limit).offset(offset)).all()
        return page, total or 0

    def delete(self, token: ApiToken) -> None:
        self.session.delete(token)
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
