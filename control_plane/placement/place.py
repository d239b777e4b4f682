"""``place()``: which node and GPUs a deployment version's engines run on, or why none can.

Pure and deterministic: the same request, readings and reservations always give the same answer.
Every node is checked against the node rules, every GPU of a node that passed against the GPU
rules (see ``filters``), and the node's passing GPUs against the capacity rule; the choices left
are ranked by the request's scorer (see ``scorers``). Memory is accounted as ``accounting`` says.

It runs once per decision over the whole fleet. ``place()`` adds the reservations up for the
call; a caller that decides often keeps a ``FleetState`` (see ``state``) and calls
``place_on_fleet()``, which reads the sums kept current as bookings are made and released and
checks the reading rules once per reading. Each GPU then costs a few dictionary look-ups and
method calls: about 2 ms of CPU per decision for 1,000 GPUs (``bench/placement.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence

from control_plane.gpus.readings import GpuReading
from control_plane.placement.accounting import (
    EMPTY_BOOK,
    GIB,
    booking_bytes,
    engine_fit,
    foreign_bytes,
    gib,
    gpu_memory,
    utilization_for,
)
from control_plane.placement.filters import (
    BOOKING_GPU_FILTERS,
    CAPACITY_FILTERS,
    INVENTORY_READABLE,
    NODE_ALLOWED,
    NODE_FILTERS,
)
from control_plane.placement.model import (
    Device,
    NodeView,
    Placement,
    PlacementRequest,
    Refusal,
    Reservation,
    Verdict,
)
from control_plane.placement.scorers import (
    SCORERS,
    Candidate,
    NodeChoice,
    best_choice,
    choose_on_node,
)
from control_plane.placement.state import FleetState

# Each GPU of the fleet goes through these on every decision (the reading rules before them are
# checked once per reading, see FleetState.reading_verdicts): bound once.
_BOOKING_CHECKS = tuple((gpu_filter.name, gpu_filter.check) for gpu_filter in BOOKING_GPU_FILTERS)


def place(request: PlacementRequest, nodes: Sequence[NodeView],
          reservations: Sequence[Reservation]) -> Placement | Refusal:
    """Place ``request`` on one of ``nodes`` given the existing ``reservations``, or refuse."""
    return place_on_fleet(request, FleetState(nodes, reservations))


def place_on_fleet(request: PlacementRequest, fleet: FleetState) -> Placement | Refusal:
    """Place ``request`` on one of the fleet's nodes given its bookings, or refuse; the fleet is
    only read (book the placement's reservations on it to keep it current)."""
    check_request(request)
    known = fleet.names
    missing = [Verdict(node=name, rule=INVENTORY_READABLE.name,
                       detail=INVENTORY_READABLE.missing(name, list(known)))
               for name in request.nodes or () if fleet.view(name) is None]
    if request.device is Device.CPU:
        return _place_cpu(request, fleet, missing)
    return _place_gpu(request, fleet, missing)


def check_request(request: PlacementRequest) -> None:
    """Raise ValueError for a request no fleet could satisfy because it is malformed."""
    if request.tensor_parallel_size < 1:
        raise ValueError(f"tensor_parallel_size must be at least 1, got "
                         f"{request.tensor_parallel_size}")
    if request.replicas < 1:
        raise ValueError(f"replicas must be at least 1, got {request.replicas}")
    if request.device is Device.GPU and request.bytes_per_gpu <= 0:
        raise ValueError(f"bytes_per_gpu must be positive for a GPU engine, got "
                         f"{request.bytes_per_gpu}")
    if not 0.0 <= request.headroom_fraction < 1.0:
        raise ValueError(f"headroom_fraction must be in [0, 1), got {request.headroom_fraction}")


def _place_cpu(request: PlacementRequest, fleet: FleetState,
               missing: list[Verdict]) -> Placement | Refusal:
    # A CPU engine books no GPU memory: only the node rule applies, and the first node wins.
    by_name = fleet.nodes
    allowed = list(by_name) if request.nodes is None else \
        [view for name in request.nodes if (view := fleet.view(name)) is not None]
    if allowed:
        return Placement(node=allowed[0].name, device=Device.CPU,
                         engines=tuple(() for _ in range(request.replicas)),
                         tensor_parallel_size=request.tensor_parallel_size,
                         gpu_memory_utilization=None, reservations=(), passed_over=tuple(missing))
    verdicts = missing + [Verdict(node=node.name, rule=NODE_ALLOWED.name, detail=detail)
                          for node in by_name
                          if (detail := NODE_ALLOWED.check(request, node)) is not None]
    return _refusal(f"no node can run {_engines(request.replicas)} on the CPU", verdicts)


def _place_gpu(request: PlacementRequest, fleet: FleetState,
               missing: list[Verdict]) -> Placement | Refusal:
    scorer = SCORERS[request.strategy]
    verdicts = list(missing)
    choices: list[NodeChoice] = []
    held = fleet.ledger.held_by(request.holder)
    nodes = fleet.nodes
    for node in nodes:
        node_failure = _first_node_failure(request, node)
        if node_failure is not None:
            verdicts.append(Verdict(node=node.name, rule=node_failure[0], detail=node_failure[1]))
            continue
        passing, candidates = _passing_gpus(request, node, fleet, held, verdicts)
        capacity_failure = _first_capacity_failure(request, node, passing)
        if capacity_failure is not None:
            verdicts.append(Verdict(node=node.name, rule=capacity_failure[0],
                                    detail=capacity_failure[1]))
            continue
        choice = choose_on_node(node.name, candidates,
                                tensor_parallel_size=request.tensor_parallel_size,
                                replicas=request.replicas, scorer=scorer)
        # The capacity rule passed, so a large enough group of equal GPUs exists: never None.
        if choice is not None:
            choices.append(choice)
    best = best_choice(choices)
    if best is None:
        return _refusal(f"no node can hold {_engines(request.replicas)} of "
                        f"{gib(request.bytes_per_gpu)} per GPU with tensor parallelism "
                        f"{request.tensor_parallel_size}", verdicts)
    return _placement(request, next(node for node in nodes if node.name == best.node), best,
                      verdicts)


def _passing_gpus(request: PlacementRequest, node: NodeView, fleet: FleetState,
                  held: Collection[tuple[str, str]],
                  verdicts: list[Verdict]) -> tuple[list[GpuReading], list[Candidate]]:
    """The node's GPUs that pass every GPU rule; a verdict is added for each one that fails."""
    passing: list[GpuReading] = []
    candidates: list[Candidate] = []
    name = node.name
    books = fleet.ledger.node(name)
    for gpu, reading_failure in zip(node.gpus, fleet.reading_verdicts(node, request),
                                    strict=True):
        if reading_failure is not None:
            verdicts.append(Verdict(name, reading_failure[0], reading_failure[1], gpu.index,
                                    gpu.uuid))
            continue
        book = books.get(gpu.uuid, EMPTY_BOOK)
        if held and (name, gpu.uuid) in held:
            book = book._replace(holds_holder=True)
        for rule, check in _BOOKING_CHECKS:
            detail = check(request, node, gpu, book)
            if detail is not None:
                verdicts.append(Verdict(name, rule, detail, gpu.index, gpu.uuid))
                break
        else:
            # gpu-healthy passed, so both figures were read.
            total, used = gpu_memory(gpu) or (0, 0)
            booking, usable = engine_fit(request.bytes_per_gpu, request.headroom_fraction, total)
            passing.append(gpu)
            # "In use" means booked for one of our engines: an idle GPU's reading often shows a
            # few hundred MiB used by the driver, which must not make every GPU look busy.
            candidates.append(Candidate(
                gpu.index, total, usable - book.booked - foreign_bytes(used, book) - booking,
                in_use=book.booked > 0))
    return passing, candidates


def _first_node_failure(request: PlacementRequest, node: NodeView) -> tuple[str, str] | None:
    for node_filter in NODE_FILTERS:
        detail = node_filter.check(request, node)
        if detail is not None:
            return node_filter.name, detail
    return None


def _first_capacity_failure(request: PlacementRequest, node: NodeView,
                           passing: list[GpuReading]) -> tuple[str, str] | None:
    for capacity_filter in CAPACITY_FILTERS:
        detail = capacity_filter.check(request, node, passing)
        if detail is not None:
            return capacity_filter.name, detail
    return None


def _placement(request: PlacementRequest, node: NodeView, choice: NodeChoice,
               verdicts: list[Verdict]) -> Placement:
    by_index = {gpu.index: gpu for gpu in node.gpus}
    chosen = [by_index[index] for engine in choice.engines for index in engine]
    totals = [gpu.memory_total_bytes or 0 for gpu in chosen]
    # One utilization for every engine, from the smallest GPU so each gets at least
    # bytes_per_gpu; each GPU is booked what vLLM will take of it at that utilization.
    utilization = utilization_for(request.bytes_per_gpu, min(totals))
    reservations = tuple(
        Reservation(node=node.name, gpu_uuid=gpu.uuid, bytes=booking_bytes(utilization, total),
                    holder=request.holder, active=False)
        for gpu, total in zip(chosen, totals, strict=True))
    return Placement(node=node.name, device=Device.GPU, engines=choice.engines,
                     tensor_parallel_size=request.tensor_parallel_size,
                     gpu_memory_utilization=utilization, reservations=reservations,
                     # What the scorers compare: GiB left bookable on the chosen GPUs.
                     score=choice.left / GIB, passed_over=tuple(verdicts))


def _refusal(what: str, verdicts: list[Verdict]) -> Refusal:
    if not verdicts:
        verdicts = [Verdict(node="", rule=INVENTORY_READABLE.name,
                            detail="the inventory holds no nodes; register a node first")]
    gpus = Counter(v.rule for v in verdicts if v.gpu_index is not None)
    nodes = Counter(v.rule for v in verdicts if v.gpu_index is None)
    reasons = [f"{rule} ({count} GPU{'s' * (count != 1)})" for rule, count in gpus.most_common()]
    reasons += [f"{rule} ({count} node{'s' * (count != 1)})" for rule, count in nodes.most_common()]
    return Refusal(summary=f"{what}: refused by {', '.join(reasons)}", verdicts=tuple(verdicts))


def _engines(count: int) -> str:
    return f"{count} engine{'s' * (count != 1)}"
