"""REST endpoints of Triton nodes: translate between JSON and service calls, nothing more."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response, status
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from control_plane.api_params import IfMatch, LabelFilter
from control_plane.auth.dependencies import NodeAgent, Reader, Writer
from control_plane.dependencies import AppSettings, DbSession
from control_plane.error_handlers import error_responses
from control_plane.idempotency.http import IdempotencyKeyHeader, respond_once
from control_plane.labels import parse_label_filter
from control_plane.nodes import service
from control_plane.nodes.dependents import NodeDependents, node_dependents
from control_plane.nodes.orm import TritonNode
from control_plane.nodes.schemas import (
    NodeCreate,
    NodeLeave,
    NodeName,
    NodeOut,
    NodeRegistration,
    NodeUpdate,
)
from control_plane.nodes.triton_version import ObservedVersion
from control_plane.pagination import Limit, Offset, Page
from control_plane.settings import Settings

router = APIRouter(prefix="/nodes", tags=["nodes"], responses=error_responses(401, 403, 422, 503))
Dependents = Annotated[NodeDependents, Depends(node_dependents)]


def _out(session: Session, settings: Settings, dependents: NodeDependents,
         nodes: Sequence[TritonNode]) -> list[NodeOut]:
    """Nodes with the Triton version the reconciler last read on each, checked against the
    minimum."""
    versions = dependents.server_versions(session, [node.id for node in nodes])
    return [NodeOut.of(node, ObservedVersion.check(versions.get(node.id),
                                                   settings.min_triton_version))
            for node in nodes]


def _node(response: Response, session: Session, settings: Settings, dependents: NodeDependents,
          node: TritonNode) -> NodeOut:
    response.headers["ETag"] = service.node_etag(node)
    return _out(session, settings, dependents, [node])[0]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=NodeOut,
             responses=error_responses(409))
def register_node(body: NodeCreate, request: Request, session: DbSession, actor: Writer,
                  idempotency_key: IdempotencyKeyHeader = None) -> JSONResponse:
    def perform() -> tuple[NodeOut, dict[str, str]]:
        node = service.register_node(session, actor, body)
        return NodeOut.of(node), {"ETag": service.node_etag(node)}

    return respond_once(request, session, actor, idempotency_key, body, 201, perform)


@router.get("")
def list_nodes(session: DbSession, settings: AppSettings, dependents: Dependents, _: Reader,
               label: LabelFilter = [],  # noqa: B006
               limit: Limit = 50, offset: Offset = 0) -> Page[NodeOut]:
    nodes, total = service.list_nodes(session, parse_label_filter(label), limit, offset)
    return Page(items=_out(session, settings, dependents, nodes), total=total, limit=limit,
                offset=offset)


@router.get("/{name}", responses=error_responses(404))
def get_node(name: NodeName, response: Response, session: DbSession, settings: AppSettings,
             dependents: Dependents, _: Reader) -> NodeOut:
    return _node(response, session, settings, dependents, service.get_node(session, name))


@router.patch("/{name}", responses=error_responses(404, 412))
def update_node(name: NodeName, body: NodeUpdate, response: Response, session: DbSession,
                settings: AppSettings, dependents: Dependents, actor: Writer,
                if_match: IfMatch = None) -> NodeOut:
    return _node(response, session, settings, dependents,
                 service.update_node(session, actor, name, body, if_match))


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT,
               responses=error_responses(404, 409, 412))
def remove_node(name: NodeName, session: DbSession, dependents: Dependents, actor: Writer,
                if_match: IfMatch = None) -> Response:
    """Forget a node; refused while anything is deployed on it."""
    dependents.check_removable(session, name)
    service.remove_node(session, actor, name, if_match)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put("/{name}/registration", response_model=NodeOut, responses={201: {"model": NodeOut}})
def join_node(name: NodeName, body: NodeRegistration, session: DbSession, settings: AppSettings,
              dependents: Dependents, actor: NodeAgent) -> JSONResponse:
    """A node's agent registers it as it starts (a ``node``-scope token): 201 the first time,
    200 after (addresses refreshed, back in service). Safe to repeat."""
    node, created = service.join(session, actor, name, body)
    out = _out(session, settings, dependents, [node])[0]
    return JSONResponse(out.model_dump(mode="json"),
                        status_code=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
                        headers={"ETag": service.node_etag(node)})


@router.delete("/{name}/registration", responses=error_responses(404))
def leave_node(name: NodeName, session: DbSession, dependents: Dependents,
               actor: NodeAgent) -> NodeLeave:
    """A node's agent takes it out as it stops: cordoned at once, forgotten if nothing is
    deployed there."""
    return service.leave(session, actor, name, dependents.check_removable)
