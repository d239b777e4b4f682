"""Which tenant a request is for: a claim only the inference gateway may make.

The gateway adds two request parameters, ``tenant`` and ``gateway_secret``; the node trusts the
tenant only when the secret equals its own ``LLM_GATEWAY_SECRET``. Anything else that names a
tenant is refused rather than ignored, so a client talking to a node directly cannot be counted
as (or bill) someone else, and a misconfigured gateway finds out at once.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llm_backend.errors import InvalidRequest

TENANT_PARAMETER = "tenant"
GATEWAY_SECRET_PARAMETER = "gateway_secret"
GATEWAY_SECRET_ENV = "LLM_GATEWAY_SECRET"
# The tenant's fair-share weight (the control plane's), trusted with the tenant only.
WEIGHT_PARAMETER = "tenant_weight"
GATEWAY_PARAMETERS = frozenset({TENANT_PARAMETER, GATEWAY_SECRET_PARAMETER, WEIGHT_PARAMETER})
MAX_WEIGHT = 1000.0
# A tenant becomes a metric label value: keep it short and printable.
MAX_TENANT_LENGTH = 128


@dataclass(frozen=True)
class GatewayTrust:
    """The node's side of the gateway handshake; ``secret`` None: no gateway configured."""

    secret: str | None = field(default=None, repr=False)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> GatewayTrust:
        return cls(environ.get(GATEWAY_SECRET_ENV) or None)

    @property
    def configured(self) -> bool:
        return self.secret is not None

    def tenant(self, parameters: Mapping[str, Any]) -> str | None:
        """The tenant a request may be counted under, or None; refuses an untrusted claim.

        Error messages never contain the secret, sent or configured.
        """
        tenant = parameters.get(TENANT_PARAMETER)
        sent = parameters.get(GATEWAY_SECRET_PARAMETER)
        if tenant is None and sent is None:
            return None
        if tenant is None:
            raise InvalidRequest(
                GATEWAY_SECRET_PARAMETER,
                f"is only accepted together with '{TENANT_PARAMETER}'; leave both out, or send "
                "the request through the gateway",
            )
        refusal = f"parameter '{TENANT_PARAMETER}' may only be set by the gateway"
        if sent is None:
            raise InvalidRequest(
                TENANT_PARAMETER,
                f"{refusal} (it comes with '{GATEWAY_SECRET_PARAMETER}'); send the request "
                "through the gateway, or leave 'tenant' out",
            )
        if self.secret is None:
            raise InvalidRequest(
                TENANT_PARAMETER,
                f"{refusal}, and this node has no gateway configured ({GATEWAY_SECRET_ENV} is "
                "not set in tritonserver's environment); set it to the gateway's secret, or "
                "leave 'tenant' out",
            )
        if not isinstance(sent, str) or not hmac.compare_digest(
            sent.encode("utf-8"), self.secret.encode("utf-8")
        ):
            raise InvalidRequest(
                TENANT_PARAMETER,
                f"{refusal}: '{GATEWAY_SECRET_PARAMETER}' does not match this node's "
                f"{GATEWAY_SECRET_ENV}; check that the gateway and the node share one secret",
            )
        return _valid_tenant(tenant)


    def weight(self, parameters: Mapping[str, Any], tenant: str | None) -> float:
        """The tenant's fair-share weight (1 when not given); only with a trusted tenant."""
        value = parameters.get(WEIGHT_PARAMETER)
        if value is None:
            return 1.0
        if tenant is None:
            raise InvalidRequest(WEIGHT_PARAMETER, f"may only be set by the gateway, with "
                                 f"'{TENANT_PARAMETER}'; leave it out")
        try:
            weight = float(value)
        except (TypeError, ValueError):
            raise InvalidRequest(WEIGHT_PARAMETER, f"must be a number, got {value!r}") from None
        if not 0 < weight <= MAX_WEIGHT:
            raise InvalidRequest(WEIGHT_PARAMETER, f"must be in (0, {MAX_WEIGHT:g}], got "
                                 f"{weight:g}")
        return weight

def _valid_tenant(tenant: Any) -> str:
    if not isinstance(tenant, str) or not tenant.strip():
        raise InvalidRequest(TENANT_PARAMETER, f"must be a non-empty string, got {tenant!r}")
    if len(tenant) > MAX_TENANT_LENGTH or not tenant.isprintable():
        raise InvalidRequest(
            TENANT_PARAMETER,
            f"must be at most {MAX_TENANT_LENGTH} printable characters, got {tenant[:40]!r}"
            f"{'...' if len(tenant) > 40 else ''} ({len(tenant)} characters)",
        )
    return tenant
