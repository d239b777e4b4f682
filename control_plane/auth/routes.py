"""REST endpoints of auth: creating tokens and reading the audit log (both admin only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status
from pydantic import AwareDatetime

from control_plane.auth import audit, tokens
from control_plane.auth.dependencies import Admin
from control_plane.auth.repository import AuditFilter
from control_plane.auth.schemas import AuditEventOut, TokenCreate, TokenCreated
from control_plane.dependencies import DbSession
from control_plane.error_handlers import error_responses
from control_plane.pagination import Limit, Offset, Page

router = APIRouter(tags=["auth"], responses=error_responses(401, 403, 422, 503))


@router.post("/tokens", status_code=status.HTTP_201_CREATED, responses=error_responses(409))
def create_token(body: TokenCreate, session: DbSession, actor: Admin) -> TokenCreated:
    """Create a token; the response is the only place its secret ever appears."""
    issued = tokens.create_token(session, actor, body.name, body.scope)
    return TokenCreated(name=issued.name, scope=issued.scope, secret=issued.secret)


@router.get("/audit")
def list_audit_events(
    session: DbSession, _: Admin,
    actor: str | None = None, action: str | None = None, target_type: str | None = None,
    target: str | None = None,
    since: Annotated[AwareDatetime | None, Query(description="inclusive, with zone")] = None,
    until: Annotated[AwareDatetime | None, Query(description="exclusive, with zone")] = None,
    limit: Limit = 50, offset: Offset = 0,
) -> Page[AuditEventOut]:
    where = AuditFilter(actor=actor, action=action, target_type=target_type, target=target,
                        since=since, until=until)
    events, total = audit.list_events(session, where, limit, offset)
    return Page(items=[AuditEventOut.of(e) for e in events], total=total, limit=limit,
                offset=offset)
