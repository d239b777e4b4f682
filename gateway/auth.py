"""Who is calling (an API key bound to a tenant), what they may call, and at which priority.

Keys are checked against the sha256 hashes the control plane publishes in the routing table, so
the gateway keeps authenticating while the control plane is away, and never sees a stored key.
"""

from __future__ import annotations

import hashlib

from gateway.errors import BadRequest, PermissionDenied, Unauthenticated
from gateway.routing.table import OverLimit, Route, RoutingTable, Tenant

BEARER = "bearer "
# Request parameters only the gateway sets; a client sending them is refused.
RESERVED_PARAMETERS = frozenset({"tenant", "gateway_secret", "tenant_weight"})


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def bearer_key(authorization: str | None) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header, or None when there is none."""
    if not authorization:
        return None
    if not authorization[: len(BEARER)].lower() == BEARER:
        raise Unauthenticated("the Authorization header must be 'Bearer <API key>'")
    return authorization[len(BEARER):].strip() or None


def authenticate(table: RoutingTable, key: str | None, anonymous_tenant: str | None) -> Tenant:
    """The tenant a request runs as; refuses missing, unknown and disabled keys."""
    if key is None:
        if anonymous_tenant is None:
            raise Unauthenticated("an API key is required: send 'Authorization: Bearer <key>' "
                                  "(gRPC: metadata 'authorization'); an operator creates keys "
                                  "with 'llmctl tenants keys create <tenant>'")
        name = anonymous_tenant
    else:
        found = table.tenant_by_key_hash.get(key_hash(key))
        if found is None:
            raise Unauthenticated("this API key is not valid (unknown or revoked); ask an "
                                  "operator for a key")
        name = found
    tenant = table.tenants.get(name)
    if tenant is None:
        raise Unauthenticated(f"tenant '{name}' does not exist")
    if not tenant.enabled:
        raise PermissionDenied(f"tenant '{tenant.name}' is disabled; ask an operator to enable it")
    return tenant


def authorize(tenant: Tenant, route: Route) -> None:
    if not tenant.may_use(route):
        raise PermissionDenied(f"tenant '{tenant.name}' may not use model '{route.name}'; "
                               f"it may use: {', '.join(sorted(tenant.allowed_models)) or 'none'}")


def priority_for(tenant: Tenant, requested: int | None) -> int | None:
    """The level the backend gets: the tenant's default when none is asked for, a level more
    urgent than the tenant's limit refused or lowered to it (per tenant). None: the model's
    default. Level 1 is the most urgent."""
    if requested is None:
        return tenant.default_priority_level
    if requested < 1:
        raise BadRequest(f"priority must be a level of 1 or more (1 is the most urgent), got "
                         f"{requested}")
    if requested < tenant.max_priority_level:
        if tenant.priority_over_limit is OverLimit.LOWER:
            return tenant.max_priority_level
        raise PermissionDenied(
            f"tenant '{tenant.name}' may use priority levels {tenant.max_priority_level} and "
            f"above (1 is the most urgent), not {requested}; ask for "
            f"{tenant.max_priority_level} or more, or send none")
    return requested


def parse_priority(value: object, field: str) -> int | None:
    """A priority as clients send it: an integer, or a string of one."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise BadRequest(f"{field} must be an integer level, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise BadRequest(f"{field} must be an integer level (1 is the most urgent), got {value!r}")
