"""REST endpoints of deployments: where a model alias runs, and changing that (202 + operation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Path, Query, Request
from fastapi.responses import JSONResponse

from control_plane.auth.dependencies import Reader, Writer
from control_plane.dependencies import DbSession
from control_plane.deployments import service
from control_plane.deployments.orm import Deployment, DeploymentState
from control_plane.deployments.repository import DeploymentRepository
from control_plane.deployments.schemas import DeploymentOut, DeploymentStarted, NodeStatusOut
from control_plane.error_handlers import error_responses
from control_plane.idempotency.http import IdempotencyKeyHeader, respond_once
from control_plane.nodes.service import get_node
from control_plane.operations.dependencies import Runner
from control_plane.operations.orm import Operation
from control_plane.operations.schemas import OperationOut
from control_plane.pagination import Limit, Offset, Page
from control_plane.registry.schemas import MODEL_NAME_PATTERN

router = APIRouter(tags=["deployments"], responses=error_responses(401, 403, 422, 503))
Name = Annotated[str, Path(pattern=MODEL_NAME_PATTERN)]
NameFilter = Annotated[str | None, Query(pattern=MODEL_NAME_PATTERN)]
PATH = "/models/{model}/aliases/{alias}/deployments/{node}"


def _started(request: Request, session: DbSession, actor: Writer, key: str | None,
             runner: Runner, background: BackgroundTasks,
             start: Callable[[], tuple[Deployment, Operation]]) -> JSONResponse:
    def perform() -> tuple[DeploymentStarted, dict[str, str]]:
        deployment, operation = start()
        body = DeploymentStarted(deployment=DeploymentOut.of(deployment),
                                 operation=OperationOut.of(operation))
        return body, {"Location": f"/api/v1/operations/{operation.id}"}

    response = respond_once(request, session, actor, key, None, 202, perform)
    operation_id = response.headers["Location"].rsplit("/", 1)[-1]
    background.add_task(runner.submit, operation_id)
    return response


@router.put(PATH, status_code=202, response_model=DeploymentStarted,
            responses=error_responses(404, 409))
def apply_deployment(model: Name, alias: Name, node: Name, request: Request, session: DbSession,
                     actor: Writer, runner: Runner, background: BackgroundTasks,
                     idempotency_key: IdempotencyKeyHeader = None) -> JSONResponse:
    """Serve the alias's version on the node (load it; again, if it failed or was removed).
    Poll the operation in the Location header; the deployment goes PENDING → LOADING → READY."""
    return _started(request, session, actor, idempotency_key, runner, background,
                    lambda: service.apply(session, actor, model, alias, node))


@router.delete(PATH, status_code=202, response_model=DeploymentStarted,
               responses=error_responses(404, 409))
def remove_deployment(model: Name, alias: Name, node: Name, request: Request,
                      session: DbSession, actor: Writer, runner: Runner,
                      background: BackgroundTasks, idempotency_key: IdempotencyKeyHeader = None
                      ) -> JSONResponse:
    """Stop serving the alias on the node: in-flight streams finish, then it unloads
    (READY → DRAINING → UNLOADED)."""
    return _started(request, session, actor, idempotency_key, runner, background,
                    lambda: service.remove(session, actor, model, alias, node))


@router.get(PATH, responses=error_responses(404))
def get_deployment(model: Name, alias: Name, node: Name, session: DbSession, _: Reader
                   ) -> DeploymentOut:
    return DeploymentOut.of(service.get_deployment(session, model, alias, node))


@router.get("/deployments", responses=error_responses(404))
def list_deployments(session: DbSession, _: Reader, model: NameFilter = None,
                     node: NameFilter = None, state: DeploymentState | None = None,
                     limit: Limit = 50, offset: Offset = 0) -> Page[DeploymentOut]:
    deployments, total = service.list_deployments(session, model, node, state, limit, offset)
    return Page(items=[DeploymentOut.of(d) for d in deployments], total=total, limit=limit,
                offset=offset)


@router.get("/nodes/{node}/status", responses=error_responses(404))
def node_status(node: Name, session: DbSession, _: Reader) -> NodeStatusOut:
    """Up or down as the reconciler last saw the node, and its last plan there."""
    found = get_node(session, node)
    return NodeStatusOut.of(found.name, DeploymentRepository(session).node_health(found.id))
