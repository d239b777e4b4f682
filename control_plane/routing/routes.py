"""The routing table endpoint (read scope), with an optional long poll."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from control_plane.auth.dependencies import Reader
from control_plane.error_handlers import error_responses
from control_plane.routing import service
from control_plane.routing.schemas import RoutingTable

router = APIRouter(tags=["routing"], responses=error_responses(401, 403, 422, 503))

# Empty: the caller has no table yet (a gateway's first poll).
Revision = Annotated[str | None, Query(
    pattern=r"^([0-9a-f]{64})?$", description="the revision the caller has; with wait, answer "
                                              "once the table differs from it")]
WaitSeconds = Annotated[float, Query(
    ge=0, le=service.MAX_WAIT_S, description="seconds to wait for a change of 'after'")]


@router.get("/routing")
async def get_routing(request: Request, _: Reader, after: Revision = None,
                      wait: WaitSeconds = 0) -> RoutingTable:
    """Served models with the nodes that serve them now, and tenants with their active key
    hashes. With after=<revision> and wait>0, answers once the revision differs from after, or
    after wait seconds with the table as it is."""
    # Async, and each read in the thread pool: a waiting poll holds neither a worker thread nor
    # a database connection between reads.
    factory = request.app.state.session_factory

    async def read() -> RoutingTable:
        return await run_in_threadpool(service.read_routing_table, factory)

    return await service.next_table(read, after or None, wait, gone=request.is_disconnected)
