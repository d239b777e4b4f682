"""REST endpoints of auth: creating, listing and revoking tokens, reading the audit log (all
admin only)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status
from pydantic import AfterValidator, AwareDatetime, BeforeValidator

from control_plane.api_params import TextFilter
from control_plane.auth import audit, tokens
from control_plane.auth.dependencies import Admin
from control_plane.auth.repository import AuditFilter
from control_plane.auth.schemas import AuditEventOut, TokenCreate, TokenCreated, TokenOut
from control_plane.dependencies import DbSession
from control_plane.error_handlers import error_responses
from control_plane.pagination import Limit, Offset, Page

router = APIRouter(tags=["auth"], responses=error_responses(401, 403, 422, 503))

_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def _iso_8601_only(value: object) -> object:
    # pydantic also reads a number as Unix time, so since=2024 meant 1970-01-01T00:33:44Z.
    if isinstance(value, str) and not _ISO_DATE.match(value):
        raise ValueError("expected an ISO 8601 date-time with zone, e.g. 2024-06-01T00:00:00Z")
    return value


def _in_utc(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("is outside years 1-9999 once converted to UTC") from None


Instant = Annotated[AwareDatetime, BeforeValidator(_iso_8601_only), AfterValidator(_in_utc)]


@router.post("/tokens", status_code=status.HTTP_201_CREATED, responses=error_responses(409))
def create_token(body: TokenCreate, session: DbSession, actor: Admin) -> TokenCreated:
    """Create a token; the response is the only place its secret ever appears."""
    issued = tokens.create_token(session, actor, body.name, body.scope)
    return TokenCreated(name=issued.name, scope=issued.scope, secret=issued.secret)


@router.get("/tokens")
def list_tokens(session: DbSession, _: Admin, limit: Limit = 50, offset: Offset = 0
                ) -> Page[TokenOut]:
    """Tokens by name, scope and creation time, oldest first; secrets are never shown again."""
    found, total = tokens.list_tokens(session, limit, offset)
    return Page(items=[TokenOut.of(t) for t in found], total=total, limit=limit, offset=offset)


@router.delete("/tokens/{name}", status_code=status.HTTP_204_NO_CONTENT,
               responses=error_responses(404))
def revoke_token(name: Annotated[str, Path(max_length=64)], session: DbSession, actor: Admin
                 ) -> Response:
    """Revoke a token: it stops authenticating with the next request. Revoking the last admin
    token leaves 'llm-control-plane tokens create' on the server to make a new one."""
    tokens.revoke_token(session, actor, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/audit")
def list_audit_events(
    session: DbSession, _: Admin,
    actor: TextFilter = None, action: TextFilter = None, target_type: TextFilter = None,
    target: TextFilter = None,
    since: Annotated[Instant | None, Query(description="inclusive, with zone")] = None,
    until: Annotated[Instant | None, Query(description="exclusive, with zone")] = None,
    limit: Limit = 50, offset: Offset = 0,
) -> Page[AuditEventOut]:
    where = AuditFilter(actor=actor, action=action, target_type=target_type, target=target,
                        since=since, until=until)
    events, total = audit.list_events(session, where, limit, offset)
    return Page(items=[AuditEventOut.of(e) for e in events], total=total, limit=limit,
                offset=offset)
