"""All SQL of scaling policies and decisions. Flush only; the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from control_plane.autoscaling.orm import ScalingDecisionRow, ScalingPolicyRow


class ScalingRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def policy(self, model_id: int, alias: str, *, for_update: bool = False
               ) -> ScalingPolicyRow | None:
        statement = select(ScalingPolicyRow).where(ScalingPolicyRow.model_id == model_id,
                                                   ScalingPolicyRow.alias == alias)
        if for_update:
            statement = statement.with_for_update()
        return self.session.scalars(statement).one_or_none()

    def enabled_policies(self) -> Sequence[ScalingPolicyRow]:
        return self.session.scalars(select(ScalingPolicyRow).where(
            ScalingPolicyRow.enabled.is_(True)).order_by(ScalingPolicyRow.id)).all()

    def add(self, row: ScalingPolicyRow | ScalingDecisionRow) -> None:
        self.session.add(row)
        self.session.flush()

    def delete_policy(self, row: ScalingPolicyRow) -> None:
        self.session.delete(row)
        self.session.flush()

    def decisions(self, policy_id: int, limit: int, offset: int
                  ) -> tuple[Sequence[ScalingDecisionRow], int]:
        """Newest first."""
        where = ScalingDecisionRow.policy_id == policy_id
        total = self.session.scalar(select(func.count()).select_from(ScalingDecisionRow)
                                    .where(where)) or 0
        rows = self.session.scalars(select(ScalingDecisionRow).where(where).order_by(
            ScalingDecisionRow.decided_at.desc(), ScalingDecisionRow.id.desc())
            .limit(limit).offset(offset)).all()
        return rows, total

    def prune_decisions(self, before: datetime) -> None:
        self.session.execute(delete(ScalingDecisionRow).where(
            ScalingDecisionRow.decided_at < before))
