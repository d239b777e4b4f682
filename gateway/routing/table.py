"""The routing table as the control plane publishes it (``GET /api/v1/routing``), parsed into
frozen values the gateway can look requests up in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

PRODUCTION = "production"


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


@dataclass(frozen=True)
class Route:
    """A served model name (``M`` for production, ``M.<alias>``) and the nodes serving it."""

    name: str
    model: str
    alias: str
    version: int | None
    max_model_len: int | None
    endpoints: tuple[Endpoint, ...]


@dataclass(frozen=True)
class Tenant:
    name: str
    enabled: bool
    allowed_models: frozenset[str]
    max_priority_level: int = 1
    default_priority_level: int | None = None
    priority_over_limit: OverLimit = OverLimit.REFUSE

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


def parse_table(document: Mapping[str, Any]) -> RoutingTable:
    """Parse the control plane's JSON; a malformed document raises ``ValueError``."""
    try:
        routes = {}
        for entry in document["models"]:
            endpoints = tuple(
                Endpoint(node=e["node"], http_url=e["http_url"], grpc_url=e["grpc_url"],
                         triton_model=e["triton_model"], metrics_url=e.get("metrics_url"))
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
                priority_over_limit=OverLimit(entry.get("priority_over_limit", "refuse")))
            tenants[tenant.name] = tenant
            for key_hash in entry.get("key_hashes", []):
                by_hash[key_hash] = tenant.name
        return RoutingTable(revision=str(document["revision"]), routes=routes, tenants=tenants,
                            tenant_by_key_hash=by_hash)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed routing table: {type(exc).__name__}: {exc}") from None
