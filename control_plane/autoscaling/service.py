"""Scaling policies: set (audited, with an ETag), read, delete; and the decisions recorded."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from control_plane.auth import audit
from control_plane.auth.scopes import Actor
from control_plane.autoscaling.orm import ScalingDecisionRow, ScalingPolicyRow
from control_plane.autoscaling.repository import ScalingRepository
from control_plane.autoscaling.schemas import ScalingPolicyIn
from control_plane.concurrency import check_if_match, etag
from control_plane.db import utcnow
from control_plane.deployments.repository import DeploymentRepository
from control_plane.errors import (
    DeploymentIdNotFound,
    PreconditionFailed,
    ScalingPolicyNotFound,
)
from control_plane.registry import aliases
from control_plane.registry import service as registry

SETTINGS = tuple(ScalingPolicyIn.model_fields)


def policy_etag(row: ScalingPolicyRow) -> str:
    return etag(row.id, row.revision)


def _snapshot(row: ScalingPolicyRow) -> dict[str, object]:
    return {name: getattr(row, name) for name in SETTINGS}


def get_policy(session: Session, model_name: str, alias_name: str, *,
               for_update: bool = False) -> ScalingPolicyRow:
    model = registry.get_model(session, model_name)
    row = ScalingRepository(session).policy(model.id, alias_name, for_update=for_update)
    if row is None:
        aliases.get_alias(session, model_name, alias_name)  # a missing alias says so first
        raise ScalingPolicyNotFound(model_name, alias_name)
    return row


def put_policy(session: Session, actor: Actor, model_name: str, alias_name: str,
               data: ScalingPolicyIn, if_match: str | None = None
               ) -> tuple[ScalingPolicyRow, bool]:
    """Create or replace the alias's policy; True when it was created."""
    model = registry.get_model(session, model_name)
    aliases.get_alias(session, model_name, alias_name)
    repository = ScalingRepository(session)
    row = repository.policy(model.id, alias_name, for_update=True)
    target = f"{model_name}/{alias_name}"
    values = data.model_dump()
    values["metric"] = data.metric.value
    if row is None:
        if if_match not in (None, "*"):
            raise PreconditionFailed(f"{target} has no scaling policy for If-Match {if_match} "
                                     "to match; PUT without If-Match to create one")
        row = ScalingPolicyRow(model_id=model.id, alias=alias_name, updated_by=actor.name,
                               **values)
        repository.add(row)
        audit.record(session, actor, "scaling_policy.create", "alias", target,
                     after=_snapshot(row))
        return row, True
    check_if_match(policy_etag(row), if_match, f"the scaling policy of {target}")
    before = _snapshot(row)
    for name, value in values.items():
        setattr(row, name, value)
    row.updated_at, row.updated_by = utcnow(), actor.name
    session.flush()
    audit.record(session, actor, "scaling_policy.update", "alias", target, before=before,
                 after=_snapshot(row))
    return row, False


def delete_policy(session: Session, actor: Actor, model_name: str, alias_name: str,
                  if_match: str | None = None) -> None:
    row = get_policy(session, model_name, alias_name, for_update=True)
    check_if_match(policy_etag(row), if_match, f"the scaling policy of {model_name}/{alias_name}")
    audit.record(session, actor, "scaling_policy.delete", "alias", f"{model_name}/{alias_name}",
                 before=_snapshot(row))
    ScalingRepository(session).delete_policy(row)


def decisions(session: Session, model_name: str, alias_name: str, limit: int, offset: int
              ) -> tuple[ScalingPolicyRow, Sequence[ScalingDecisionRow], int]:
    row = get_policy(session, model_name, alias_name)
    found, total = ScalingRepository(session).decisions(row.id, limit, offset)
    return row, found, total


def deployment_alias(session: Session, deployment_id: int) -> tuple[str, str]:
    """(model, alias) of a deployment, for its scaling decisions."""
    deployment = DeploymentRepository(session).get(deployment_id)
    if deployment is None:
        raise DeploymentIdNotFound(deployment_id)
    return deployment.model.name, deployment.alias
