"""All SQL of deployments and node status. Flush only; the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, joinedload

from control_plane.db import utcnow
from control_plane.deployments.orm import Deployment, DeploymentState, NodeHealth, NodeStatus


class DeploymentRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, deployment_id: int) -> Deployment | None:
        return self.session.get(Deployment, deployment_id, populate_existing=True)

    def find(self, model_id: int, alias: str, node_id: int) -> Deployment | None:
        return self.session.scalars(select(Deployment).where(
            Deployment.model_id == model_id, Deployment.alias == alias,
            Deployment.node_id == node_id)).one_or_none()

    def of_alias(self, model_id: int, alias: str, *, wanted_only: bool = True
                 ) -> Sequence[Deployment]:
        conditions = [Deployment.model_id == model_id, Deployment.alias == alias]
        if wanted_only:
            conditions.append(Deployment.wanted.is_(True))
        return self.session.scalars(select(Deployment).where(*conditions)
                                    .order_by(Deployment.id)).all()

    def of_model(self, model_id: int, alias: str | None = None, *, wanted_only: bool = True
                 ) -> Sequence[Deployment]:
        """The model's deployments (of one alias, or all; only the wanted ones unless asked),
        with their nodes."""
        conditions = [Deployment.model_id == model_id]
        if wanted_only:
            conditions.append(Deployment.wanted.is_(True))
        if alias is not None:
            conditions.append(Deployment.alias == alias)
        return self.session.scalars(select(Deployment).options(joinedload(Deployment.node))
                                    .where(*conditions).order_by(Deployment.id)).all()

    def count_of_model(self, model_id: int) -> int:
        return self.session.scalar(select(func.count()).select_from(Deployment).where(
            Deployment.model_id == model_id, Deployment.wanted.is_(True))) or 0

    def count_by_node(self) -> dict[int, int]:
        """Deployments per node id, the ones being removed included; nodes with none absent."""
        rows = self.session.execute(select(Deployment.node_id, func.count())
                                    .group_by(Deployment.node_id)).all()
        return {int(node_id): int(count) for node_id, count in rows}

    def count_by_state(self) -> dict[str, int]:
        """Deployments per state, the ones being removed included."""
        rows = self.session.execute(select(Deployment.state, func.count())
                                    .group_by(Deployment.state)).all()
        return {str(state): count for state, count in rows}

    def on_node(self, node_id: int) -> Sequence[Deployment]:
        return self.session.scalars(select(Deployment).where(Deployment.node_id == node_id)
                                    .order_by(Deployment.id)).all()

    def list(self, model_id: int | None, node_id: int | None, state: DeploymentState | None,
             limit: int, offset: int) -> tuple[Sequence[Deployment], int]:
        conditions = []
        if model_id is not None:
            conditions.append(Deployment.model_id == model_id)
        if node_id is not None:
            conditions.append(Deployment.node_id == node_id)
        if state is not None:
            conditions.append(Deployment.state == state.value)
        total = self.session.scalar(select(func.count()).select_from(Deployment)
                                    .where(*conditions))
        page = self.session.scalars(select(Deployment).where(*conditions)
                                    .order_by(Deployment.id).limit(limit).offset(offset)).all()
        return page, total or 0

    def add(self, deployment: Deployment) -> None:
        self.session.add(deployment)
        self.session.flush()

    def delete(self, deployment: Deployment) -> None:
        self.session.delete(deployment)
        self.session.flush()

    def transition(self, deployment: Deployment, expected: DeploymentState,
                   target: DeploymentState, actor: str, **fields: Any) -> bool:
        """Move to ``target`` only if still in ``expected``; False if another writer moved it."""
        changed = self.session.execute(
            update(Deployment)
            .where(Deployment.id == deployment.id, Deployment.state == expected.value)
            .values(state=target.value, updated_by=actor, updated_at=utcnow(), **fields)
            .execution_options(synchronize_session=False))
        if changed.rowcount != 1:  # type: ignore[attr-defined]
            return False
        self.session.refresh(deployment)
        return True

    def set_fields(self, deployment: Deployment, **fields: Any) -> None:
        for key, value in fields.items():
            setattr(deployment, key, value)
        deployment.updated_at = utcnow()
        self.session.flush()

    def mark_node_unknown(self, node_id: int, error: str, actor: str) -> int:
        """Every deployment on a node that does not answer becomes UNKNOWN (not UNLOADED ones:
        nothing runs there either way)."""
        changed = self.session.execute(
            update(Deployment)
            .where(Deployment.node_id == node_id,
                   Deployment.state.not_in([DeploymentState.UNKNOWN.value,
                                            DeploymentState.UNLOADED.value]))
            .values(state=DeploymentState.UNKNOWN.value, error=error, updated_by=actor,
                    updated_at=utcnow())
            .execution_options(synchronize_session=False))
        self.session.expire_all()
        return int(changed.rowcount)  # type: ignore[attr-defined]

    def record_node_health(self, node_id: int, health: NodeHealth, detail: str,
                           server_version: str | None = None) -> None:
        """``server_version`` None: not read this time; the last one read stays."""
        status = self.session.get(NodeStatus, node_id)
        if status is None:
            status = NodeStatus(node_id=node_id, health=health.value, detail=detail)
            self.session.add(status)
        else:
            status.health, status.detail, status.observed_at = health.value, detail, utcnow()
        if server_version is not None:
            status.server_version = server_version
        self.session.flush()

    def server_versions(self, node_ids: Sequence[int]) -> dict[int, str]:
        """The Triton version last read on each of ``node_ids`` that has one."""
        if not node_ids:
            return {}
        rows = self.session.execute(
            select(NodeStatus.node_id, NodeStatus.server_version)
            .where(NodeStatus.node_id.in_(node_ids)))
        return {node_id: version for node_id, version in rows if version is not None}

    def node_health(self, node_id: int) -> NodeStatus | None:
        return self.session.get(NodeStatus, node_id)
