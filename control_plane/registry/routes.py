"""REST endpoints of the registry: translate between JSON and service calls, nothing more."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, Path, Query, Request, Response, status
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from control_plane.api_params import IfMatch, LabelFilter
from control_plane.auth.dependencies import Reader, Writer
from control_plane.auth.scopes import Actor
from control_plane.cached_reads import Answer, cached_json
from control_plane.db import transaction
from control_plane.dependencies import AppSettings, DbSession
from control_plane.error_handlers import error_responses
from control_plane.idempotency.http import IdempotencyKeyHeader, respond_once
from control_plane.labels import parse_label_filter
from control_plane.operations.dependencies import Runner
from control_plane.operations.dependencies import operation_id_of as _operation_id
from control_plane.operations.schemas import OperationOut
from control_plane.pagination import Limit, Offset, Page, page_json
from control_plane.read_cache import REGISTRY
from control_plane.registration_threads import RegistrationThreads
from control_plane.registry import aliases, service, tokenizer, validation
from control_plane.registry.orm import Model, ModelAlias, ModelVersion
from control_plane.registry.schemas import (
    MODEL_NAME_PATTERN,
    AliasMoveOut,
    AliasOut,
    ModelCreate,
    ModelName,
    ModelOut,
    ModelUpdate,
    TokenizerOut,
    VersionCreate,
    VersionOut,
    VersionUpdate,
)
from control_plane.registry.service import VersionConfigCheck
from control_plane.settings import Settings

router = APIRouter(prefix="/models", tags=["registry"],
                   responses=error_responses(401, 403, 422, 503))


async def _config_check(request: Request) -> VersionConfigCheck:
    # Triton's config builder, wired in by the app: the registry does not import Triton's code.
    check: VersionConfigCheck = request.app.state.version_config_check
    return check


ConfigCheck = Annotated[VersionConfigCheck, Depends(_config_check)]

# Version numbers are stored as 32-bit integers (PostgreSQL INTEGER).
VersionNumber = Annotated[int, Path(ge=1, le=2**31 - 1)]


def _model(response: Response, model: Model) -> ModelOut:
    response.headers["ETag"] = service.model_etag(model)
    return ModelOut.of(model)


def _version(response: Response, version: ModelVersion) -> VersionOut:
    response.headers["ETag"] = service.version_etag(version)
    return VersionOut.of(version)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ModelOut,
             responses=error_responses(409))
def create_model(body: ModelCreate, request: Request, session: DbSession, actor: Writer,
                 idempotency_key: IdempotencyKeyHeader = None) -> JSONResponse:
    def perform() -> tuple[ModelOut, dict[str, str]]:
        model = service.create_model(session, actor, body)
        return ModelOut.of(model), {"ETag": service.model_etag(model)}

    return respond_once(request, session, actor, idempotency_key, body, 201, perform)


@router.get("")
def list_models(session: DbSession, _: Reader, label: LabelFilter = [],  # noqa: B006
                limit: Limit = 50, offset: Offset = 0) -> Page[ModelOut]:
    models, total = service.list_models(session, parse_label_filter(label), limit, offset)
    return Page(items=[ModelOut.of(m) for m in models], total=total, limit=limit, offset=offset)


@router.get("/{name}", responses=error_responses(404))
def get_model(name: ModelName, response: Response, session: DbSession, _: Reader) -> ModelOut:
    return _model(response, service.get_model(session, name))


@router.patch("/{name}", responses=error_responses(404, 412))
def update_model(name: ModelName, body: ModelUpdate, response: Response, session: DbSession,
                 actor: Writer, if_match: IfMatch = None) -> ModelOut:
    return _model(response, service.update_model(session, actor, name, body, if_match))


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT,
               responses=error_responses(404, 409, 412))
def delete_model(name: ModelName, session: DbSession, actor: Writer, if_match: IfMatch = None
                 ) -> Response:
    service.delete_model(session, actor, name, if_match)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{name}/versions", status_code=status.HTTP_201_CREATED, response_model=VersionOut,
             responses={**error_responses(404),
                        200: {"model": VersionOut,
                              "description": "dry_run: the version it would register"}})
async def register_version(name: ModelName, body: VersionCreate, request: Request,
                           actor: Writer, settings: AppSettings, config_check: ConfigCheck,
                           idempotency_key: IdempotencyKeyHeader = None,
                           dry_run: Annotated[bool, Query(
                               description="check everything registration checks and answer "
                                           "200 with the version it would create; store "
                                           "nothing")] = False,
                           ) -> JSONResponse:
    # On a registration thread, in turn (control_plane/registration_threads.py).
    threads: RegistrationThreads = request.app.state.registration_threads
    return await threads.run(lambda: _register(
        request, name, body, actor, settings, config_check, idempotency_key, dry_run))


def _register(request: Request, name: str, body: VersionCreate, actor: Actor, settings: Settings,
              config_check: VersionConfigCheck, idempotency_key: str | None,
              dry_run: bool) -> JSONResponse:
    # The source is read and hashed (every file of a local model) before the transaction opens.
    inspected = service.inspect_version(name, body, settings.source_roots, config_check)
    # Without a key or a dry run, PostgreSQL stores the version in one statement (number,
    # row, audit event): run alone, the model's lock is held for no round trip to this process.
    one_statement = idempotency_key is None and not dry_run
    with transaction(request.app.state.session_factory, one_statement=one_statement) as session:
        if dry_run:
            # The registration itself, inside a savepoint that is rolled back: the same checks,
            # the same number it would get, and nothing kept (not even the audit record).
            savepoint = session.begin_nested()
            try:
                preview = service.register_version(
                    session, actor, name, body, settings.source_roots, config_check,
                    inspected=inspected).out.model_dump(mode="json")
            finally:
                savepoint.rollback()
            return JSONResponse(preview, status_code=200)

        def perform() -> tuple[VersionOut, dict[str, str]]:
            registered = service.register_version(session, actor, name, body,
                                                  settings.source_roots, config_check,
                                                  inspected=inspected)
            return registered.out, {"ETag": registered.etag}

        return respond_once(request, session, actor, idempotency_key, body, 201, perform)


@router.get("/{name}/versions", response_model=Page[VersionOut], responses=error_responses(404))
async def list_versions(name: ModelName, request: Request, _: Reader, limit: Limit = 50,
                        offset: Offset = 0) -> Response:
    # The hottest read: from the read cache, or straight into one JSON body (see page_json()).
    def read(session: Session) -> Answer:
        versions, total = service.list_versions(session, name, limit, offset)
        return page_json(versions, total, limit, offset), {}

    return await cached_json(request, REGISTRY, ("versions", name, limit, offset), read)


@router.get("/{name}/versions/{number}", response_model=VersionOut,
            responses=error_responses(404))
async def get_version(name: ModelName, number: VersionNumber, request: Request, _: Reader
                      ) -> Response:
    # What CI polls while a version validates: from the read cache when it holds it.
    def read(session: Session) -> Answer:
        version = service.get_version(session, name, number)
        return (VersionOut.of(version).model_dump_json().encode(),
                {"ETag": service.version_etag(version)})

    return await cached_json(request, REGISTRY, ("version", name, number), read)


@router.get("/{name}/versions/{number}/tokenizer", responses=error_responses(404))
def version_tokenizer(name: ModelName, number: VersionNumber, request: Request,
                      _: Reader, settings: AppSettings) -> TokenizerOut:
    """The version's tokenizer.json, chat template and special tokens, from its local files:
    gateways count prompt tokens with them as the backend does. 404 TokenizerUnavailable says
    why there are none to serve (a remote source, no tokenizer.json, a file too large); a
    gateway then counts by bytes."""
    # The caller's token is checked (Reader) in a transaction that ends before this runs,
    # and the version is read in one of its own: megabytes are read from disk with none open.
    return TokenizerOut.of(tokenizer.read_version_tokenizer(
        request.app.state.session_factory, name, number, settings.source_roots,
        settings.tokenizer_max_bytes))


@router.post("/{name}/versions/{number}/validate", status_code=status.HTTP_202_ACCEPTED,
             response_model=OperationOut, responses=error_responses(404, 409))
def validate_version(name: ModelName, number: VersionNumber, request: Request, session: DbSession,
                     actor: Writer, runner: Runner, background: BackgroundTasks,
                     idempotency_key: IdempotencyKeyHeader = None) -> JSONResponse:
    """Start validating a registered version (source files, checksum, architecture); poll the
    operation in the Location header. On success the version becomes validated."""
    def perform() -> tuple[OperationOut, dict[str, str]]:
        operation = validation.start(session, actor, name, number)
        return OperationOut.of(operation), {"Location": f"/api/v1/operations/{operation.id}"}

    response = respond_once(request, session, actor, idempotency_key, None, 202, perform)
    # Runs after the transaction commits (the session dependency ends first), so the runner
    # finds the operation; a replayed request submits it again, which the runner ignores.
    background.add_task(runner.submit, _operation_id(response))
    return response


@router.patch("/{name}/versions/{number}", responses=error_responses(404, 409, 412))
def update_version(name: ModelName, number: VersionNumber, body: VersionUpdate, response: Response,
                   session: DbSession, actor: Writer, if_match: IfMatch = None) -> VersionOut:
    return _version(response, service.update_version(session, actor, name, number, body,
                                                     if_match))


AliasName = Annotated[str, Path(pattern=MODEL_NAME_PATTERN)]


def alias_out(response: Response, model: str, alias: ModelAlias) -> AliasOut:
    response.headers["ETag"] = aliases.alias_etag(alias)
    return AliasOut.of(model, alias)


@router.get("/{name}/aliases", responses=error_responses(404))
def list_aliases(name: ModelName, session: DbSession, _: Reader) -> list[AliasOut]:
    return [AliasOut.of(name, a) for a in aliases.list_aliases(session, name)]


@router.get("/{name}/aliases/{alias}", responses=error_responses(404))
def get_alias(name: ModelName, alias: AliasName, response: Response, session: DbSession, _: Reader
              ) -> AliasOut:
    return alias_out(response, name, aliases.get_alias(session, name, alias))


@router.get("/{name}/aliases/{alias}/history", responses=error_responses(404))
def alias_history(name: ModelName, alias: AliasName, session: DbSession, _: Reader,
                  limit: Limit = 50, offset: Offset = 0) -> Page[AliasMoveOut]:
    moves, total = aliases.alias_history(session, name, alias, limit, offset)
    return Page(items=[AliasMoveOut.of(m) for m in moves], total=total, limit=limit,
                offset=offset)
