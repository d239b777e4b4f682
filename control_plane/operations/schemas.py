"""The JSON shape of an operation."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from control_plane.operations.orm import Operation, OperationStatus


class OperationOut(BaseModel):
    id: str
    kind: str
    status: OperationStatus
    target_type: str
    target: str
    arguments: dict[str, Any]
    result: dict[str, Any] | None
    error: str | None
    created_by: str
    request_id: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, operation: Operation) -> OperationOut:
        return cls(id=operation.id, kind=operation.kind,
                   status=OperationStatus(operation.status), target_type=operation.target_type,
                   target=operation.target, arguments=operation.arguments,
                   result=operation.result, error=operation.error,
                   created_by=operation.created_by, request_id=operation.request_id,
                   created_at=operation.created_at, started_at=operation.started_at,
                   finished_at=operation.finished_at)
