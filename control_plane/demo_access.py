"""What ``make serve`` sets up for the gateway it starts: a read-scope control-plane token for the
gateway's routing table, and the demo tenant with an API key the printed examples use.

The demo key is kept in a file only its owner can read, so the examples a user copied keep
working after a restart; a key revoked through the API is replaced by a new one.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from sqlalchemy.orm import Session

from control_plane.auth import tokens
from control_plane.auth.scopes import Actor, Scope
from control_plane.auth.tokens import hash_secret
from control_plane.errors import TenantNotFound, TokenNotFound
from control_plane.tenants import service as tenants
from control_plane.tenants.repository import InferenceKeyRepository
from control_plane.tenants.schemas import TenantCreate

ACTOR = Actor(name="make-serve", scope=Scope.ADMIN)
DEMO_TENANT = "demo"
GATEWAY_TOKEN = "local-gateway"


def gateway_token(session: Session) -> str:
    """A fresh token for this start's gateway: it reads the routing table and reports usage
    (the previous start's is revoked)."""
    with contextlib.suppress(TokenNotFound):
        tokens.revoke_token(session, ACTOR, GATEWAY_TOKEN)
    return tokens.create_token(session, ACTOR, GATEWAY_TOKEN, Scope.REPORT).secret


def demo_key(session: Session, key_file: Path) -> str:
    """The demo tenant's key: the one in ``key_file`` while it is active, else a new one."""
    try:
        tenant = tenants.get_tenant(session, DEMO_TENANT)
    except TenantNotFound:
        tenant = tenants.create_tenant(session, ACTOR, TenantCreate(name=DEMO_TENANT))
    if key_file.exists():
        secret = key_file.read_text().strip()
        active = InferenceKeyRepository(session).active_hashes().get(tenant.id, [])
        if hash_secret(secret) in active:
            return secret
    existing = InferenceKeyRepository(session).of_tenant(tenant.id, 1, 0)[1]
    issued = tenants.create_key(session, ACTOR, DEMO_TENANT, f"demo-{existing + 1}")
    key_file.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(issued.secret + "\n")
    return issued.secret
