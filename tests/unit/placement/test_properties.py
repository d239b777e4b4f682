"""Properties of place() over random fleets, reservations and requests.

The invariants are checked with arithmetic written here, not with the module's own accounting.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from control_plane.gpus.readings import GpuHealth, GpuReading
from control_plane.placement.accounting import Ledger, engine_fit, foreign_bytes
from control_plane.placement.filters import GPU_FILTERS, NODE_FILTERS, RULE_NAMES
from control_plane.placement.model import (
    Device,
    NodeView,
    Placement,
    PlacementRequest,
    Refusal,
    Reservation,
    Strategy,
)
from control_plane.placement.place import place, place_on_fleet
from control_plane.placement.scorers import SCORERS, Candidate, best_choice, choose_on_node
from control_plane.placement.state import FleetState

from .fleet import GIB

HOLDERS = ["chat/prod@n0:v1", "chat/prod@n0:v2", "code/prod@n1:v1"]
SIZES_GIB = [24, 48, 80]
PROPERTY = settings(max_examples=200, deadline=None)


@st.composite
def readings(draw: st.DrawFn, node: str, index: int, total_gib: int) -> GpuReading:
    total = total_gib * GIB
    used = draw(st.integers(0, total))
    health = draw(st.sampled_from([GpuHealth.OK] * 6 + [GpuHealth.UNHEALTHY, GpuHealth.LOST]))
    readable = health is not GpuHealth.LOST
    return GpuReading(index=index, uuid=f"GPU-{node}-{index}", name="gpu",
                      memory_total_bytes=total if readable else None,
                      memory_used_bytes=used if readable else None,
                      memory_free_bytes=total - used if readable else None, health=health)


@st.composite
def nodes(draw: st.DrawFn, name: str) -> NodeView:
    count = draw(st.integers(0, 8))
    size = draw(st.sampled_from(SIZES_GIB))
    mixed = draw(st.integers(0, 4)) == 0
    gpus = tuple(draw(readings(name, i, draw(st.sampled_from(SIZES_GIB)) if mixed else size))
                 for i in range(count))
    error = "inventory unreadable" if draw(st.integers(0, 9)) == 0 else None
    excluded = frozenset(gpu.uuid for gpu in gpus if draw(st.integers(0, 9)) == 0)
    return NodeView(name=name, gpus=gpus, error=error, excluded_gpus=excluded)


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[NodeView], list[Reservation]]:
    fleet = [draw(nodes(f"n{i}")) for i in range(draw(st.integers(0, 4)))]
    uuids = [(view.name, gpu.uuid) for view in fleet for gpu in view.gpus] or [("n0", "GPU-gone")]
    reservations = draw(st.lists(st.builds(
        lambda where, size, holder, active: Reservation(where[0], where[1], size, holder, active),
        st.sampled_from(uuids + [("n0", "GPU-gone")]), st.integers(1, 40 * GIB),
        st.sampled_from(HOLDERS), st.booleans()), max_size=16))
    return fleet, reservations


@st.composite
def requests(draw: st.DrawFn) -> PlacementRequest:
    return PlacementRequest(
        holder=draw(st.sampled_from(HOLDERS)),
        device=draw(st.sampled_from([Device.GPU] * 5 + [Device.CPU])),
        bytes_per_gpu=draw(st.integers(1, 90 * GIB)),
        tensor_parallel_size=draw(st.sampled_from([1, 1, 2, 4])),
        replicas=draw(st.integers(1, 3)),
        nodes=draw(st.none() | st.lists(st.sampled_from(["n0", "n1", "n2", "n3", "ghost"]),
                                        unique=True).map(tuple)),
        headroom_fraction=draw(st.sampled_from([0.0, 0.05, 0.1, 0.3])),
        strategy=draw(st.sampled_from(list(Strategy))))


@PROPERTY
@given(fleets(), requests())
def test_a_placement_never_overbooks_a_gpu(fleet: tuple[list[NodeView], list[Reservation]],
                                           request: PlacementRequest) -> None:
    views, reservations = fleet
    result = place(request, views, reservations)
    if not isinstance(result, Placement) or result.device is Device.CPU:
        return
    view = next(v for v in views if v.name == result.node)
    assert request.nodes is None or view.name in request.nodes
    assert view.error is None
    assert len(result.engines) == request.replicas
    assert all(len(engine) == request.tensor_parallel_size for engine in result.engines)
    assert len(set(result.gpus)) == len(result.gpus) == len(result.reservations)
    booked: defaultdict[str, int] = defaultdict(int)
    active: defaultdict[str, int] = defaultdict(int)
    holders: defaultdict[str, set[str]] = defaultdict(set)
    for reservation in reservations:
        if reservation.node == view.name:
            booked[reservation.gpu_uuid] += reservation.bytes
            active[reservation.gpu_uuid] += reservation.bytes if reservation.active else 0
            holders[reservation.gpu_uuid].add(reservation.holder)
    by_index = {gpu.index: gpu for gpu in view.gpus}
    utilization = result.gpu_memory_utilization
    assert utilization is not None and 0 < utilization <= 1
    for index, new in zip(result.gpus, result.reservations, strict=True):
        gpu = by_index[index]
        assert new.gpu_uuid == gpu.uuid and new.node == view.name
        assert new.holder == request.holder and not new.active
        assert gpu.health is GpuHealth.OK and gpu.uuid not in view.excluded_gpus
        assert request.holder not in holders[gpu.uuid]
        total, used = gpu.memory_total_bytes, gpu.memory_used_bytes
        assert total is not None and used is not None
        # The booking is what vLLM takes, and at least what the engine asked for.
        assert new.bytes >= utilization * total >= request.bytes_per_gpu
        foreign = max(0, used - active[gpu.uuid])
        after = booked[gpu.uuid] + new.bytes
        assert after <= total * (1 - request.headroom_fraction) - foreign
        assert after <= total


@PROPERTY
@given(fleets(), requests())
def test_a_refusal_explains_itself_with_known_rules(
        fleet: tuple[list[NodeView], list[Reservation]], request: PlacementRequest) -> None:
    views, reservations = fleet
    result = place(request, views, reservations)
    if not isinstance(result, Refusal):
        assert all(v.rule in RULE_NAMES for v in result.passed_over)
        return
    assert result.verdicts and result.summary
    assert {v.rule for v in result.verdicts} <= RULE_NAMES
    if request.device is Device.GPU:
        # Every node is refused once as a whole; each of its GPUs at most once.
        assert Counter(v.node for v in result.verdicts if v.gpu_index is None) >= \
            Counter(v.name for v in views)
        per_gpu = Counter((v.node, v.gpu_index) for v in result.verdicts if v.gpu_index is not None)
        assert all(count == 1 for count in per_gpu.values())


@PROPERTY
@given(fleets(), requests(), st.randoms(use_true_random=False))
def test_placement_is_deterministic_whatever_the_input_order(
        fleet: tuple[list[NodeView], list[Reservation]], request: PlacementRequest,
        shuffler: object) -> None:
    views, reservations = fleet
    first = place(request, views, reservations)
    assert place(request, views, reservations) == first
    shuffled_views, shuffled_reservations = list(views), list(reservations)
    shuffler.shuffle(shuffled_views)  # type: ignore[attr-defined]
    shuffler.shuffle(shuffled_reservations)  # type: ignore[attr-defined]
    assert place(request, shuffled_views, shuffled_reservations) == first


@PROPERTY
@given(fleets(), requests())
def test_placement_is_the_best_choice_among_gpus_passing_every_rule(
        fleet: tuple[list[NodeView], list[Reservation]], request: PlacementRequest) -> None:
    # place() bisects each node's GPUs by load and skips the nodes whose best cannot win; every
    # GPU checked against every rule and every node scored must give the same placement.
    views, reservations = fleet
    if request.device is Device.CPU:
        return
    ledger = Ledger(reservations, holder=request.holder)
    choices = []
    for view in sorted(views, key=lambda view: view.name):
        if any(rule.check(request, view) is not None for rule in NODE_FILTERS):
            continue
        candidates = []
        for gpu in view.gpus:
            book = ledger.book(view.name, gpu.uuid)
            if any(rule.check(request, view, gpu, book) is not None for rule in GPU_FILTERS):
                continue
            total, used = gpu.memory_total_bytes or 0, gpu.memory_used_bytes or 0
            booking, usable = engine_fit(request.bytes_per_gpu, request.headroom_fraction, total)
            candidates.append(Candidate(gpu.index, total, usable - book.booked
                                        - foreign_bytes(used, book) - booking, book.booked > 0))
        choice = choose_on_node(view.name, candidates,
                                tensor_parallel_size=request.tensor_parallel_size,
                                replicas=request.replicas, scorer=SCORERS[request.strategy])
        if choice is not None:
            choices.append(choice)
    best = best_choice(choices)
    result = place(request, views, reservations)
    if best is None:
        assert isinstance(result, Refusal)
    else:
        assert isinstance(result, Placement)
        assert (result.node, result.engines) == (best.node, best.engines)


@st.composite
def bookings(draw: st.DrawFn) -> tuple[list[NodeView], list[tuple[bool, Reservation]]]:
    """A fleet and a sequence of steps: book a new reservation, or release one booked before."""
    views, _ = draw(fleets())
    uuids = [(view.name, gpu.uuid) for view in views for gpu in view.gpus] or [("n0", "GPU-gone")]
    steps: list[tuple[bool, Reservation]] = []
    live: list[Reservation] = []
    for _ in range(draw(st.integers(0, 30))):
        if live and draw(st.integers(0, 2)) == 0:
            steps.append((False, live.pop(draw(st.integers(0, len(live) - 1)))))
        else:
            where = draw(st.sampled_from(uuids))
            reservation = Reservation(where[0], where[1], draw(st.integers(1, 40 * GIB)),
                                      draw(st.sampled_from(HOLDERS)), draw(st.booleans()))
            live.append(reservation)
            steps.append((True, reservation))
    return views, steps


@PROPERTY
@given(bookings(), requests())
def test_a_kept_fleet_state_decides_as_a_fresh_one(
        fleet: tuple[list[NodeView], list[tuple[bool, Reservation]]],
        request: PlacementRequest) -> None:
    views, steps = fleet
    state = FleetState(views)
    live: Counter[Reservation] = Counter()
    for booking, reservation in steps:
        if booking:
            state.book([reservation])
            live[reservation] += 1
        else:
            state.release([reservation])
            live[reservation] -= 1
    fresh = Ledger(live.elements())
    assert Counter(state.ledger.reservations()) == +live
    for view in views:
        assert state.ledger.node(view.name) == fresh.node(view.name)
        for gpu in view.gpus:
            for holder in HOLDERS:
                assert state.ledger.book(view.name, gpu.uuid, holder) == \
                    fresh.book(view.name, gpu.uuid, holder)
    # Also after a decision has cached the nodes' reading verdicts.
    assert place_on_fleet(request, state) == place(request, views, list(live.elements()))
    assert place_on_fleet(request, state) == place(request, views, list(live.elements()))
