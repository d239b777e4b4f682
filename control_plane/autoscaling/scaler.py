"""The autoscaler's loop: on the leader, every interval, read each enabled policy's alias, take a
reading of its metric from the node metrics poller, decide (``decision.decide``), record the
decision whatever it is, and carry out a change through the deployment lifecycle (an apply on a
node without the alias, or a remove that drains first).

The readings live in memory: a new leader starts without them, so its windows are not covered
and it holds until they are (it never acts on less than a whole window).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session, sessionmaker

from control_plane.auth.scopes import Actor, Scope
from control_plane.autoscaling.decision import Action, Decision, Observation, decide
from control_plane.autoscaling.orm import ScalingDecisionRow, ScalingPolicyRow
from control_plane.autoscaling.policy import ScalingMetric, ScalingPolicy
from control_plane.autoscaling.repository import ScalingRepository
from control_plane.db import transaction, utcnow
from control_plane.deployments import service as deployments
from control_plane.deployments.orm import DeploymentState, NodeHealth
from control_plane.deployments.repository import DeploymentRepository
from control_plane.errors import ControlPlaneError
from control_plane.metrics.registry import ControlPlaneMetrics
from control_plane.nodes.repository import NodeRepository
from control_plane.operations.runner import OperationRunner
from control_plane.promotions.repository import PromotionRepository
from control_plane.registry.orm import Model
from control_plane.stats.aggregate import Part, WindowStats, growth, summarize
from control_plane.stats.poller import NodeMetricsPoller

log = logging.getLogger(__name__)
ACTOR = Actor(name="autoscaler", scope=Scope.ADMIN)
# Deployments that count as engines: serving, or on their way to it.
COUNTED = (DeploymentState.PENDING, DeploymentState.LOADING, DeploymentState.READY)
PRUNE_EVERY_S = 60.0


@dataclass(frozen=True)
class Engine:
    deployment_id: int
    node: str
    triton_model: str
    state: str


@dataclass(frozen=True)
class AliasView:
    """What one tick knows of a policy's alias, read in one short transaction."""

    policy_id: int
    model: str
    alias: str
    policy: ScalingPolicy
    last_change_at: float | None
    engines: list[Engine]
    busy: str | None
    # Nodes not seen down that hold no engine of the alias, fewest deployments first: where an
    # engine can be added.
    free_nodes: list[str]


class Autoscaler:
    def __init__(self, session_factory: sessionmaker[Session], runner: OperationRunner,
                 poller: NodeMetricsPoller, interval_s: float,
                 is_leader: Callable[[], bool] = lambda: True,
                 metrics: ControlPlaneMetrics | None = None, keep_decisions_h: float = 24.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.session_factory = session_factory
        self.runner = runner
        self.poller = poller
        self.interval_s = interval_s
        self.is_leader = is_leader
        self.metrics = metrics or ControlPlaneMetrics()
        self.keep_decisions_h = keep_decisions_h
        self._clock = clock
        self._series: dict[int, deque[Observation]] = {}
        self._pruned_at = float("-inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the loop ------------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="autoscaler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                if self.is_leader():
                    self.tick()
                else:
                    self._series.clear()  # a later leadership starts from whole windows again
            except Exception:  # the loop outlives any one tick (a database outage, a bug)
                log.exception("autoscaler tick failed; trying again in %.0f s", self.interval_s)

    # -- one tick ------------------------------------------------------------------------------

    def tick(self) -> list[Decision]:
        now = self._clock()
        with transaction(self.session_factory, read_only=True) as session:
            fleet = _Fleet.read(session)
            views = [self._view(session, row, fleet) for row in
                     ScalingRepository(session).enabled_policies()]
        for gone in set(self._series) - {view.policy_id for view in views}:
            del self._series[gone]
        made = []
        for view in views:
            series = self._series.setdefault(view.policy_id, deque())
            series.append(Observation(now, len(view.engines), self._reading(view)))
            horizon = max(view.policy.scale_up_window_s, view.policy.scale_down_window_s)
            while len(series) > 1 and series[1].at <= now - horizon:
                series.popleft()
            decision = decide(view.policy, len(view.engines), list(series), now,
                              view.last_change_at, view.busy)
            self._carry_out(view, decision)
            made.append(decision)
        # Old decisions go once a minute, not at every tick.
        if now - self._pruned_at >= PRUNE_EVERY_S:
            with transaction(self.session_factory) as session:
                ScalingRepository(session).prune_decisions(
                    utcnow() - timedelta(hours=self.keep_decisions_h))
            self._pruned_at = now
        return made

    def _view(self, session: Session, row: ScalingPolicyRow, fleet: _Fleet) -> AliasView:
        every = DeploymentRepository(session).of_model(row.model_id, row.alias, wanted_only=False)
        wanted = [d for d in every if d.wanted]
        engines = [Engine(d.id, d.node.name, d.triton_name, d.state) for d in wanted
                   if d.state in COUNTED]
        busy_ids = fleet.busy & {d.id for d in wanted}
        busy = (f"an operation is working on {len(busy_ids)} of the alias's deployments"
                if busy_ids else None)
        promotion = PromotionRepository(session).unfinished_of_model(row.model_id)
        if busy is None and promotion is not None:
            busy = f"promotion {promotion.id} of the model is running"
        taken = {d.node_id for d in wanted}
        free = sorted((load, name) for node_id, name, load in fleet.nodes if node_id not in taken)
        model = session.get(Model, row.model_id)
        return AliasView(
            row.id, "" if model is None else model.name, row.alias,
            ScalingPolicy(min_engines=row.min_engines, max_engines=row.max_engines,
                          metric=ScalingMetric(row.metric), target=row.target,
                          scale_up_window_s=row.scale_up_window_s,
                          scale_down_window_s=row.scale_down_window_s,
                          cooldown_s=row.cooldown_s),
            None if row.last_change_at is None else row.last_change_at.timestamp(),
            engines, busy, [name for _, name in free])

    def _reading(self, view: AliasView) -> float | None:
        """The policy's metric now over the alias's engines; None if a node was not read."""
        if not view.engines:
            return 0.0
        if view.policy.metric is ScalingMetric.WAITING_PER_ENGINE:
            gauges = [self._gauges(engine) for engine in view.engines]
            if any(g is None for g in gauges):
                return None
            return sum(sum(g.waiting.values()) for g in gauges if g) / len(view.engines)
        parts = []
        # A few polls: enough requests for a p95, recent enough to follow the load.
        window = 3 * self.poller.interval_s
        for engine in view.engines:
            pair = self.poller.pair(engine.node, window)
            if isinstance(pair, str):
                return None
            older, newer = pair
            now = newer.by_model.get(engine.triton_model, {})
            parts.append(Part(growth(older.by_model.get(engine.triton_model, {}), now), now,
                              newer.taken_at - older.taken_at))
        stats = summarize(parts)
        quantiles = (stats.queue_time_seconds if view.policy.metric is
                     ScalingMetric.QUEUE_TIME_P95 else stats.time_to_first_token_seconds)
        # No request in the window: nothing waited.
        return quantiles.p95 if quantiles.p95 is not None else 0.0

    def _carry_out(self, view: AliasView, decision: Decision) -> None:
        self.metrics.autoscaler_decisions.labels(view.model, view.alias,
                                                 decision.action.value).inc()
        self.metrics.autoscaler_engines.labels(view.model, view.alias).set(decision.engines)
        self.metrics.autoscaler_desired.labels(view.model, view.alias).set(decision.desired)
        record = ScalingDecisionRow(policy_id=view.policy_id, action=decision.action.value,
                                    engines=decision.engines, desired=decision.desired,
                                    reason=decision.reason, inputs=decision.inputs)
        operation_id = None
        try:
            with transaction(self.session_factory) as session:
                if decision.action is Action.SCALE_UP:
                    record.node = self._node_to_add(view)
                    if record.node is not None:
                        _, operation = deployments.apply(session, ACTOR, view.model, view.alias,
                                                         record.node)
                        operation_id = operation.id
                    else:
                        record.error = ("no node to add an engine on: every node not seen "
                                        "down already serves the alias, or none is registered; "
                                        "register a node or lower max_engines")
                elif decision.action is Action.SCALE_DOWN:
                    record.node = self._node_to_remove(view)
                    _, operation = deployments.remove(session, ACTOR, view.model, view.alias,
                                                      record.node)
                    operation_id = operation.id
                record.operation_id = operation_id
                if operation_id is not None:
                    policy = session.get(ScalingPolicyRow, view.policy_id)
                    if policy is not None:
                        policy.last_change_at = utcnow()
                ScalingRepository(session).add(record)
        except ControlPlaneError as exc:
            # The change could not start (the alias went, an operation raced in): say so.
            record.error, record.operation_id, operation_id = exc.message, None, None
            with transaction(self.session_factory) as session:
                ScalingRepository(session).add(_copy(record))
        if operation_id is not None:
            log.info("autoscaler: %s %s/%s on %s: %s", decision.action.value, view.model,
                     view.alias, record.node, decision.reason)
            self.runner.submit(operation_id)

    def _node_to_add(self, view: AliasView) -> str | None:
        return view.free_nodes[0] if view.free_nodes else None

    def _node_to_remove(self, view: AliasView) -> str:
        """The engine with the least work now (draining it then loses the least), loading ones
        first."""
        def load(engine: Engine) -> tuple[int, float]:
            gauges = self._gauges(engine)
            work = 0.0 if gauges is None else (sum(gauges.waiting.values()) +
                                               sum(gauges.running.values()))
            return (0 if engine.state != DeploymentState.READY else 1), work
        return min(view.engines, key=load).node

    def _gauges(self, engine: Engine) -> WindowStats | None:
        """The engine's waiting and running requests at the last poll; None if its node was not
        read."""
        pair = self.poller.pair(engine.node, self.poller.interval_s)
        if isinstance(pair, str):
            return None
        return summarize([Part({}, pair[1].by_model.get(engine.triton_model, {}), 0.0)])


@dataclass(frozen=True)
class _Fleet:
    """What every policy of one tick shares, read once: the nodes not seen down with their
    deployment counts, and the deployments an operation is working on."""

    nodes: list[tuple[int, str, int]]
    busy: set[int]

    @classmethod
    def read(cls, session: Session) -> _Fleet:
        repository = DeploymentRepository(session)
        counts = repository.count_by_node()
        return cls([(node.id, node.name, counts.get(node.id, 0))
                    for node in NodeRepository(session).in_service() if _up(repository, node.id)],
                   deployments.busy_deployment_ids(session))


def _up(repository: DeploymentRepository, node_id: int) -> bool:
    """Not seen down: the reconciler visits only nodes that hold deployments, so a node added
    to grow into has no status yet (a load there that fails marks its deployment FAILED, and the
    autoscaler looks elsewhere)."""
    status = repository.node_health(node_id)
    return status is None or status.health == NodeHealth.UP


def _copy(record: ScalingDecisionRow) -> ScalingDecisionRow:
    """A fresh row of the same decision (the first was rolled back with its transaction)."""
    return ScalingDecisionRow(policy_id=record.policy_id, action=record.action,
                              engines=record.engines, desired=record.desired,
                              reason=record.reason, inputs=record.inputs, node=record.node,
                              error=record.error, decided_at=datetime.now(UTC))
