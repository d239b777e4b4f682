"""The statistics of a model's deployments over a window, from the poller's readings.

The database is read first (which deployments, where, which version); the numbers then come from
memory, so no request holds a transaction while anything is read from a node.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy.orm import Session

from control_plane.deployments.repository import DeploymentRepository
from control_plane.registry import aliases
from control_plane.registry import service as registry
from control_plane.stats.aggregate import Part, WindowStats, growth, summarize
from control_plane.stats.poller import NodeMetricsPoller


@dataclass(frozen=True)
class DeploymentStats:
    alias: str
    node: str
    version: int | None
    triton_model: str
    state: str
    stats: WindowStats | None
    # Why ``stats`` is None (the node's metrics unreadable, not read twice yet).
    unavailable: str | None = None


@dataclass(frozen=True)
class ModelStats:
    model: str
    alias: str | None
    window_seconds: float
    deployments: list[DeploymentStats]
    by_version: dict[int, WindowStats]
    total: WindowStats | None


@dataclass(frozen=True)
class _Target:
    alias: str
    node: str
    version: int | None
    triton_model: str
    state: str


def model_stats(session: Session, poller: NodeMetricsPoller, model: str, alias: str | None,
                window_s: float) -> ModelStats:
    """Per deployment, per version and over all of them; ``alias`` None: every alias."""
    found = registry.get_model(session, model)
    if alias is not None:
        aliases.get_alias(session, model, alias)
    deployments = DeploymentRepository(session).of_model(found.id, alias)
    targets = [_Target(d.alias, d.node.name, d.serving_version, d.triton_name, d.state)
               for d in deployments]

    rows: list[DeploymentStats] = []
    parts_by_version: dict[int, list[Part]] = defaultdict(list)
    every_part: list[Part] = []
    for target in targets:
        pair = poller.pair(target.node, window_s)
        if isinstance(pair, str):
            rows.append(DeploymentStats(**vars(target), stats=None, unavailable=pair))
            continue
        older, newer = pair
        now = newer.by_model.get(target.triton_model, {})
        part = Part(growth(older.by_model.get(target.triton_model, {}), now), now,
                    newer.taken_at - older.taken_at)
        rows.append(DeploymentStats(**vars(target), stats=summarize([part])))
        every_part.append(part)
        if target.version is not None:
            parts_by_version[target.version].append(part)
    return ModelStats(model, alias, window_s, rows,
                      {v: summarize(parts) for v, parts in sorted(parts_by_version.items())},
                      summarize(every_part) if every_part else None)
