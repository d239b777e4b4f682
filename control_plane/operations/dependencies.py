"""FastAPI plumbing for routes that start operations."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import Depends, Request
from fastapi.responses import JSONResponse

from control_plane.operations.runner import OperationRunner


async def _runner(request: Request) -> OperationRunner:
    runner: OperationRunner = request.app.state.operation_runner
    return runner


def operation_id_of(response: JSONResponse) -> str:
    """The id in a 202 response's body (also when an idempotent retry replayed it)."""
    operation_id: str = json.loads(bytes(response.body))["id"]
    return operation_id


Runner = Annotated[OperationRunner, Depends(_runner)]
