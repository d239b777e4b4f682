"""Building the routing table, and waiting for it to change (the gateway's long poll).

The revision is a hash of the content, not a counter: equal tables have equal revisions on every
replica of the control plane, and nothing has to be bumped when a tenant, key or deployment
changes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from itertools import groupby
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Row
from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction
from control_plane.deployments.naming import triton_model_name
from control_plane.routing.repository import RoutingRepository
from control_plane.routing.schemas import RoutedEndpoint, RoutedModel, RoutedTenant, RoutingTable
from control_plane.tenants.orm import PriorityOverLimit
from control_plane.tenants.repository import InferenceKeyRepository, TenantRepository

POLL_INTERVAL_S = 0.5
MAX_WAIT_S = 60.0


def routing_table(session: Session) -> RoutingTable:
    """The table as the database holds it now."""
    repository = RoutingRepository(session)
    rows = repository.routable()
    adapters = repository.loaded_adapters()
    models = [_model(list(group), adapters)
              for _, group in groupby(rows, key=lambda row: (row.model, row.alias))]
    models.sort(key=lambda model: model.name)
    hashes = InferenceKeyRepository(session).active_hashes()
    tenants = [RoutedTenant(name=t.name, enabled=t.enabled, allowed_models=t.allowed_models,
                            max_priority_level=t.max_priority_level,
                            default_priority_level=t.default_priority_level,
                            priority_over_limit=PriorityOverLimit(t.priority_over_limit),
                            limits=t.limits, model_limits=t.model_limits, weight=t.weight,
                            key_hashes=hashes.get(t.id, []))
               for t in TenantRepository(session).all()]
    # Sorted here, not by the database's collation: the revision must not depend on it.
    tenants.sort(key=lambda tenant: tenant.name)
    return RoutingTable(revision=revision_of(models, tenants), models=models, tenants=tenants)


def revision_of(models: list[RoutedModel], tenants: list[RoutedTenant]) -> str:
    """sha256 of the canonical JSON of the content (sorted keys, no whitespace)."""
    content = {"models": [m.model_dump(mode="json") for m in models],
               "tenants": [t.model_dump(mode="json") for t in tenants]}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _model(rows: list[Row[*tuple[Any, ...]]], adapters: dict[int, list[str]]) -> RoutedModel:
    first = rows[0]
    max_model_len = first.engine_args.get("max_model_len")
    endpoints = [RoutedEndpoint(node=row.node, http_url=urlsplit(row.http_url).netloc,
                                grpc_url=row.grpc_url, metrics_url=row.metrics_url,
                                triton_model=row.triton_name, version=row.serving_version,
                                adapters=adapters.get(row.deployment_id, []))
                 for row in rows]
    return RoutedModel(name=triton_model_name(first.model, first.alias), model=first.model,
                       alias=first.alias, version=first.alias_version,
                       max_model_len=max_model_len if isinstance(max_model_len, int) else None,
                       endpoints=sorted(endpoints, key=lambda endpoint: endpoint.node))


def read_routing_table(factory: sessionmaker[Session]) -> RoutingTable:
    """The table, read in a short transaction of its own."""
    with transaction(factory, read_only=True) as session:
        return routing_table(session)


async def next_table(read: Callable[[], Awaitable[RoutingTable]], after: str | None,
                     wait_s: float, *, gone: Callable[[], Awaitable[bool]] | None = None,
                     poll_interval_s: float = POLL_INTERVAL_S) -> RoutingTable:
    """The table once its revision differs from ``after``, or as it is after ``wait_s``.

    ``read`` runs one fresh read each time, so no transaction stays open while this sleeps;
    ``gone`` tells when the caller has stopped listening (it then gets the last table read)."""
    deadline = time.monotonic() + min(wait_s, MAX_WAIT_S)
    table = await read()
    while after is not None and table.revision == after:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or (gone is not None and await gone()):
            break
        await asyncio.sleep(min(poll_interval_s, remaining))
        table = await read()
    return table
