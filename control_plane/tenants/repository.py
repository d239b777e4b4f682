"""All SQL of tenants and their inference API keys. Flush only; the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from control_plane.tenants.orm import InferenceApiKey, Tenant


class TenantRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get_by_name(self, name: str, *, for_update: bool = False) -> Tenant | None:
        statement = select(Tenant).where(Tenant.name == name)
        if for_update:
            statement = statement.with_for_update()
        return self.session.scalars(statement).one_or_none()

    def all(self) -> Sequence[Tenant]:
        return self.session.scalars(select(Tenant).order_by(Tenant.name)).all()

    def list(self, limit: int, offset: int) -> tuple[Sequence[Tenant], int]:
        """One page of tenants by name, and the total count."""
        total = self.session.scalar(select(func.count()).select_from(Tenant))
        page = self.session.scalars(select(Tenant).order_by(Tenant.name)
                                    .limit(limit).offset(offset)).all()
        return page, total or 0

    def save(self, tenant: Tenant) -> None:
        self.session.add(tenant)
        self.session.flush()

    def delete(self, tenant: Tenant) -> None:
        """Delete the tenant; the database deletes its keys with it (ON DELETE CASCADE)."""
        self.session.delete(tenant)
        self.session.flush()


class InferenceKeyRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, key: InferenceApiKey) -> None:
        self.session.add(key)
        self.session.flush()

    def get(self, tenant_id: int, key_id: int) -> InferenceApiKey | None:
        return self.session.scalars(select(InferenceApiKey).where(
            InferenceApiKey.tenant_id == tenant_id, InferenceApiKey.id == key_id)).one_or_none()

    def name_taken(self, tenant_id: int, name: str) -> bool:
        return self.session.scalar(select(func.count()).select_from(InferenceApiKey).where(
            InferenceApiKey.tenant_id == tenant_id, InferenceApiKey.name == name)) != 0

    def of_tenant(self, tenant_id: int, limit: int, offset: int
                  ) -> tuple[Sequence[InferenceApiKey], int]:
        """One page of a tenant's keys, revoked ones too, oldest first, and the total count."""
        condition = InferenceApiKey.tenant_id == tenant_id
        total = self.session.scalar(
            select(func.count()).select_from(InferenceApiKey).where(condition))
        page = self.session.scalars(select(InferenceApiKey).where(condition)
                                    .order_by(InferenceApiKey.id).limit(limit).offset(offset)).all()
        return page, total or 0

    def count_active(self, tenant_id: int) -> int:
        return self.session.scalar(select(func.count()).select_from(InferenceApiKey).where(
            InferenceApiKey.tenant_id == tenant_id, InferenceApiKey.revoked_at.is_(None))) or 0

    def revoke(self, key: InferenceApiKey, now: datetime) -> bool:
        """Set ``revoked_at`` unless it is set already; False if another request was first."""
        changed = self.session.execute(
            update(InferenceApiKey)
            .where(InferenceApiKey.id == key.id, InferenceApiKey.revoked_at.is_(None))
            .values(revoked_at=now)
            .execution_options(synchronize_session=False))
        self.session.refresh(key)
        return bool(changed.rowcount)  # type: ignore[attr-defined]

    def active_hashes(self) -> dict[int, list[str]]:
        """Every tenant's active key hashes (tenant id → hashes, sorted)."""
        rows = self.session.execute(
            select(InferenceApiKey.tenant_id, InferenceApiKey.secret_hash)
            .where(InferenceApiKey.revoked_at.is_(None))
            .order_by(InferenceApiKey.tenant_id, InferenceApiKey.secret_hash)).all()
        hashes: dict[int, list[str]] = {}
        for tenant_id, secret_hash in rows:
            hashes.setdefault(tenant_id, []).append(secret_hash)
        return hashes
