"""All SQL of adapters and of the adapters wanted on deployments. Flush only; the caller's
transaction commits."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, joinedload
from sqlalchemy.orm.exc import StaleDataError

from control_plane.adapters.orm import Adapter, AdapterState, DeploymentAdapter
from control_plane.db import utcnow
from control_plane.deployments.orm import Deployment
from control_plane.errors import PreconditionFailed
from control_plane.registry.orm import ModelVersion

# An answer names the adapter's model and version, and a wanted adapter its deployment's model
# and node: joined, they come with the rows instead of one lazy load each.
_WITH_VERSION = joinedload(Adapter.version, innerjoin=True).joinedload(ModelVersion.model,
                                                                       innerjoin=True)
_WITH_ALL = (joinedload(DeploymentAdapter.adapter, innerjoin=True)
             .joinedload(Adapter.version, innerjoin=True)
             .joinedload(ModelVersion.model, innerjoin=True),
             joinedload(DeploymentAdapter.deployment, innerjoin=True)
             .joinedload(Deployment.node, innerjoin=True))


class AdapterRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, version_id: int, name: str) -> Adapter | None:
        return self.session.scalars(select(Adapter).options(_WITH_VERSION).where(
            Adapter.version_id == version_id, Adapter.name == name)).one_or_none()

    def list(self, version_id: int, limit: int, offset: int) -> tuple[Sequence[Adapter], int]:
        """One page of a version's adapters by name, and the total count."""
        total = self.session.scalar(select(func.count()).select_from(Adapter).where(
            Adapter.version_id == version_id))
        page = self.session.scalars(
            select(Adapter).options(_WITH_VERSION).where(Adapter.version_id == version_id)
            .order_by(Adapter.name).limit(limit).offset(offset)).all()
        return page, total or 0

    # builtins.list: in the class's scope ``list`` is the method above.
    def versions_with(self, model_id: int, name: str) -> builtins.list[int]:
        """The numbers of the model's versions that have an adapter called ``name``."""
        return list(self.session.scalars(
            select(ModelVersion.number).join(Adapter, Adapter.version_id == ModelVersion.id)
            .where(ModelVersion.model_id == model_id, Adapter.name == name)
            .order_by(ModelVersion.number)).all())

    def names_under(self, model_id: int, number: int) -> set[str]:
        """The names of the adapters registered under version ``number`` of the model."""
        return set(self.session.scalars(
            select(Adapter.name).join(ModelVersion, ModelVersion.id == Adapter.version_id)
            .where(ModelVersion.model_id == model_id, ModelVersion.number == number)).all())

    def add(self, adapter: Adapter) -> None:
        self.session.add(adapter)
        self.session.flush()

    def delete(self, adapter: Adapter) -> None:
        self.session.delete(adapter)
        try:
            self.session.flush()
        except StaleDataError as exc:
            raise PreconditionFailed(f"adapter '{adapter.name}' was changed by another request "
                                     "meanwhile; GET it again and retry") from exc


class DeploymentAdapterRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, row_id: int) -> DeploymentAdapter | None:
        return self.session.scalars(select(DeploymentAdapter).options(*_WITH_ALL).where(
            DeploymentAdapter.id == row_id).execution_options(populate_existing=True)
        ).one_or_none()

    def of_deployment(self, deployment_id: int) -> Sequence[DeploymentAdapter]:
        return self.session.scalars(
            select(DeploymentAdapter).options(*_WITH_ALL).join(DeploymentAdapter.adapter)
            .where(DeploymentAdapter.deployment_id == deployment_id).order_by(Adapter.name)
        ).all()

    def find(self, deployment_id: int, name: str) -> DeploymentAdapter | None:
        """The adapter called ``name`` wanted on the deployment, of whichever version."""
        return self.session.scalars(
            select(DeploymentAdapter).options(*_WITH_ALL).join(DeploymentAdapter.adapter)
            .where(DeploymentAdapter.deployment_id == deployment_id, Adapter.name == name)
        ).one_or_none()

    def wanting(self, adapter_id: int) -> Sequence[DeploymentAdapter]:
        """Every deployment row that wants the adapter."""
        return self.session.scalars(
            select(DeploymentAdapter).options(*_WITH_ALL)
            .where(DeploymentAdapter.adapter_id == adapter_id)
            .order_by(DeploymentAdapter.id)).all()

    def on_node(self, node_id: int) -> Sequence[DeploymentAdapter]:
        """The adapters wanted on the node's deployments, by deployment and name."""
        return self.session.scalars(
            select(DeploymentAdapter).options(*_WITH_ALL)
            .join(Deployment, Deployment.id == DeploymentAdapter.deployment_id)
            .join(DeploymentAdapter.adapter)
            .where(Deployment.node_id == node_id)
            .order_by(DeploymentAdapter.deployment_id, Adapter.name)).all()

    def add(self, row: DeploymentAdapter) -> None:
        self.session.add(row)
        self.session.flush()

    def set_fields(self, row: DeploymentAdapter, **fields: Any) -> None:
        for key, value in fields.items():
            setattr(row, key, value)
        row.updated_at = utcnow()
        self.session.flush()

    def transition(self, row_id: int, expected: AdapterState, target: AdapterState, actor: str,
                   **fields: Any) -> bool:
        """Move to ``target`` only if still in ``expected``; False if another writer moved it."""
        changed = self.session.execute(
            update(DeploymentAdapter)
            .where(DeploymentAdapter.id == row_id, DeploymentAdapter.state == expected.value)
            .values(state=target.value, updated_by=actor, updated_at=utcnow(), **fields)
            .execution_options(synchronize_session=False))
        return bool(changed.rowcount)  # type: ignore[attr-defined]

    def carry(self, row_id: int, from_adapter_id: int, model_id: int, number: int, actor: str
              ) -> bool:
        """Point the wanted row at version ``number``'s adapter of the same name, to be loaded;
        False if the row changed meanwhile or that version has no such adapter."""
        row = self.get(row_id)
        if row is None or row.adapter_id != from_adapter_id or \
                row.state == AdapterState.UNLOADING:
            return False
        successor = self.session.scalars(
            select(Adapter).join(ModelVersion, ModelVersion.id == Adapter.version_id)
            .where(ModelVersion.model_id == model_id, ModelVersion.number == number,
                   Adapter.name == row.adapter.name)).one_or_none()
        if successor is None:
            return False
        row.adapter, row.state, row.error = successor, AdapterState.LOADING.value, None
        row.updated_by, row.updated_at = actor, utcnow()
        self.session.flush()
        return True

    def forget(self, row_id: int, expected: AdapterState | None = None) -> bool:
        """Delete the row (only if still in ``expected``, when given)."""
        statement = delete(DeploymentAdapter).where(DeploymentAdapter.id == row_id)
        if expected is not None:
            statement = statement.where(DeploymentAdapter.state == expected.value)
        changed = self.session.execute(statement.execution_options(synchronize_session=False))
        return bool(changed.rowcount)  # type: ignore[attr-defined]

    def delete(self, row: DeploymentAdapter) -> None:
        self.session.delete(row)
        self.session.flush()
