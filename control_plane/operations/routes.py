"""REST endpoints of operations: read them (they are started by the features that own them)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from control_plane.api_params import TextFilter
from control_plane.auth.dependencies import Reader
from control_plane.dependencies import DbSession
from control_plane.error_handlers import error_responses
from control_plane.operations import service
from control_plane.operations.orm import OperationStatus
from control_plane.operations.repository import OperationFilter
from control_plane.operations.schemas import OperationOut
from control_plane.pagination import Limit, Offset, Page

router = APIRouter(prefix="/operations", tags=["operations"],
                   responses=error_responses(401, 403, 422, 503))

OperationId = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$")]


@router.get("")
def list_operations(session: DbSession, _: Reader, kind: TextFilter = None,
                    status: OperationStatus | None = None, target_type: TextFilter = None,
                    target: TextFilter = None, limit: Limit = 50, offset: Offset = 0
                    ) -> Page[OperationOut]:
    """Operations, newest first."""
    where = OperationFilter(kind=kind, status=status, target_type=target_type, target=target)
    operations, total = service.list_operations(session, where, limit, offset)
    return Page(items=[OperationOut.of(o) for o in operations], total=total, limit=limit,
                offset=offset)


@router.get("/{operation_id}", responses=error_responses(404))
def get_operation(operation_id: OperationId, session: DbSession, _: Reader) -> OperationOut:
    """One operation; poll it until ``status`` is succeeded or failed."""
    return OperationOut.of(service.get(session, operation_id))
