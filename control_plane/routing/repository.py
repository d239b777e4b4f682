"""The SQL of the routing table: deployments that serve now, with what routing needs of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, and_, select
from sqlalchemy.orm import Session

from control_plane.adapters.orm import Adapter, AdapterState, DeploymentAdapter
from control_plane.deployments.orm import Deployment, DeploymentState
from control_plane.nodes.orm import TritonNode
from control_plane.registry.orm import Model, ModelAlias, ModelVersion

# Built once (SQLAlchemy memoizes a statement's cache key on the statement object).
_ROUTABLE = (
    select(Deployment.id.label("deployment_id"), Model.name.label("model"), Deployment.alias,
           Deployment.triton_name,
           Deployment.serving_version, TritonNode.name.label("node"), TritonNode.http_url,
           TritonNode.grpc_url, TritonNode.metrics_url,
           ModelVersion.number.label("alias_version"), ModelVersion.engine_args)
    .join(Model, Model.id == Deployment.model_id)
    .join(TritonNode, TritonNode.id == Deployment.node_id)
    .join(ModelAlias, and_(ModelAlias.model_id == Deployment.model_id,
                           ModelAlias.name == Deployment.alias))
    .join(ModelVersion, ModelVersion.id == ModelAlias.version_id)
    # READY serves; so does LOADING with a serving version: during a swap the old version keeps
    # answering under the same Triton name while the new one loads. A READY deployment always
    # has a serving version (the actuator sets both at once).
    # A cordoned node is leaving (or kept out by an operator): nothing new goes there while its
    # open streams drain.
    .where(Deployment.wanted.is_(True), TritonNode.cordoned_at.is_(None),
           Deployment.state.in_([DeploymentState.READY.value, DeploymentState.LOADING.value]),
           Deployment.serving_version.is_not(None))
    .order_by(Model.name, Deployment.alias, TritonNode.name))
# Adapters loaded in an engine that serves their own version (right after a swap the new engine
# has none of the old version's, until the reconciler carries them over or marks them failed),
# and routed (not being gated by a promotion).
_LOADED_ADAPTERS = (
    select(DeploymentAdapter.deployment_id, Adapter.name)
    .join(Adapter, Adapter.id == DeploymentAdapter.adapter_id)
    .join(ModelVersion, ModelVersion.id == Adapter.version_id)
    .join(Deployment, Deployment.id == DeploymentAdapter.deployment_id)
    .where(DeploymentAdapter.state == AdapterState.LOADED.value,
           DeploymentAdapter.routed.is_(True),
           ModelVersion.number == Deployment.serving_version))


class RoutingRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def routable(self) -> Sequence[Row[*tuple[Any, ...]]]:
        """One row per deployment that answers requests now, by model, alias and node."""
        return self.session.execute(_ROUTABLE).all()

    def loaded_adapters(self) -> dict[int, list[str]]:
        """The adapters loaded on each deployment (by id), sorted by name."""
        found: dict[int, list[str]] = {}
        for deployment_id, name in self.session.execute(_LOADED_ADAPTERS):
            found.setdefault(deployment_id, []).append(name)
        # Sorted here, not by the database's collation: the revision must not depend on it.
        return {deployment_id: sorted(names) for deployment_id, names in found.items()}
