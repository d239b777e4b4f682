"""The SQL of the routing table: deployments that serve now, with what routing needs of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, and_, select
from sqlalchemy.orm import Session

from control_plane.deployments.orm import Deployment, DeploymentState
from control_plane.nodes.orm import TritonNode
from control_plane.registry.orm import Model, ModelAlias, ModelVersion

# Built once (SQLAlchemy memoizes a statement's cache key on the statement object).
_ROUTABLE = (
    select(Model.name.label("model"), Deployment.alias, Deployment.triton_name,
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
    .where(Deployment.wanted.is_(True),
           Deployment.state.in_([DeploymentState.READY.value, DeploymentState.LOADING.value]),
           Deployment.serving_version.is_not(None))
    .order_by(Model.name, Deployment.alias, TritonNode.name))


class RoutingRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def routable(self) -> Sequence[Row[Any]]:
        """One row per deployment that answers requests now, by model, alias and node."""
        return self.session.execute(_ROUTABLE).all()
