"""The request parameters the backend gets from the gateway: the priority level the tenant may
use, the tenant's name and the secret that makes the backend trust it. Pure, shared by every
protocol."""

from __future__ import annotations

from typing import Any

from gateway.auth import RESERVED_PARAMETERS, parse_priority, priority_for
from gateway.errors import BadRequest
from gateway.routing.table import Tenant

# The backend reads either name; over gRPC Triton consumes "priority" itself, so the gateway
# always sends "priority_level".
PRIORITY_NAMES = ("priority", "priority_level")
BACKEND_PRIORITY = "priority_level"


def requested_priority(parameters: dict[str, Any]) -> int | None:
    values = {name: parse_priority(parameters.get(name), f"parameters.{name}")
              for name in PRIORITY_NAMES if parameters.get(name) is not None}
    if len(set(values.values())) > 1:
        raise BadRequest(f"parameters.priority and parameters.priority_level disagree "
                         f"({values}); send one")
    return next(iter(values.values()), None)


def for_backend(parameters: dict[str, Any], tenant: Tenant, gateway_secret: str | None,
                requested: int | None = None) -> dict[str, Any]:
    """``parameters`` as the backend should get them; refuses what only the gateway may set.

    ``requested`` is a priority the protocol carried outside the parameters (OpenAI's extra
    field or header); the parameters' own wins when both are given and agree.
    """
    reserved = RESERVED_PARAMETERS & parameters.keys()
    if reserved:
        raise BadRequest(f"parameters {', '.join(sorted(reserved))} are set by the gateway, "
                         "not by clients; remove them")
    in_parameters = requested_priority(parameters)
    if in_parameters is not None and requested is not None and in_parameters != requested:
        raise BadRequest(f"two priorities given ({requested} and parameters.priority "
                         f"{in_parameters}); send one")
    level = priority_for(tenant, in_parameters if in_parameters is not None else requested)
    result = {k: v for k, v in parameters.items() if k not in PRIORITY_NAMES}
    if level is not None:
        result[BACKEND_PRIORITY] = level
    if gateway_secret is not None:
        result["tenant"] = tenant.name
        result["gateway_secret"] = gateway_secret
        if tenant.weight != 1.0:
            result["tenant_weight"] = tenant.weight
    return result
