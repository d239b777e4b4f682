"""JSON shapes of deployments."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from control_plane.deployments.orm import Deployment, DeploymentState, NodeHealth, NodeStatus
from control_plane.operations.schemas import OperationOut


class DeploymentOut(BaseModel):
    id: int = Field(description="names the deployment in /api/v1/deployments/{id}/adapters")
    model: str
    alias: str
    node: str
    triton_name: str
    wanted: bool
    state: DeploymentState
    serving_version: int | None
    error: str | None
    updated_by: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, deployment: Deployment) -> DeploymentOut:
        return cls(id=deployment.id, model=deployment.model.name, alias=deployment.alias,
                   node=deployment.node.name, triton_name=deployment.triton_name,
                   wanted=deployment.wanted, state=DeploymentState(deployment.state),
                   serving_version=deployment.serving_version, error=deployment.error,
                   updated_by=deployment.updated_by, created_at=deployment.created_at,
                   updated_at=deployment.updated_at)


class DeploymentStarted(BaseModel):
    """A 202: the deployment as now wanted, and the operation that makes it so."""

    deployment: DeploymentOut
    operation: OperationOut


class NodeStatusOut(BaseModel):
    """What the reconciler last saw of a node; ``health`` is null before its first look."""

    node: str
    health: NodeHealth | None
    detail: str
    observed_at: datetime | None
    last_pass: dict[str, Any] | None

    @classmethod
    def of(cls, node: str, status: NodeStatus | None) -> NodeStatusOut:
        if status is None:
            return cls(node=node, health=None, detail="", observed_at=None, last_pass=None)
        return cls(node=node, health=NodeHealth(status.health), detail=status.detail,
                   observed_at=status.observed_at, last_pass=status.last_pass)
