"""REST endpoints of placement: a preview that books nothing, and a node's GPUs with their
bookings."""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from google.protobuf import json_format

from control_plane.auth.dependencies import Reader
from control_plane.db import transaction
from control_plane.error_handlers import error_responses
from control_plane.gpus.monitor import GpuMonitor
from control_plane.nodes.service import get_node
from control_plane.placement.model import NodeView, Placement, Refusal
from control_plane.registry.schemas import MODEL_NAME_PATTERN
from control_plane.reservations import service
from control_plane.reservations.placer import NO_INVENTORY, Placer
from control_plane.reservations.schemas import (
    BookingOut,
    DemandOut,
    GpuOut,
    GpuReservationOut,
    GpuSampleOut,
    NodeGpusOut,
    PlacementOut,
    PreviewOut,
    PreviewRequest,
    ReadingOut,
    RefusalOut,
    VerdictOut,
)
from control_plane.triton.config_builder import instance_groups

router = APIRouter(tags=["placement"], responses=error_responses(401, 403, 422, 503))
Name = Annotated[str, Path(pattern=MODEL_NAME_PATTERN)]


async def _placer(request: Request) -> Placer:
    placer: Placer = request.app.state.placer
    return placer


async def _monitor(request: Request) -> GpuMonitor:
    monitor: GpuMonitor = request.app.state.gpu_monitor
    return monitor


PlacerDep = Annotated[Placer, Depends(_placer)]
MonitorDep = Annotated[GpuMonitor, Depends(_monitor)]


def _placement(placement: Placement, simulated: bool) -> PlacementOut:
    groups = [json_format.MessageToDict(group, preserving_proto_field_name=True)
              for group in instance_groups(placement, simulated)]
    return PlacementOut(
        node=placement.node, device=placement.device.value,
        engines=[list(engine) for engine in placement.engines],
        tensor_parallel_size=placement.tensor_parallel_size,
        gpu_memory_utilization=placement.gpu_memory_utilization, simulated=simulated,
        instance_group=groups,
        # One booking per engine GPU, in the engines' order.
        bookings=[BookingOut(gpu_index=index, gpu_uuid=r.gpu_uuid, bytes=r.bytes)
                  for index, r in zip(placement.gpus, placement.reservations, strict=True)],
        passed_over=[VerdictOut.model_validate(v.as_dict()) for v in placement.passed_over])


@router.post("/placements/preview", responses=error_responses(404))
def preview_placement(body: PreviewRequest, request: Request, _: Reader,
                      placer: PlacerDep, monitor: MonitorDep) -> PreviewOut:
    """Where a version would run now, decided from the latest readings and every booking, and
    why each GPU passed over was; nothing is booked or loaded."""
    factory = request.app.state.session_factory
    # The monitor's readings, taken outside any transaction; the decision in a read-only one.
    with transaction(factory, read_only=True) as session:
        nodes = service.preview_nodes(session, body.node)
    views, _taken = service.cached_views(placer, monitor.latest, nodes)
    with transaction(factory, read_only=True) as session:
        version, decision = service.preview(session, placer, body.model, body.version,
                                            body.alias, nodes, views, body.strategy)
    outcome = decision.outcome
    demand = decision.demand.as_dict()
    return PreviewOut(
        decision="refused" if isinstance(outcome, Refusal) else "placed", model=body.model,
        version=version.number, demand=DemandOut.model_validate(demand),
        placement=None if isinstance(outcome, Refusal) else _placement(outcome,
                                                                       decision.simulated),
        refusal=RefusalOut.model_validate(outcome.as_dict())
        if isinstance(outcome, Refusal) else None)


@router.get("/nodes/{node}/gpus", responses=error_responses(404))
def node_gpus(node: Name, request: Request, _: Reader, placer: PlacerDep,
              monitor: MonitorDep,
              history: Annotated[int, Query(ge=0, le=1000, description=(
                  "how many earlier readings to include, oldest first"))] = 0) -> NodeGpusOut:
    """The node's GPUs as last read, each with its bookings (drift after a load included) and
    what can still be booked; NVML or inventory errors are shown as errors, never as free
    memory."""
    factory = request.app.state.session_factory
    with transaction(factory, read_only=True) as session:
        found_node = get_node(session, node)
    views, taken_at = service.cached_views(placer, monitor.latest, [found_node])
    view = views.get(node) or NodeView(node, error=NO_INVENTORY)
    gpus = []
    with transaction(factory, read_only=True) as session:
        found = service.node_gpus(session, placer, node, view, taken_at)
        for state in found.gpus:
            reading = dataclasses.asdict(state.reading)
            gpus.append(GpuOut(
                **reading, excluded=state.excluded,
                booked_bytes=state.booked_bytes, bookable_bytes=state.bookable_bytes,
                reservations=[GpuReservationOut(
                    model=row.deployment.model.name, alias=row.deployment.alias,
                    version=row.version, bytes=row.bytes,
                    gpu_memory_utilization=row.gpu_memory_utilization, active=row.active,
                    measured_bytes=row.measured_bytes, drift_bytes=row.drift_bytes)
                    for row in state.reservations]))
    earlier = monitor.history(node)[-history:] if history else []
    return NodeGpusOut(
        node=found.node.name, inventory=found.node.gpu_inventory, taken_at=found.taken_at,
        error=found.error, headroom_fraction=placer.headroom_fraction, gpus=gpus,
        history=[ReadingOut(taken_at=r.taken_at, error=r.error, gpus=[
            GpuSampleOut(index=g.index, memory_used_bytes=g.memory_used_bytes,
                         utilization_percent=g.utilization_percent, health=g.health.value)
            for g in r.gpus]) for r in earlier])
