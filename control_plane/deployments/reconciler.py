"""The reconcile loop: observe each node, plan (pure), act, record; periodically and on demand.

It heals what nobody asked to change: a tritonserver that restarted empty gets its models back, a
node that stops answering has its deployments marked UNKNOWN (never silently READY) and is
reconciled when it answers again. It never dies on an error: each one is logged and recorded on
the node's status, and the next pass tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from sqlalchemy import select

from control_plane.db import transaction, utcnow
from control_plane.deployments.actuator import Actuator, ready_versions
from control_plane.deployments.orm import Deployment, DeploymentState, NodeHealth
from control_plane.deployments.plan import (
    Desired,
    Load,
    MarkReady,
    MarkUnloaded,
    Plan,
    Unload,
    plan_node,
)
from control_plane.deployments.repository import DeploymentRepository
from control_plane.deployments.service import busy_deployment_ids
from control_plane.errors import ControlPlaneError
from control_plane.metrics.registry import ControlPlaneMetrics
from control_plane.nodes.triton_version import version_warning
from control_plane.registry.repository import AliasRepository
from control_plane.triton.protocol import TritonControl, TritonControlError
from control_plane.triton.specs import NodeEndpoint

log = logging.getLogger(__name__)
ACTOR = "reconciler"


class FleetStep(Protocol):
    """More to do once every node of a pass is reconciled, over the whole fleet (moving engines
    off faulty GPUs). It raises nothing it can handle; an error ends only its own part."""

    name: str

    def __call__(self) -> object: ...


class NodeStep(Protocol):
    """More to reconcile on a node that answered, once its deployments are (their adapters):
    in the same pass, under the node's lock. Returns its part of the pass's record and the
    errors it met on the node, which it does not raise."""

    name: str

    def __call__(self, node_id: int, endpoint: NodeEndpoint
                 ) -> tuple[dict[str, Any], list[str]]: ...


@dataclass
class NodeReport:
    """What one pass did on one node: for logs, the node's status, and tests."""

    node: str
    reachable: bool
    plan: Plan | None = None
    errors: list[str] = field(default_factory=list)
    # What each NodeStep did, by its name.
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Not looked at: an operation held the node.
    skipped: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"node": self.node, "reachable": self.reachable, "errors": self.errors,
                "plan": None if self.plan is None else {
                    "actions": [{"action": type(a).__name__, **asdict(a)}
                                for a in self.plan.actions],
                    "skipped": [list(item) for item in self.plan.skipped]},
                "steps": self.steps}


class Reconciler:
    def __init__(self, actuator: Actuator, interval_s: float = 10.0,
                 is_leader: Callable[[], bool] = lambda: True,
                 min_triton_version: str | None = None, steps: Sequence[NodeStep] = (),
                 metrics: ControlPlaneMetrics | None = None,
                 node_down_after_misses: int = 1, fleet_steps: Sequence[FleetStep] = (),
                 parallel_loads: int = 4) -> None:
        """``min_triton_version``: nodes on an older Triton are logged, once per node and
        version; None: no floor. ``steps`` run on each node that answered, after its
        deployments; ``fleet_steps`` after every node of a pass. ``parallel_loads``: loads run
        at once on one node (after its unloads)."""
        self.actuator = actuator
        self.steps = tuple(steps)
        self.fleet_steps = tuple(fleet_steps)
        self.session_factory = actuator.session_factory
        self.interval_s = interval_s
        self.is_leader = is_leader
        self.min_triton_version = min_triton_version
        self._old_versions_logged: set[tuple[str, str]] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.metrics = metrics or ControlPlaneMetrics()
        self.node_down_after_misses = node_down_after_misses
        self.parallel_loads = parallel_loads
        # Node id -> passes in a row it did not answer (this process's view; a new leader
        # starts counting afresh).
        self._misses: dict[int, int] = {}

    # -- the loop ------------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="reconciler", daemon=True)
        self._thread.start()

    def trigger(self) -> None:
        """Reconcile now rather than at the next interval (after each change)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                if self.is_leader():
                    self.reconcile_once()
            except Exception:  # the loop outlives any one pass (a database outage, a bug)
                self.metrics.reconcile_failures.inc()
                log.exception("reconcile pass failed; trying again in %.0f s", self.interval_s)

    # -- one pass ------------------------------------------------------------------------------

    def reconcile_once(self) -> list[NodeReport]:
        started = time.monotonic()
        reports = self._reconcile_nodes()
        for step in self.fleet_steps:
            try:
                step()
            except Exception:  # one step's failure ends neither the pass nor the other steps
                self.metrics.reconcile_failures.inc()
                log.exception("reconcile step %s failed; trying again at the next pass",
                              step.name)
        self.passes += 1
        self.metrics.reconcile_passes.inc()
        self.metrics.reconcile_duration.observe(time.monotonic() - started)
        for report in reports:
            if report.skipped:
                continue
            self.metrics.node_reachable.labels(report.node).set(1 if report.reachable else 0)
            if report.errors:
                self.metrics.reconcile_errors.labels(report.node).inc(len(report.errors))
        return reports

    def _reconcile_nodes(self) -> list[NodeReport]:
        with transaction(self.session_factory) as session:
            node_ids = session.scalars(select(Deployment.node_id).distinct()).all()
        # Nodes side by side: a slow load on one (minutes for a large model) does not delay
        # noticing that another one died.
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(node_ids))),
                                thread_name_prefix="reconcile") as pool:
            return list(pool.map(self.reconcile_node, sorted(node_ids)))

    def reconcile_node(self, node_id: int) -> NodeReport:
        lock = self.actuator.node_lock(node_id)
        # An operation acting on this node (a load can take minutes) must not hold up the other
        # nodes: this pass skips it, and the operation triggers a new pass when it ends.
        if not lock.acquire(blocking=False):
            return NodeReport(node=f"#{node_id}", reachable=True, skipped=True,
                              errors=["skipped: an operation is acting on the node"])
        try:
            return self._reconcile_locked(node_id)
        finally:
            lock.release()

    def _reconcile_locked(self, node_id: int) -> NodeReport:
        desired, busy, endpoint = self._desired(node_id)
        report = NodeReport(node=endpoint.name, reachable=False)
        try:
            control = self.actuator.control_for(endpoint)
        except ControlPlaneError as exc:
            report.errors.append(exc.message)
            self._record_down(node_id, exc.message, report)
            return report
        try:
            ready = ready_versions(control)
            server_version = self._server_version(control, endpoint.name, report)
        except TritonControlError as exc:
            report.errors.append(str(exc))
            self._missed(node_id, str(exc), report)
            return report
        finally:
            close = getattr(control, "close", None)
            if close is not None:
                close()
        report.reachable = True
        self._misses.pop(node_id, None)
        report.plan = plan_node(desired, ready, busy)
        loads = [a for a in report.plan.actions if isinstance(a, Load)]
        # Unloads and marks first, one by one (they free room and take milliseconds); then the
        # loads side by side, so a node that restarted empty has all its models back in about
        # the time of the slowest one rather than of their sum.
        for action in report.plan.actions:
            if not isinstance(action, Load):
                self._act_recorded(action, endpoint.name, report)
        if loads:
            with ThreadPoolExecutor(max_workers=min(self.parallel_loads, len(loads)),
                                    thread_name_prefix=f"load-{endpoint.name}") as pool:
                list(pool.map(lambda load: self._act_recorded(load, endpoint.name, report),
                              loads))
        for step in self.steps:
            report.steps[step.name], errors = step(node_id, endpoint)
            report.errors.extend(errors)
        self._record(node_id, NodeHealth.UP, "; ".join(report.errors), report, server_version)
        return report

    def _act_recorded(self, action: Load | Unload | MarkReady | MarkUnloaded, node: str,
                      report: NodeReport) -> None:
        try:
            self._act(action)
        except ControlPlaneError as exc:
            report.errors.append(exc.message)
            log.warning("reconcile %s on node %s: %s", action, node, exc.message)

    def _server_version(self, control: TritonControl, node: str, report: NodeReport
                        ) -> str | None:
        """Triton's version on the node, logged once per node and version if it is too old."""
        try:
            version = control.server_version()
        except TritonControlError as exc:
            # The node serves its index, so it is up; its metadata may be locked to another key.
            report.errors.append(f"cannot read the Triton version: {exc}")
            return None
        if self.min_triton_version is None:
            return version
        warning = version_warning(version, self.min_triton_version)
        if warning is not None and (node, version) not in self._old_versions_logged:
            self._old_versions_logged.add((node, version))
            log.warning("node %s: %s", node, warning)
        return version

    def _desired(self, node_id: int) -> tuple[list[Desired], set[int], NodeEndpoint]:
        with transaction(self.session_factory) as session:
            # Busy first: on PostgreSQL each statement sees the latest commits, so a swap that
            # ended between reading the aliases and reading the busy set would leave its alias's
            # old version looking desired and its deployment free, and the old version was loaded
            # back. Read in this order, a swap that ends in between is still seen as busy.
            busy = busy_deployment_ids(session)
            repository = DeploymentRepository(session)
            deployments = repository.on_node(node_id)
            aliases = AliasRepository(session)
            desired = []
            for deployment in deployments:
                alias = aliases.get(deployment.model_id, deployment.alias)
                if alias is None:
                    continue  # an alias cannot be deleted while deployed; nothing to do
                desired.append(Desired(
                    deployment_id=deployment.id, triton_name=deployment.triton_name,
                    version=alias.version.number, wanted=deployment.wanted,
                    state=DeploymentState(deployment.state),
                    serving_version=deployment.serving_version))
            node = deployments[0].node
            endpoint = NodeEndpoint(node.name, node.http_url, node.grpc_url, node.api_key_ref)
        return desired, busy, endpoint

    def _act(self, action: Load | Unload | MarkReady | MarkUnloaded) -> None:
        if isinstance(action, Load):
            self.actuator.load(action.deployment_id, action.version, ACTOR)
        elif isinstance(action, Unload):
            self.actuator.unload(action.deployment_id, ACTOR)
        elif isinstance(action, MarkReady):
            self.actuator.mark_ready(action.deployment_id, action.version, ACTOR)
        else:
            self.actuator.mark_unloaded(action.deployment_id, ACTOR)

    def _missed(self, node_id: int, detail: str, report: NodeReport) -> None:
        """A node that did not answer one pass: down (its deployments UNKNOWN, out of the
        gateways' tables) only after ``node_down_after_misses`` passes in a row. A node busy at
        full CPU can miss one (its index read timed out under a load step, and both nodes left
        the routing table for 2 s: 404s while they served); a dead node is ejected by the
        gateways' own probes within a second meanwhile."""
        misses = self._misses.get(node_id, 0) + 1
        self._misses[node_id] = misses
        if misses >= self.node_down_after_misses:
            self._record_down(node_id, detail, report)
        else:
            report.errors.append(f"missed {misses} pass(es) in a row; down after "
                                 f"{self.node_down_after_misses}")

    def _record_down(self, node_id: int, detail: str, report: NodeReport) -> None:
        with transaction(self.session_factory) as session:
            DeploymentRepository(session).mark_node_unknown(
                node_id, f"node '{report.node}' did not answer: {detail}", ACTOR)
        self._record(node_id, NodeHealth.DOWN, detail, report)

    def _record(self, node_id: int, health: NodeHealth, detail: str, report: NodeReport,
                server_version: str | None = None) -> None:
        with transaction(self.session_factory) as session:
            repository = DeploymentRepository(session)
            repository.record_node_health(node_id, health, detail, server_version)
            status = repository.node_health(node_id)
            if status is not None:
                status.last_pass = {**report.as_json(), "at": utcnow().isoformat()}
