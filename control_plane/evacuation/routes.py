"""REST endpoint of GPU evacuations: what is being moved off faulty GPUs, and what is stuck."""

from __future__ import annotations

from fastapi import APIRouter

from control_plane.auth.dependencies import Reader
from control_plane.dependencies import DbSession
from control_plane.error_handlers import error_responses
from control_plane.evacuation.repository import EvacuationRepository
from control_plane.evacuation.schemas import EvacuationOut, EvacuationsOut

router = APIRouter(tags=["gpus"], responses=error_responses(401, 403, 503))


@router.get("/evacuations")
def list_evacuations(session: DbSession, _: Reader) -> EvacuationsOut:
    """Deployments on GPUs that reported faults: where each is moving, or why it cannot."""
    return EvacuationsOut(items=[EvacuationOut.of(row)
                                 for row in EvacuationRepository(session).all()])
