"""All SQL of idempotency keys. Flush only; the caller's transaction commits."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from control_plane.idempotency.orm import IdempotencyKey


class IdempotencyRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, actor: str, key: str) -> IdempotencyKey | None:
        return self.session.scalars(select(IdempotencyKey).where(
            IdempotencyKey.actor == actor, IdempotencyKey.key == key)).one_or_none()

    def forget_older_than(self, actor: str, cutoff: datetime) -> None:
        self.session.execute(delete(IdempotencyKey).where(
            IdempotencyKey.actor == actor, IdempotencyKey.created_at < cutoff))

    def claim(self, actor: str, key: str, fingerprint: str) -> IdempotencyKey | None:
        """Insert the key, or return None if a concurrent request committed it first."""
        record = IdempotencyKey(actor=actor, key=key, fingerprint=fingerprint)
        # A savepoint keeps the outer transaction usable when the insert loses the race. On
        # PostgreSQL the insert waits for the other transaction's row, then fails once it commits.
        try:
            with self.session.begin_nested():
                self.session.add(record)
        except IntegrityError:
            return None
        return record

    def complete(self, record: IdempotencyKey, status_code: int, headers: dict[str, str],
                 body: dict[str, object]) -> None:
        record.status_code = status_code
        record.headers = headers
        record.body = body
        self.session.flush()
