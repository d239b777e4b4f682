"""All SQL of promotions. Flush only; the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from control_plane.promotions.orm import UNFINISHED, Promotion, PromotionState


@dataclass(frozen=True)
class PromotionFilter:
    model_id: int | None = None
    state: PromotionState | None = None
    alias: str | None = None
    ci_run_url: str | None = None


class PromotionRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, promotion: Promotion) -> None:
        self.session.add(promotion)
        self.session.flush()

    def get(self, promotion_id: str) -> Promotion | None:
        return self.session.get(Promotion, promotion_id, populate_existing=True)

    def unfinished_of_model(self, model_id: int) -> Promotion | None:
        return self.session.scalars(select(Promotion).where(
            Promotion.model_id == model_id, Promotion.state.in_(UNFINISHED))).first()

    def unfinished_ids(self, created_before: datetime) -> Sequence[str]:
        return self.session.scalars(select(Promotion.id).where(
            Promotion.state.in_(UNFINISHED), Promotion.created_at < created_before)
            .order_by(Promotion.created_at)).all()

    def list(self, where: PromotionFilter, limit: int, offset: int
             ) -> tuple[Sequence[Promotion], int]:
        conditions = []
        if where.model_id is not None:
            conditions.append(Promotion.model_id == where.model_id)
        if where.state is not None:
            conditions.append(Promotion.state == where.state.value)
        if where.alias is not None:
            conditions.append(Promotion.alias == where.alias)
        if where.ci_run_url is not None:
            conditions.append(Promotion.ci_run_url == where.ci_run_url)
        total = self.session.scalar(select(func.count()).select_from(Promotion)
                                    .where(*conditions))
        page = self.session.scalars(select(Promotion).where(*conditions)
                                    .order_by(Promotion.created_at.desc(), Promotion.id)
                                    .limit(limit).offset(offset)).all()
        return page, total or 0

    def transition(self, promotion_id: str, expected: Sequence[PromotionState],
                   target: PromotionState, **fields: Any) -> bool:
        """Move to ``target`` only from one of ``expected``; False if another writer moved it."""
        changed = self.session.execute(
            update(Promotion)
            .where(Promotion.id == promotion_id,
                   Promotion.state.in_([state.value for state in expected]))
            .values(state=target.value, **fields)
            .execution_options(synchronize_session=False))
        self.session.expire_all()
        return bool(changed.rowcount == 1)  # type: ignore[attr-defined]
