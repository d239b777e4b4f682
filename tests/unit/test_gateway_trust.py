"""Unit tests for llm_backend.gateway_trust: a tenant is trusted only from the gateway."""

from __future__ import annotations

import pytest

from llm_backend.errors import InvalidRequest
from llm_backend.gateway_trust import (
    GATEWAY_PARAMETERS,
    GATEWAY_SECRET_ENV,
    MAX_TENANT_LENGTH,
    GatewayTrust,
)

SECRET = "gw-s3cret-value"
NODE = GatewayTrust(SECRET)
UNCONFIGURED = GatewayTrust()


def test_names():
    assert GATEWAY_SECRET_ENV == "LLM_GATEWAY_SECRET"
    assert GATEWAY_PARAMETERS == frozenset({"tenant", "gateway_secret", "tenant_weight"})


@pytest.mark.parametrize("trust", [NODE, UNCONFIGURED])
def test_a_request_without_gateway_parameters_has_no_tenant(trust):
    assert trust.tenant({}) is None
    assert trust.tenant({"priority": 1}) is None
    assert trust.tenant({"tenant": None, "gateway_secret": None}) is None


@pytest.mark.parametrize("tenant",
                         ["acme", "team-a/prod", "Ünïcode tenant", "x" * MAX_TENANT_LENGTH])
def test_the_right_secret_vouches_for_the_tenant(tenant):
    assert NODE.tenant({"tenant": tenant, "gateway_secret": SECRET}) == tenant


# (trust, parameters, field, fragment): every refusal, table-driven.
REFUSALS = [
    (NODE, {"tenant": "acme"}, "tenant", "it comes with 'gateway_secret'"),
    (UNCONFIGURED, {"tenant": "acme"}, "tenant", "it comes with 'gateway_secret'"),
    (NODE, {"gateway_secret": SECRET}, "gateway_secret", "only accepted together with 'tenant'"),
    (UNCONFIGURED, {"gateway_secret": "x"}, "gateway_secret", "together with 'tenant'"),
    (UNCONFIGURED, {"tenant": "acme", "gateway_secret": SECRET}, "tenant",
     "LLM_GATEWAY_SECRET is not set in tritonserver's environment"),
    (NODE, {"tenant": "acme", "gateway_secret": "wrong"}, "tenant",
     "'gateway_secret' does not match this node's LLM_GATEWAY_SECRET"),
    (NODE, {"tenant": "acme", "gateway_secret": SECRET[:-1]}, "tenant", "does not match"),
    (NODE, {"tenant": "acme", "gateway_secret": SECRET + " "}, "tenant", "does not match"),
    (NODE, {"tenant": "acme", "gateway_secret": ""}, "tenant", "does not match"),
    (NODE, {"tenant": "acme", "gateway_secret": 12345}, "tenant", "does not match"),
]


@pytest.mark.parametrize(("trust", "parameters", "field", "fragment"), REFUSALS)
def test_untrusted_claims_are_refused(trust, parameters, field, fragment):
    with pytest.raises(InvalidRequest) as info:
        trust.tenant(parameters)
    err = info.value
    assert err.field == field
    assert fragment in err.message
    if field == "tenant":
        assert "parameter 'tenant' may only be set by the gateway" in err.message


@pytest.mark.parametrize(("trust", "parameters", "field", "fragment"), REFUSALS)
def test_no_refusal_shows_a_secret(trust, parameters, field, fragment):
    with pytest.raises(InvalidRequest) as info:
        trust.tenant(parameters)
    assert SECRET not in info.value.message
    assert SECRET[:-1] not in info.value.message
    assert SECRET not in repr(trust)


@pytest.mark.parametrize("tenant", ["", "   ", 7, ["acme"], "a\nb", "x" * (MAX_TENANT_LENGTH + 1)])
def test_a_vouched_tenant_must_be_a_short_printable_name(tenant):
    with pytest.raises(InvalidRequest) as info:
        NODE.tenant({"tenant": tenant, "gateway_secret": SECRET})
    assert info.value.field == "tenant"


def test_an_invalid_tenant_with_a_wrong_secret_reports_the_secret_first():
    with pytest.raises(InvalidRequest) as info:
        NODE.tenant({"tenant": "", "gateway_secret": "wrong"})
    assert "does not match" in info.value.message


@pytest.mark.parametrize(("environ", "configured"), [
    ({}, False), ({GATEWAY_SECRET_ENV: ""}, False), ({GATEWAY_SECRET_ENV: SECRET}, True),
])
def test_from_environment(environ, configured):
    trust = GatewayTrust.from_environment(environ)
    assert trust.configured is configured
    assert trust == (NODE if configured else UNCONFIGURED)


def test_a_tenant_weight_is_taken_only_with_a_trusted_tenant():
    trust = GatewayTrust("s3cret")
    assert trust.weight({}, None) == 1.0
    assert trust.weight({"tenant_weight": "2.5"}, "acme") == 2.5
    with pytest.raises(InvalidRequest, match="may only be set by the gateway"):
        trust.weight({"tenant_weight": 2}, None)
    for bad in ("lots", 0, -1, 5000):
        with pytest.raises(InvalidRequest, match="tenant_weight"):
            trust.weight({"tenant_weight": bad}, "acme")
