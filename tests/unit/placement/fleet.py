"""Small builders for GPU readings, nodes, reservations and requests used by the placement tests,
and the arithmetic that carries a defragmentation or repack plan out on a copy of the bookings."""

from __future__ import annotations

import random
from collections import Counter

from control_plane.gpus.readings import GpuHealth, GpuReading
from control_plane.placement.accounting import usable_bytes
from control_plane.placement.defragment import DefragmentationPlan
from control_plane.placement.model import (
    Device,
    NodeView,
    Placement,
    PlacementRequest,
    Reservation,
    Strategy,
)
from control_plane.placement.place import place_on_fleet
from control_plane.placement.state import FleetState

GIB = 2**30
HOLDER = "chat/prod@a:v1"


def gib(value: float) -> int:
    return int(value * GIB)


def gpu(index: int = 0, total: float = 80, used: float = 0, *, node: str = "a",
        health: GpuHealth = GpuHealth.OK, detail: str = "", name: str = "H100") -> GpuReading:
    """A reading with sizes in GiB and the UUID ``GPU-<node>-<index>``."""
    return GpuReading(index=index, uuid=uuid(node, index), name=name,
                      memory_total_bytes=gib(total), memory_used_bytes=gib(used),
                      memory_free_bytes=gib(total - used), health=health, detail=detail)


def uuid(node: str, index: int) -> str:
    return f"GPU-{node}-{index}"


def node(name: str, totals: list[float], used: list[float] | None = None, *,
         error: str | None = None, excluded: tuple[int, ...] = ()) -> NodeView:
    """A node whose GPU ``i`` has ``totals[i]`` GiB, ``used[i]`` GiB of it in use."""
    used = used or [0] * len(totals)
    return NodeView(name=name,
                    gpus=tuple(gpu(i, total, u, node=name)
                               for i, (total, u) in enumerate(zip(totals, used, strict=True))),
                    error=error, excluded_gpus=frozenset(uuid(name, i) for i in excluded))


def booked(node_name: str, index: int, size: float, *, holder: str = "other/prod@a:v1",
           active: bool = False) -> Reservation:
    return Reservation(node=node_name, gpu_uuid=uuid(node_name, index), bytes=gib(size),
                       holder=holder, active=active)


def request(size: float = 20, *, tp: int = 1, replicas: int = 1,
            nodes: tuple[str, ...] | None = None, headroom: float = 0.05,
            strategy: Strategy = Strategy.BEST_FIT, device: Device = Device.GPU,
            holder: str = HOLDER) -> PlacementRequest:
    """A request for engines of ``size`` GiB per GPU."""
    return PlacementRequest(holder=holder, device=device, bytes_per_gpu=gib(size),
                            tensor_parallel_size=tp, replicas=replicas, nodes=nodes,
                            headroom_fraction=headroom, strategy=strategy)


def random_fleet(rng: random.Random, *, nodes: int, versions: int
                 ) -> tuple[FleetState, dict[str, PlacementRequest]]:
    """Versions placed by place_on_fleet() as they arrive, some leaving holes behind."""
    state = FleetState([node(f"n{i}", [rng.choice([24, 48, 80, 141])] * 4)
                        for i in range(nodes)])
    requests: dict[str, PlacementRequest] = {}
    live: list[tuple[PlacementRequest, Placement]] = []
    for number in range(versions):
        one = request(rng.choice([2, 5, 10, 18, 30, 45]), tp=rng.choice([1, 1, 1, 2, 4]),
                      replicas=rng.choice([1, 1, 2]), holder=f"m/prod@n:v{number}")
        if one.tensor_parallel_size * one.replicas > 4:
            continue
        placed = place_on_fleet(one, state)
        if isinstance(placed, Placement):
            state.book(placed.reservations)
            requests[one.holder] = one
            live.append((one, placed))
        # Departures leave the holes a plan fills.
        if live and rng.random() < 0.4:
            gone, booked = live.pop(rng.randrange(len(live)))
            state.release(booked.reservations)
            del requests[gone.holder]
    return state, requests


def fleet_of(views: list[NodeView], asked: list[PlacementRequest]
             ) -> tuple[FleetState, dict[str, PlacementRequest]]:
    """The requests placed one after the other by place_on_fleet(), as the product books them."""
    state = FleetState(views)
    for one in asked:
        placed = place_on_fleet(one, state)
        assert isinstance(placed, Placement), placed
        state.book(placed.reservations)
    return state, {one.holder: one for one in asked}


def spread_fleet(views: list[NodeView], placed: list[tuple[PlacementRequest, str, tuple[int, ...]]]
                 ) -> tuple[FleetState, dict[str, PlacementRequest]]:
    """Requests booked on the GPUs named, ``size`` GiB per GPU as asked (a fragmented fleet)."""
    reservations = [Reservation(node=name, gpu_uuid=f"GPU-{name}-{index}",
                                bytes=one.bytes_per_gpu, holder=one.holder)
                    for one, name, indexes in placed for index in indexes]
    return FleetState(views, reservations), {one.holder: one for one, _, _ in placed}


def carry_out(state: FleetState, plan: DefragmentationPlan) -> Counter[tuple[str, str]]:
    """The plan applied in order to the state's bookings, each target checked to fit first."""
    totals = {(view.name, reading.uuid): reading.memory_total_bytes or 0
              for view in state.nodes for reading in view.gpus}
    booked: Counter[tuple[str, str]] = Counter()
    for reservation in state.ledger.reservations():
        booked[(reservation.node, reservation.gpu_uuid)] += reservation.bytes
    for move in plan.moves:
        own = {(r.node, r.gpu_uuid) for r in move.release}
        for reservation in move.target.reservations:
            key = (reservation.node, reservation.gpu_uuid)
            assert key not in own, f"{move.holder} moves onto a GPU it holds: {key}"
            assert booked[key] + reservation.bytes <= usable_bytes(totals[key], 0.05), \
                f"{move.holder} does not fit on {key} at its turn"
            booked[key] += reservation.bytes
        for reservation in move.release:
            booked[(reservation.node, reservation.gpu_uuid)] -= reservation.bytes
    return booked


def in_use(booked: Counter[tuple[str, str]]) -> set[tuple[str, str]]:
    return {key for key, value in booked.items() if value}
