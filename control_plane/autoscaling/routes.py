"""REST endpoints of scaling policies and decisions: write scope to set a policy, read scope to
read. They translate between JSON and service calls, nothing more."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from control_plane.api_params import IfMatch
from control_plane.auth.dependencies import Reader, Writer
from control_plane.autoscaling import service
from control_plane.autoscaling.schemas import (
    ScalingDecisionOut,
    ScalingPolicyIn,
    ScalingPolicyOut,
)
from control_plane.dependencies import DbSession
from control_plane.error_handlers import error_responses
from control_plane.pagination import MAX_OFFSET, Limit, Offset, Page

router = APIRouter(tags=["autoscaling"], responses=error_responses(401, 403, 422, 503))

Name = Annotated[str, Path(max_length=64)]
PATH = "/models/{model}/aliases/{alias}/scaling"


class ScalingDecisions(Page[ScalingDecisionOut]):
    policy: ScalingPolicyOut


@router.put(PATH, responses=error_responses(404, 412))
def put_policy(model: Name, alias: Name, body: ScalingPolicyIn, response: Response,
               session: DbSession, actor: Writer, if_match: IfMatch = None) -> ScalingPolicyOut:
    """Scale the alias between min_engines and max_engines (one deployment per node) to keep
    the metric near its target; 201 when created. Every decision, taken or not, is kept."""
    row, created = service.put_policy(session, actor, model, alias, body, if_match)
    response.headers["ETag"] = service.policy_etag(row)
    if created:
        response.status_code = status.HTTP_201_CREATED
    return ScalingPolicyOut.of(row, model)


@router.get(PATH, responses=error_responses(404))
def get_policy(model: Name, alias: Name, response: Response, session: DbSession, _: Reader
               ) -> ScalingPolicyOut:
    row = service.get_policy(session, model, alias)
    response.headers["ETag"] = service.policy_etag(row)
    return ScalingPolicyOut.of(row, model)


@router.delete(PATH, status_code=status.HTTP_204_NO_CONTENT,
               responses=error_responses(404, 412))
def delete_policy(model: Name, alias: Name, session: DbSession, actor: Writer,
                  if_match: IfMatch = None) -> Response:
    """Stop autoscaling the alias; the engines it has stay."""
    service.delete_policy(session, actor, model, alias, if_match)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(f"{PATH}/decisions", responses=error_responses(404))
def list_decisions(model: Name, alias: Name, session: DbSession, _: Reader,
                   limit: Limit = 50, offset: Offset = 0) -> ScalingDecisions:
    """The autoscaler's decisions on the alias, newest first, with their inputs and reasons."""
    row, found, total = service.decisions(session, model, alias, limit, offset)
    return ScalingDecisions(policy=ScalingPolicyOut.of(row, model),
                            items=[ScalingDecisionOut.of(d) for d in found], total=total,
                            limit=limit, offset=offset)


@router.get("/deployments/{deployment_id}/scaling", responses=error_responses(404))
def deployment_decisions(deployment_id: Annotated[int, Path(ge=1, le=MAX_OFFSET)],
                         session: DbSession, _: Reader, limit: Limit = 50, offset: Offset = 0
                         ) -> ScalingDecisions:
    """The scaling policy and decisions of the deployment's alias."""
    model, alias = service.deployment_alias(session, deployment_id)
    return list_decisions(model, alias, session, _, limit, offset)
