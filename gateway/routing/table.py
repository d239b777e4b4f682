"""The routing table as the control plane publishes it (``GET /api/v1/routing``), parsed into
frozen values the gateway can look requests up in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from gateway.quotas.policy import NO_LIMITS, Limits

PRODUCTION = "production"
# ``M:<adapter>`` selects a LoRA adapter of served name M; model and alias names have no colon.
ADAPTER_SEPARATOR = ":"


class OverLimit(StrEnum):
    REFUSE = "refuse"
    LOWER = "lower"


@dataclass(frozen=True)
class Endpoint:
    """One node serving a model, under the Triton name ``triton_model``."""

    node: str
    http_url: str
    grpc_url: str
    triton_model: str
    metrics_url: str | None = None
    # The LoRA adapters loaded on this endpoint's deployment. Not part of the endpoint's
    # identity: an adapter loading into a running engine changes neither the node's health nor
    # its load, so the balancer keeps the endpoint's state (no probation) across the change.
    adapters: frozenset[str] = field(default=frozenset(), compare=False)


@dataclass(frozen=True)
class Route:
    """A served model name (``M`` for production, ``M.<alias>``, either with ``:<adapter>``)
    and the nodes serving it."""

    name: str
    model: str
    alias: str
    version: int | None
    max_model_len: int | None
    endpoints: tuple[Endpoint, ...]
    # The LoRA adapter every request on this route asks for (``lora_name``); None: the base model.
    adapter: str | None = None

    def adapters(self) -> list[str]:
        """The adapters loaded on at least one of the route's endpoints, sorted."""
        return sorted({name for endpoint in self.endpoints for name in endpoint.adapters})

    def with_adapter(self, adapter: str) -> Route:
        """``<name>:<adapter>``: this route restricted to the endpoints where it is loaded."""
        return replace(self, name=f"{self.name}{ADAPTER_SEPARATOR}{adapter}", adapter=adapter,
                       endpoints=tuple(e for e in self.endpoints if adapter in e.adapters))


@dataclass(frozen=True)
class Tenant:
    name: str
    enabled: bool
    allowed_models: frozenset[str]
    max_priority_level: int = 1
    default_priority_level: int | None = None
    priority_over_limit: OverLimit = OverLimit.REFUSE
    limits: Limits = NO_LIMITS
    model_limits: Mapping[str, Limits] = field(default_factory=dict)
    weight: float = 1.0

    def may_use(self, route: Route) -> bool:
        return "*" in self.allowed_models or route.model in self.allowed_models


@dataclass(frozen=True)
class RoutingTable:
    revision: str
    routes: Mapping[str, Route] = field(default_factory=dict)
    tenants: Mapping[str, Tenant] = field(default_factory=dict)
    tenant_by_key_hash: Mapping[str, str] = field(default_factory=dict)

    def route(self, name: str) -> Route | None:
        """``M.production`` is another spelling of ``M``."""
        route = self.routes.get(name)
        if route is None and name.endswith(f".{PRODUCTION}"):
            route = self.routes.get(name[: -len(PRODUCTION) - 1])
        return route

    def endpoints(self) -> set[Endpoint]:
        return {endpoint for route in self.routes.values() for endpoint in route.endpoints}


EMPTY = RoutingTable(revision="")


def split_adapter(name: str) -> tuple[str, str | None]:
    """``M.alias:sql`` → (``M.alias``, ``sql``); a name without an adapter → (name, None)."""
    base, separator, adapter = name.partition(ADAPTER_SEPARATOR)
    return (base, adapter) if separator else (name, None)


def parse_table(document: Mapping[str, Any]) -> RoutingTable:
    """Parse the control plane's JSON; a malformed document raises ``ValueError``."""
    try:
        routes = {}
        for entry in document["models"]:
            endpoints = tuple(
                Endpoint(node=e["node"], http_url=e["http_url"], grpc_url=e["grpc_url"],
                         triton_model=e["triton_model"], metrics_url=e.get("metrics_url"),
                         # Absent from an older control plane: no adapters there.
                         adapters=frozenset(_names(e.get("adapters") or [], "adapters")))
                for e in entry["endpoints"])
            routes[entry["name"]] = Route(
                name=entry["name"], model=entry["model"], alias=entry["alias"],
                version=entry.get("version"), max_model_len=entry.get("max_model_len"),
                endpoints=endpoints)
        tenants, by_hash = {}, {}
        for entry in document.get("tenants", []):
            tenant = Tenant(
                name=entry["name"], enabled=bool(entry["enabled"]),
                allowed_models=frozenset(entry["allowed_models"]),
                max_priority_level=int(entry.get("max_priority_level", 1)),
                default_priority_level=entry.get("default_priority_level"),
                priority_over_limit=OverLimit(entry.get("priority_over_limit", "refuse")),
                # Absent from an older control plane: unlimited.
                limits=Limits.parse(entry.get("limits") or {}),
                model_limits={model: Limits.parse(limits) for model, limits in
                              (entry.get("model_limits") or {}).items()},
                weight=float(entry.get("weight", 1.0)))
            tenants[tenant.name] = tenant
            for key_hash in entry.get("key_hashes", []):
                by_hash[key_hash] = tenant.name
        return RoutingTable(revision=str(document["revision"]), routes=routes, tenants=tenants,
                            tenant_by_key_hash=by_hash)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed routing table: {type(exc).__name__}: {exc}") from None


def _names(value: Any, field_name: str) -> list[str]:
    # frozenset() of a string would silently make one adapter per character.
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TypeError(f"{field_name} must be a list of names, got {value!r}")
    return value
