"""Placing deployments: read the node's GPUs, decide with the pure policy, book the decision.

Booking happens under a per-node lock in the database, so two placements at once (two operations,
two control-plane replicas) see each other's reservations and cannot double-book a GPU. A load
that finds its version already booked on the deployment (a retried load, a node that restarted)
reuses that booking instead of deciding again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from control_plane.db import transaction
from control_plane.deployments.orm import Deployment
from control_plane.errors import PlacementRefused, PreconditionFailed
from control_plane.gpus.readings import GpuInventory, InventoryUnavailable
from control_plane.gpus.sources import InventorySpec
from control_plane.metrics.registry import ControlPlaneMetrics
from control_plane.nodes.orm import TritonNode
from control_plane.placement.model import (
    Device,
    NodeView,
    Placement,
    PlacementRequest,
    Refusal,
    Reservation,
    Strategy,
    Verdict,
)
from control_plane.placement.place import place
from control_plane.registry.orm import ModelVersion
from control_plane.registry.repository import VersionRepository
from control_plane.registry.resources import DeviceRequest
from control_plane.reservations.orm import GpuReservation
from control_plane.reservations.repository import ReservationRepository
from control_plane.reservations.sizing import Demand, demand_of

log = logging.getLogger(__name__)

NO_INVENTORY = ("no GPU inventory: set the node's gpu_inventory (nvml, metrics:<url>, "
                "static:<path> or simulated:<path>) to place GPU engines on it")
ESTIMATE_RULE = "memory-estimate"
NOT_READ = "the node's GPUs have not been read yet; try again in a few seconds"


@dataclass(frozen=True)
class Decision:
    demand: Demand
    outcome: Placement | Refusal
    # The chosen node's Triton has no such GPUs (simulated inventory).
    simulated: bool = False


@dataclass(frozen=True)
class Booking:
    """A placement a load goes ahead with, and the readings taken just before it (for drift)."""

    placement: Placement
    simulated: bool
    before: NodeView | None


def holder_of(deployment: Deployment, version: int) -> str:
    return f"{deployment.model.name}/{deployment.alias}@{deployment.node.name}:v{version}"


def refusal_text(refusal: Refusal) -> str:
    reasons = "; ".join(
        f"{v.node}" + (f" GPU {v.gpu_index}" if v.gpu_index is not None else "")
        + f" [{v.rule}] {v.detail}" for v in refusal.verdicts)
    return f"{refusal.summary} ({reasons})"


class Placer:
    def __init__(self, session_factory: sessionmaker[Session], *, headroom_fraction: float,
                 strategy: Strategy,
                 open_inventory: Callable[[InventorySpec, str], GpuInventory] | None = None,
                 metrics: ControlPlaneMetrics | None = None) -> None:
        self.session_factory = session_factory
        self.metrics = metrics or ControlPlaneMetrics()
        self.headroom_fraction = headroom_fraction
        self.strategy = strategy
        self._open = open_inventory or (lambda spec, node: spec.open(node))
        # One inventory object per (node, setting): NVML stays initialised between readings.
        self._inventories: dict[tuple[str, str], GpuInventory] = {}
        self._guard = threading.Lock()

    # -- readings ------------------------------------------------------------------------------

    def inventory(self, node: TritonNode) -> GpuInventory | None:
        if node.gpu_inventory is None:
            return None
        key = (node.name, node.gpu_inventory)
        with self._guard:
            inventory = self._inventories.get(key)
            if inventory is None:
                inventory = self._inventories[key] = self._open(
                    InventorySpec.parse(node.gpu_inventory), node.name)
            return inventory

    def view(self, node: TritonNode) -> NodeView:
        """The node's GPUs read now, or why they could not be: NVML, a node's metrics over HTTP
        or a file, so never with a transaction open (the node's attributes are read already)."""
        inventory = self.inventory(node)
        if inventory is None:
            return NodeView(node.name, error=NO_INVENTORY)
        try:
            gpus = inventory.snapshot()
        except InventoryUnavailable as exc:
            return NodeView(node.name, error=f"inventory unavailable: {exc}")
        return NodeView(node.name, tuple(gpus), excluded_gpus=frozenset(node.excluded_gpus))

    # -- deciding ------------------------------------------------------------------------------

    def decide(self, session: Session, version: ModelVersion, nodes: Sequence[TritonNode],
               holder: str, strategy: Strategy | None = None,
               views: dict[str, NodeView] | None = None) -> Decision:
        """Where ``version`` would go among ``nodes``, given every booking on them; no writes.
        ``views`` holds each GPU node's readings, taken before the caller's transaction; a node
        missing there is refused as unread, never read here."""
        demand = demand_of(version.engine_args, version.resources, version.model_profile)
        if not nodes:
            return Decision(demand, Refusal("no node to place on", (
                Verdict("-", "node-allowed", "no node is registered"),)))
        gpu_nodes = [node for node in nodes if node.gpu_inventory is not None]
        device = demand.device
        if device == DeviceRequest.AUTO:
            device = DeviceRequest.GPU if gpu_nodes else DeviceRequest.CPU
        if device == DeviceRequest.CPU:
            request = PlacementRequest(holder, Device.CPU, 0, demand.tensor_parallel_size,
                                       demand.replicas, tuple(node.name for node in nodes))
            return Decision(demand, place(request, [NodeView(n.name) for n in nodes], ()))
        if demand.bytes_per_gpu is None:
            return Decision(demand, Refusal(
                f"cannot place version {version.number} of '{version.model.name}' on a GPU",
                tuple(Verdict(node.name, ESTIMATE_RULE, demand.unknown or "") for node in nodes)))
        views = views or {}
        bookings = self._reservations(session, nodes)
        request = PlacementRequest(
            holder, Device.GPU, demand.bytes_per_gpu, demand.tensor_parallel_size,
            demand.replicas, tuple(node.name for node in nodes), self.headroom_fraction,
            strategy or self.strategy)
        outcome = place(request, [views.get(node.name) or NodeView(node.name, error=NOT_READ)
                                  for node in nodes], bookings)
        simulated = isinstance(outcome, Placement) and any(
            node.name == outcome.node and InventorySpec.parse(node.gpu_inventory or "").simulated
            for node in nodes)
        return Decision(demand, outcome, simulated)

    def _reservations(self, session: Session, nodes: Sequence[TritonNode]) -> list[Reservation]:
        repository = ReservationRepository(session)
        ids = [node.id for node in nodes]
        holders = repository.holders(ids)
        names = {node.id: node.name for node in nodes}
        return [Reservation(names[row.node_id], row.gpu_uuid, row.bytes,
                            holder_of(holders[row.deployment_id], row.version), row.active)
                for row in repository.on_nodes(ids)]

    # -- booking -------------------------------------------------------------------------------

    def book(self, deployment_id: int, number: int) -> Booking:
        """Place version ``number`` of the deployment on its node and book it; raises
        PlacementRefused with every GPU's reason when it does not fit.

        The node's GPUs are read first, with no transaction open; then, under the node's lock,
        every booking is read afresh and the decision made against both."""
        with transaction(self.session_factory, read_only=True) as session:
            node = self._node_of(session, deployment_id)
        before = self.view(node) if node.gpu_inventory is not None else None
        with transaction(self.session_factory) as session:
            deployment = session.get(Deployment, deployment_id)
            if deployment is None:
                raise PreconditionFailed(f"deployment {deployment_id} no longer exists")
            node = deployment.node
            repository = ReservationRepository(session)
            repository.lock_node(node.id)
            version = VersionRepository(session).get(deployment.model_id, number)
            if version is None:
                raise PreconditionFailed(f"model '{deployment.model.name}' has no version "
                                         f"{number}")
            if (node.gpu_inventory is None) != (before is None):
                raise PreconditionFailed(f"node '{node.name}''s GPU inventory changed while "
                                         "placing on it; apply the deployment again")
            spec = InventorySpec.parse(node.gpu_inventory) if node.gpu_inventory else None
            existing = repository.of_deployment(deployment_id, number)
            if existing:
                return Booking(_placement_from(node.name, existing, version), bool(
                    spec and spec.simulated), before)
            views = {node.name: before} if before is not None else None
            decision = self.decide(session, version, [node], holder_of(deployment, number),
                                   views=views)
            if isinstance(decision.outcome, Refusal):
                for rule in sorted({verdict.rule for verdict in decision.outcome.verdicts}):
                    self.metrics.placement_refusals.labels(rule).inc()
                raise PlacementRefused(refusal_text(decision.outcome), decision.outcome)
            placement = decision.outcome
            # One reservation per engine GPU, in the engines' order.
            repository.add_all([
                GpuReservation(deployment_id=deployment_id, version=number, node_id=node.id,
                               gpu_uuid=r.gpu_uuid, gpu_index=index,
                               bytes=r.bytes,
                               gpu_memory_utilization=placement.gpu_memory_utilization or 0.0,
                               active=False)
                for index, r in zip(placement.gpus, placement.reservations, strict=True)])
            return Booking(placement, decision.simulated, before)

    @staticmethod
    def _node_of(session: Session, deployment_id: int) -> TritonNode:
        deployment = session.get(Deployment, deployment_id)
        if deployment is None:
            raise PreconditionFailed(f"deployment {deployment_id} no longer exists")
        return deployment.node

    def activate(self, deployment_id: int, number: int, before: NodeView | None) -> None:
        """Version ``number`` is loaded: its bookings are now in use, other versions' bookings
        go (Triton unloads the replaced engine; until it has, its memory counts as foreign), and
        the memory the engine really took is compared with its booking (read after the commit,
        with no transaction open, then written in a transaction of its own)."""
        with transaction(self.session_factory) as session:
            repository = ReservationRepository(session)
            repository.activate(deployment_id, number)
            repository.release(deployment_id, keep_version=number)
            deployment = session.get(Deployment, deployment_id)
            if deployment is None or before is None or not deployment.node.gpu_inventory or \
                    not InventorySpec.parse(deployment.node.gpu_inventory).measures_usage:
                return
            node = deployment.node
        after = self.view(node)
        with transaction(self.session_factory) as session:
            for row in ReservationRepository(session).of_deployment(deployment_id, number):
                row.measured_bytes, row.drift_bytes = _drift(before, after, row)
            session.flush()

    def release(self, deployment_id: int, *, only_version: int | None = None) -> None:
        with transaction(self.session_factory) as session:
            ReservationRepository(session).release(deployment_id, only_version=only_version)


def _placement_from(node: str, rows: Sequence[GpuReservation], version: ModelVersion
                    ) -> Placement:
    demand = demand_of(version.engine_args, version.resources, version.model_profile)
    indexes = tuple(row.gpu_index for row in rows)
    tensor_parallel = demand.tensor_parallel_size
    engines = tuple(indexes[i:i + tensor_parallel]
                    for i in range(0, len(indexes), tensor_parallel))
    return Placement(node, Device.GPU, engines, tensor_parallel,
                     rows[0].gpu_memory_utilization,
                     tuple(Reservation(node, row.gpu_uuid, row.bytes, "", row.active)
                           for row in rows))


def _drift(before: NodeView, after: NodeView, row: GpuReservation) -> tuple[int | None, int | None]:
    def used(view: NodeView) -> int | None:
        for gpu in view.gpus:
            if gpu.uuid == row.gpu_uuid:
                return gpu.memory_used_bytes
        return None

    used_before, used_after = used(before), used(after)
    if used_before is None or used_after is None or after.error or before.error:
        return None, None
    measured = max(0, used_after - used_before)
    return measured, measured - row.bytes
