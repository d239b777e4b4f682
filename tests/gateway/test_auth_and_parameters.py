"""Keys to tenants, what a tenant may call, and the parameters the backend gets."""

from __future__ import annotations

import pytest

from gateway.auth import authenticate, authorize, bearer_key, key_hash, priority_for
from gateway.backend_parameters import for_backend
from gateway.errors import BadRequest, PermissionDenied, Unauthenticated
from gateway.routing.table import OverLimit, Route, RoutingTable, Tenant

ROUTE = Route(name="m.canary", model="m", alias="canary", version=1, max_model_len=10,
              endpoints=())
OTHER = Route(name="x", model="x", alias="production", version=1, max_model_len=10,
              endpoints=())


def tenant(**overrides: object) -> Tenant:
    values: dict[str, object] = {"name": "acme", "enabled": True,
                                 "allowed_models": frozenset({"m"}), "max_priority_level": 2}
    values.update(overrides)
    return Tenant(**values)  # type: ignore[arg-type]


def table(*tenants: Tenant, keys: dict[str, str] | None = None) -> RoutingTable:
    return RoutingTable(revision="r", tenants={t.name: t for t in tenants},
                        tenant_by_key_hash={key_hash(k): v for k, v in (keys or {}).items()})


def test_bearer_header_is_parsed_and_other_schemes_refused() -> None:
    assert bearer_key("Bearer abc") == "abc"
    assert bearer_key("bearer  abc ") == "abc"
    assert bearer_key(None) is None
    with pytest.raises(Unauthenticated, match="Bearer <API key>"):
        bearer_key("Basic dXNlcg==")


def test_keys_resolve_to_enabled_tenants_only() -> None:
    routes = table(tenant(), tenant(name="off", enabled=False),
                   keys={"good": "acme", "disabled": "off"})
    assert authenticate(routes, "good", None).name == "acme"
    with pytest.raises(Unauthenticated, match="not valid"):
        authenticate(routes, "wrong", None)
    with pytest.raises(Unauthenticated, match="API key is required"):
        authenticate(routes, None, None)
    with pytest.raises(PermissionDenied, match="disabled"):
        authenticate(routes, "disabled", None)
    assert authenticate(routes, None, "acme").name == "acme"


def test_allowed_models_cover_every_alias_of_a_model() -> None:
    authorize(tenant(), ROUTE)
    authorize(tenant(allowed_models=frozenset({"*"})), OTHER)
    with pytest.raises(PermissionDenied, match="may not use model 'x'"):
        authorize(tenant(), OTHER)


@pytest.mark.parametrize(("requested", "over_limit", "expected"), [
    (None, OverLimit.REFUSE, 3), (2, OverLimit.REFUSE, 2), (3, OverLimit.REFUSE, 3),
    (1, OverLimit.LOWER, 2),
])
def test_priority_within_the_tenants_limit(requested: int | None, over_limit: OverLimit,
                                           expected: int) -> None:
    owner = tenant(default_priority_level=3, priority_over_limit=over_limit)
    assert priority_for(owner, requested) == expected


def test_priority_more_urgent_than_allowed_is_refused_by_default() -> None:
    with pytest.raises(PermissionDenied, match="priority levels 2 and above"):
        priority_for(tenant(), 1)
    with pytest.raises(BadRequest, match="1 or more"):
        priority_for(tenant(), 0)


def test_backend_parameters_carry_level_tenant_and_secret() -> None:
    sent = for_backend({"priority": "2", "temperature": 0}, tenant(), "s3cret")
    assert sent == {"priority_level": 2, "temperature": 0, "tenant": "acme",
                    "gateway_secret": "s3cret"}
    assert for_backend({}, tenant(), None) == {}
    assert for_backend({}, tenant(), None, requested=4) == {"priority_level": 4}
    # A weight other than 1 travels with the tenant, for the backend's fair share.
    assert for_backend({}, tenant(weight=2.0), "s3cret")["tenant_weight"] == 2.0
    assert "tenant_weight" not in for_backend({}, tenant(weight=2.0), None)
    with pytest.raises(BadRequest, match="set by the gateway"):
        for_backend({"tenant_weight": 9}, tenant(), "s3cret")


def test_clients_cannot_set_the_gateways_parameters_or_two_priorities() -> None:
    with pytest.raises(BadRequest, match="set by the gateway"):
        for_backend({"tenant": "other"}, tenant(), "s")
    with pytest.raises(BadRequest, match="disagree"):
        for_backend({"priority": 2, "priority_level": 3}, tenant(), None)
    with pytest.raises(BadRequest, match="two priorities"):
        for_backend({"priority": 2}, tenant(), None, requested=3)
    with pytest.raises(BadRequest, match="integer level"):
        for_backend({"priority": "high"}, tenant(), None)
