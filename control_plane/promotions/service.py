"""Promotion use cases behind the API: start one (in the caller's transaction), read them.

The promotion's work (``driver.py``) runs after the request has committed, in the background, so
a CI runner that dies leaves nothing half-done."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from control_plane.adapters.checks import check_serves_lora
from control_plane.adapters.service import get_adapter, version_label
from control_plane.auth import audit
from control_plane.auth.scopes import Actor
from control_plane.deployments import service as deployments
from control_plane.errors import (
    InvalidAliasTarget,
    InvalidRequest,
    PromotionInProgress,
    PromotionNotFound,
)
from control_plane.nodes.service import get_node
from control_plane.promotions.orm import Promotion, PromotionState
from control_plane.promotions.repository import PromotionFilter, PromotionRepository
from control_plane.promotions.schemas import ADAPTER_STEPS, STEPS, PromotionCreate
from control_plane.registry import aliases
from control_plane.registry.orm import VersionState
from control_plane.registry.service import get_model, get_version


def start(session: Session, actor: Actor, model_name: str, data: PromotionCreate) -> Promotion:
    """Record a pending promotion of ``model_name`` to ``data.to``; 409 while another runs."""
    model = get_model(session, model_name, for_update=True)
    repository = PromotionRepository(session)
    running = repository.unfinished_of_model(model.id)
    if running is not None:
        raise PromotionInProgress(model_name, running.id)
    if data.manifest is not None and data.manifest.model not in (None, model_name):
        raise InvalidRequest(f"manifest.model: the manifest is for '{data.manifest.model}', not "
                             f"'{model_name}'; promote it to its own model or fix the manifest")
    if data.version is not None:
        version = get_version(session, model_name, data.version)
        if version.state == VersionState.ARCHIVED:
            raise InvalidAliasTarget(f"version {data.version} of '{model_name}' is archived; "
                                     "promote a registered or validated version")
    current = aliases.find_alias(session, model, data.to)
    on_nodes = deployments.deployed(session, model.id, data.to) if current is not None else []
    version_number = data.version
    if data.adapter is not None:
        if current is None or not on_nodes:
            raise InvalidRequest(f"to: alias '{model_name}/{data.to}' "
                                 f"{'does not exist' if current is None else 'runs on no node'}"
                                 "; an adapter is promoted onto the deployments of an alias "
                                 "that serves its version: deploy the alias first")
        version_number = current.version.number
        version = get_version(session, model_name, version_number)
        check_serves_lora(version_label(version), version.engine_args)
        if data.adapter.source is None:
            get_adapter(session, model_name, version_number, data.adapter.name)  # 404 if not
    if on_nodes:
        nodes = [d.node.name for d in on_nodes]
    elif data.nodes:
        nodes = [get_node(session, name).name for name in dict.fromkeys(data.nodes)]
    else:
        raise InvalidRequest(f"to: alias '{model_name}/{data.to}' runs on no node, so there is "
                             "nowhere to deploy the candidate; name the nodes to serve it on "
                             "(\"nodes\": [...], or llmctl promote --node NAME)")
    promotion = Promotion(
        id=uuid.uuid4().hex, model_id=model.id, alias=data.to, version=version_number,
        from_version=None if current is None else current.version.number,
        adapter=None if data.adapter is None else data.adapter.name,
        state=PromotionState.PENDING.value,
        steps=[{"name": name, "state": "pending"}
               for name in (STEPS if data.adapter is None else ADAPTER_STEPS)], gate_results=[],
        manifest=_manifest_of(data),
        nodes=nodes, progress={}, ci_run_url=data.ci_run_url, git_sha=data.git_sha,
        requested_by=actor.name, request_id=actor.request_id)
    try:
        with session.begin_nested():
            repository.add(promotion)
    except IntegrityError:
        # Another request started one between our check and insert (the unique index on
        # unfinished promotions per model decides on PostgreSQL and SQLite alike).
        running = repository.unfinished_of_model(model.id)
        raise PromotionInProgress(model_name, running.id if running else "(unknown)") from None
    audit.record(session, actor, "promotion.start", "model", model_name, after=_summary(promotion))
    return promotion


def _manifest_of(data: PromotionCreate) -> dict[str, Any] | None:
    """What the register step registers, as submitted: a version's manifest, or an adapter's
    source and gates."""
    if data.manifest is not None:
        return data.manifest.model_dump(mode="json")
    if data.adapter is not None and data.adapter.source is not None:
        return data.adapter.model_dump(mode="json", exclude_none=True)
    return None


def _summary(promotion: Promotion) -> dict[str, Any]:
    return {"promotion": promotion.id, "alias": promotion.alias, "version": promotion.version,
            "adapter": promotion.adapter,
            "from_version": promotion.from_version, "nodes": promotion.nodes,
            "ci_run_url": promotion.ci_run_url, "git_sha": promotion.git_sha}


def get(session: Session, promotion_id: str) -> Promotion:
    promotion = PromotionRepository(session).get(promotion_id)
    if promotion is None:
        raise PromotionNotFound(promotion_id)
    return promotion


def list_promotions(session: Session, model_name: str, state: PromotionState | None,
                    alias: str | None, ci_run_url: str | None, limit: int, offset: int
                    ) -> tuple[Sequence[Promotion], int]:
    model = get_model(session, model_name)
    return PromotionRepository(session).list(
        PromotionFilter(model_id=model.id, state=state, alias=alias, ci_run_url=ci_run_url),
        limit, offset)
