"""REST endpoints of adapters: registered under a version (201), loaded on a deployment (202 +
operation); translate between JSON and service calls, nothing more."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Path, Request, Response, status
from fastapi.responses import JSONResponse

from control_plane.adapters import loading, service
from control_plane.adapters.orm import Adapter, DeploymentAdapter
from control_plane.adapters.schemas import (
    ADAPTER_NAME_PATTERN,
    AdapterCreate,
    AdapterLoadRequest,
    AdapterOut,
    DeploymentAdapterOut,
    DeploymentAdapterStarted,
)
from control_plane.api_params import IfMatch
from control_plane.auth.dependencies import Reader, Writer
from control_plane.dependencies import AppSettings, DbSession
from control_plane.error_handlers import error_responses
from control_plane.idempotency.http import IdempotencyKeyHeader, respond_once
from control_plane.operations.dependencies import Runner
from control_plane.operations.orm import Operation
from control_plane.operations.schemas import OperationOut
from control_plane.pagination import Limit, Offset, Page
from control_plane.registry.schemas import MODEL_NAME_PATTERN

router = APIRouter(tags=["adapters"], responses=error_responses(401, 403, 422, 503))

ModelName = Annotated[str, Path(pattern=MODEL_NAME_PATTERN)]
AdapterName = Annotated[str, Path(pattern=ADAPTER_NAME_PATTERN)]
# Ids and version numbers are stored as 32-bit integers (PostgreSQL INTEGER).
VersionNumber = Annotated[int, Path(ge=1, le=2**31 - 1)]
DeploymentId = Annotated[int, Path(ge=1, le=2**31 - 1)]
VERSION_ADAPTERS = "/models/{name}/versions/{number}/adapters"
DEPLOYMENT_ADAPTERS = "/deployments/{deployment_id}/adapters"


def _adapter(response: Response, adapter: Adapter) -> AdapterOut:
    response.headers["ETag"] = service.adapter_etag(adapter)
    return AdapterOut.of(adapter)


@router.post(VERSION_ADAPTERS, status_code=status.HTTP_201_CREATED, response_model=AdapterOut,
             responses=error_responses(404, 409))
def register_adapter(name: ModelName, number: VersionNumber, body: AdapterCreate,
                     request: Request, session: DbSession, actor: Writer, settings: AppSettings,
                     idempotency_key: IdempotencyKeyHeader = None) -> JSONResponse:
    """Register a LoRA adapter for the version: its adapter_config.json is read (rank, target
    modules, base model) and checked against the version's engine; its weights are not."""
    def perform() -> tuple[AdapterOut, dict[str, str]]:
        adapter = service.register(session, actor, name, number, body, settings.source_roots)
        return AdapterOut.of(adapter), {"ETag": service.adapter_etag(adapter)}

    return respond_once(request, session, actor, idempotency_key, body, 201, perform)


@router.get(VERSION_ADAPTERS, responses=error_responses(404))
def list_adapters(name: ModelName, number: VersionNumber, session: DbSession, _: Reader,
                  limit: Limit = 50, offset: Offset = 0) -> Page[AdapterOut]:
    adapters, total = service.list_adapters(session, name, number, limit, offset)
    return Page(items=[AdapterOut.of(a) for a in adapters], total=total, limit=limit,
                offset=offset)


@router.get(VERSION_ADAPTERS + "/{adapter}", responses=error_responses(404))
def get_adapter(name: ModelName, number: VersionNumber, adapter: AdapterName,
                response: Response, session: DbSession, _: Reader) -> AdapterOut:
    return _adapter(response, service.get_adapter(session, name, number, adapter))


@router.delete(VERSION_ADAPTERS + "/{adapter}", status_code=status.HTTP_204_NO_CONTENT,
               responses=error_responses(404, 409, 412))
def delete_adapter(name: ModelName, number: VersionNumber, adapter: AdapterName,
                   session: DbSession, actor: Writer, if_match: IfMatch = None) -> Response:
    """Delete an adapter; refused (409) while a deployment wants it."""
    service.delete(session, actor, name, number, adapter, if_match)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def _started(request: Request, session: DbSession, actor: Writer, key: str | None,
             body: AdapterLoadRequest | None, runner: Runner, background: BackgroundTasks,
             start: Callable[[], tuple[DeploymentAdapter, Operation]]) -> JSONResponse:
    def perform() -> tuple[DeploymentAdapterStarted, dict[str, str]]:
        row, operation = start()
        answer = DeploymentAdapterStarted(adapter=DeploymentAdapterOut.of(row),
                                          operation=OperationOut.of(operation))
        return answer, {"Location": f"/api/v1/operations/{operation.id}"}

    response = respond_once(request, session, actor, key, body, 202, perform)
    # Runs after the transaction commits (the session dependency ends first), so the runner
    # finds the operation; a replayed request submits it again, which the runner ignores.
    background.add_task(runner.submit, response.headers["Location"].rsplit("/", 1)[-1])
    return response


@router.post(DEPLOYMENT_ADAPTERS, status_code=202, response_model=DeploymentAdapterStarted,
             responses=error_responses(404, 409))
def load_adapter(deployment_id: DeploymentId, body: AdapterLoadRequest, request: Request,
                 session: DbSession, actor: Writer, runner: Runner, background: BackgroundTasks,
                 idempotency_key: IdempotencyKeyHeader = None) -> JSONResponse:
    """Load one of the served version's adapters into the deployment's engine (READY only).
    Poll the operation in the Location header; the adapter goes loading → loaded | failed."""
    return _started(request, session, actor, idempotency_key, body, runner, background,
                    lambda: loading.load(session, actor, deployment_id, body.name, body.version))


@router.delete(DEPLOYMENT_ADAPTERS + "/{adapter}", status_code=202,
               response_model=DeploymentAdapterStarted, responses=error_responses(404, 409))
def unload_adapter(deployment_id: DeploymentId, adapter: AdapterName, request: Request,
                   session: DbSession, actor: Writer, runner: Runner,
                   background: BackgroundTasks, idempotency_key: IdempotencyKeyHeader = None
                   ) -> JSONResponse:
    """Unload an adapter from the deployment's engine (unloading, then gone from the list)."""
    return _started(request, session, actor, idempotency_key, None, runner, background,
                    lambda: loading.unload(session, actor, deployment_id, adapter))


@router.get(DEPLOYMENT_ADAPTERS, responses=error_responses(404))
def list_deployment_adapters(deployment_id: DeploymentId, session: DbSession, _: Reader
                             ) -> list[DeploymentAdapterOut]:
    """The adapters wanted on the deployment, each with its state there (loading, loaded,
    failed with the backend's reason, unloading)."""
    return [DeploymentAdapterOut.of(row) for row in loading.list_wanted(session, deployment_id)]
