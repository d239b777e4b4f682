"""REST endpoints of tenants and their inference API keys: admin scope to change, read scope to
read. They translate between JSON and service calls, nothing more."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from control_plane.api_params import IfMatch
from control_plane.auth.dependencies import Admin, Reader
from control_plane.dependencies import DbSession
from control_plane.error_handlers import error_responses
from control_plane.pagination import MAX_OFFSET, Limit, Offset, Page
from control_plane.tenants import service
from control_plane.tenants.orm import Tenant
from control_plane.tenants.schemas import (
    KeyCreate,
    KeyCreated,
    KeyOut,
    TenantCreate,
    TenantOut,
    TenantUpdate,
)

router = APIRouter(prefix="/tenants", tags=["tenants"],
                   responses=error_responses(401, 403, 422, 503))

TenantName = Annotated[str, Path(max_length=64)]
# Stored as 32-bit integers (PostgreSQL INTEGER).
KeyId = Annotated[int, Path(ge=1, le=MAX_OFFSET)]


def _tenant(response: Response, tenant: Tenant) -> TenantOut:
    response.headers["ETag"] = service.tenant_etag(tenant)
    return TenantOut.of(tenant)


@router.post("", status_code=status.HTTP_201_CREATED, responses=error_responses(409))
def create_tenant(body: TenantCreate, response: Response, session: DbSession, actor: Admin
                  ) -> TenantOut:
    tenant = service.create_tenant(session, actor, body)
    response.headers["Location"] = f"/api/v1/tenants/{tenant.name}"
    return _tenant(response, tenant)


@router.get("")
def list_tenants(session: DbSession, _: Reader, limit: Limit = 50, offset: Offset = 0
                 ) -> Page[TenantOut]:
    """Tenants by name."""
    tenants, total = service.list_tenants(session, limit, offset)
    return Page(items=[TenantOut.of(t) for t in tenants], total=total, limit=limit,
                offset=offset)


@router.get("/{name}", responses=error_responses(404))
def get_tenant(name: TenantName, response: Response, session: DbSession, _: Reader
               ) -> TenantOut:
    return _tenant(response, service.get_tenant(session, name))


@router.patch("/{name}", responses=error_responses(404, 412))
def update_tenant(name: TenantName, body: TenantUpdate, response: Response, session: DbSession,
                  actor: Admin, if_match: IfMatch = None) -> TenantOut:
    """Change only the fields given (``limits`` and ``model_limits`` whole)."""
    return _tenant(response, service.update_tenant(session, actor, name, body, if_match))


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT,
               responses=error_responses(404, 412))
def delete_tenant(name: TenantName, session: DbSession, actor: Admin,
                  if_match: IfMatch = None) -> Response:
    """Delete the tenant and all its keys."""
    service.delete_tenant(session, actor, name, if_match)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{name}/keys", status_code=status.HTTP_201_CREATED,
             responses=error_responses(404, 409))
def create_key(name: TenantName, body: KeyCreate, session: DbSession, actor: Admin
               ) -> KeyCreated:
    """Create an inference API key; the response is the only place its secret ever appears."""
    issued = service.create_key(session, actor, name, body.name)
    key = issued.key
    return KeyCreated(id=key.id, name=key.name, prefix=key.prefix, key=issued.secret,
                      created_at=key.created_at)


@router.get("/{name}/keys", responses=error_responses(404))
def list_keys(name: TenantName, session: DbSession, _: Reader, limit: Limit = 50,
              offset: Offset = 0) -> Page[KeyOut]:
    """The tenant's keys, oldest first, revoked ones too (flagged); never a secret."""
    found, total = service.list_keys(session, name, limit, offset)
    return Page(items=[KeyOut.of(k) for k in found], total=total, limit=limit, offset=offset)


@router.delete("/{name}/keys/{key_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses=error_responses(404))
def revoke_key(name: TenantName, key_id: KeyId, session: DbSession, actor: Admin) -> Response:
    """Revoke a key: the gateway refuses it from its next routing table on. Idempotent."""
    service.revoke_key(session, actor, name, key_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
