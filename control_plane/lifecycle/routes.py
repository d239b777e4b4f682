"""REST endpoints that move aliases: a move (a swap when the alias is deployed), a roll-back,
a deletion. Reading aliases is the registry's (``registry.routes``)."""

from __future__ import annotations

from fastapi import APIRouter, BackgroundTasks, Response, status
from fastapi.responses import JSONResponse

from control_plane.api_params import IfMatch
from control_plane.auth.dependencies import Writer
from control_plane.dependencies import DbSession
from control_plane.error_handlers import error_responses
from control_plane.lifecycle import alias_moves
from control_plane.lifecycle.alias_moves import AliasMoved, SwapStarted
from control_plane.operations.dependencies import Runner
from control_plane.operations.runner import OperationRunner
from control_plane.operations.schemas import OperationOut
from control_plane.registry.routes import AliasName, alias_out
from control_plane.registry.schemas import (
    AliasMoveRequest,
    AliasOut,
    AliasRollbackRequest,
    ModelName,
)

router = APIRouter(prefix="/models", tags=["registry"],
                   responses=error_responses(401, 403, 422, 503))


@router.put("/{name}/aliases/{alias}", response_model=AliasOut,
            responses={**error_responses(404, 409, 412),
                       202: {"model": OperationOut,
                             "description": "the alias is deployed: a swap operation started"}})
def move_alias(name: ModelName, alias: AliasName, body: AliasMoveRequest, response: Response,
               session: DbSession, actor: Writer, runner: Runner, background: BackgroundTasks,
               if_match: IfMatch = None) -> AliasOut | JSONResponse:
    """Point an alias at a version (creating it on first use); every move is kept in history.

    A deployed alias moves only once every node serves the new version: the answer is then 202
    with the swap operation, and the alias stays where it was if any node fails to load it."""
    outcome = alias_moves.move_alias(session, actor, name, alias, body.version, if_match)
    if isinstance(outcome, AliasMoved):
        return alias_out(response, name, outcome.alias)
    return _swap_started(outcome, runner, background)


def _swap_started(outcome: SwapStarted, runner: OperationRunner, background: BackgroundTasks
                  ) -> JSONResponse:
    # Submitted once the transaction has committed (the session dependency ends first).
    background.add_task(runner.submit, outcome.operation.id)
    return JSONResponse(OperationOut.of(outcome.operation).model_dump(mode="json"),
                        status_code=202,
                        headers={"Location": f"/api/v1/operations/{outcome.operation.id}"})


@router.post("/{name}/aliases/{alias}/rollback", response_model=AliasOut,
             responses={**error_responses(404, 409),
                        202: {"model": OperationOut,
                              "description": "the alias is deployed: a swap operation started"}})
def rollback_alias(name: ModelName, alias: AliasName, body: AliasRollbackRequest,
                   response: Response, session: DbSession, actor: Writer, runner: Runner,
                   background: BackgroundTasks) -> AliasOut | JSONResponse:
    """Move the alias back to the version it pointed at before its last move (or to ``to``),
    through the zero-downtime swap when it is deployed. 409 with the reason when there is
    nothing to go back to, or that version is archived or gone."""
    _, _, outcome = alias_moves.rollback(session, actor, name, alias, body.to)
    if isinstance(outcome, AliasMoved):
        return alias_out(response, name, outcome.alias)
    return _swap_started(outcome, runner, background)


@router.delete("/{name}/aliases/{alias}", status_code=status.HTTP_204_NO_CONTENT,
               responses=error_responses(404, 409, 412))
def delete_alias(name: ModelName, alias: AliasName, session: DbSession, actor: Writer,
                 if_match: IfMatch = None) -> Response:
    """Remove an alias; its moves stay in the audit log. Refused while it is deployed."""
    alias_moves.delete_alias(session, actor, name, alias, if_match)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
