"""The placement benchmark's simulated fleet and event stream, shared by every policy it runs.

125 nodes of 8 GPUs of four kinds; versions of real model shapes arriving and leaving, sized by
``estimate_memory``; a loop that feeds the events to a policy, checks every GPU's bookings after
each event and samples the GPUs in use beside lower bounds (see ``bench/placement.py``).
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bench.placement_repack import RepackStats
from control_plane.gpus.readings import GpuReading
from control_plane.placement.defragment import DefragmentationPlan
from control_plane.placement.estimate import ModelProfile, estimate_memory
from control_plane.placement.model import Device, NodeView, PlacementRequest, Reservation

MIB = 2**20
GIB = 2**30
SEED = 20_240_601
GPUS_PER_NODE = 8
HEADROOM = 0.05
# (kind, memory total as NVML reports it, nodes): A10 24GB, L40S 48GB, H100 80GB, H200 141GB.
NODE_KINDS = [("a10", 23_028 * MIB, 30), ("l40s", 46_068 * MIB, 35), ("h100", 81_559 * MIB, 35),
              ("h200", 143_771 * MIB, 25)]
# (name, parameters, layers, KV heads, head dim, popularity): small models are deployed most.
MODELS = [("qwen2.5-0.5b", 494_032_768, 24, 2, 64, 12), ("llama-3.2-1b", 1_235_814_400, 16, 8, 64, 14),
          ("llama-3.2-3b", 3_212_749_824, 28, 8, 128, 16), ("llama-3.1-8b", 8_030_261_248, 32, 8, 128, 24),
          ("qwen2.5-14b", 14_770_033_664, 48, 8, 128, 14), ("qwen2.5-32b", 32_763_876_352, 64, 8, 128, 12),
          ("llama-3.3-70b", 70_553_706_496, 80, 8, 128, 8)]
MAX_MODEL_LENS = [4096, 8192, 16384, 32768]
TENSOR_PARALLEL = (1, 2, 4, 8)
TWO_REPLICAS = 0.15
SPAN = 1000.0


@dataclass
class Version:
    number: int
    arrival: float
    lifetime: float
    model: str
    request: PlacementRequest
    # Memory the version asks for: bytes per GPU x tensor parallelism x replicas.
    asked: int


@dataclass
class Planned:
    """One planner's plans in a run: how long each took, those carried out, what they moved
    and, for the repack, the solver's figures."""

    plans: int = 0
    moves: int = 0
    engines_moved: int = 0
    bytes_moved: int = 0
    gpus_freed: int = 0
    # Every plan asked for, carried out or not.
    planning_s: list[float] = field(default_factory=list)
    solver: RepackStats = field(default_factory=RepackStats)

    def count(self, plan: DefragmentationPlan | None, seconds: float) -> None:
        """A plan that took ``seconds``, carried out unless None (none found)."""
        self.planning_s.append(seconds)
        if plan is not None:
            self.plans += 1
            self.moves += len(plan.moves)
            self.engines_moved += plan.engines
            self.bytes_moved += plan.bytes
            self.gpus_freed += plan.gpus_in_use_before - plan.gpus_in_use_after


@dataclass
class Run:
    """One policy over the event stream: what it decided and what was sampled at each arrival."""

    policy: str
    decision_s: list[float] = field(default_factory=list)
    # CPU time of the same calls: what the decision costs whatever else runs on the machine.
    decision_cpu_s: list[float] = field(default_factory=list)
    # Of ``decision_s``, the decisions that refused (then made room for, or not): a refusal
    # explains every GPU passed over, and costs several placements.
    refusal_s: list[float] = field(default_factory=list)
    # The others: decisions that placed at their first try (the cost of an ordinary placement).
    placing_s: list[float] = field(default_factory=list)
    refused: int = 0
    placed: int = 0
    over_commits: int = 0
    over_headroom: int = 0
    in_use: list[int] = field(default_factory=list)
    bound: list[int] = field(default_factory=list)
    bound_headroom: list[int] = field(default_factory=list)
    bound_packing: list[int] = field(default_factory=list)
    asked_live: list[int] = field(default_factory=list)
    # At the arrivals in ``snapshot_at``: what is live and where, for the offline optimum.
    snapshot_at: frozenset[int] = frozenset()
    snapshots: dict[int, list[tuple[tuple[Reservation, ...], Version]]] = field(
        default_factory=dict)
    # With defragmentation: the periodic plans (``plan_defragmentation()``), those of the repack
    # after each (a trial), and those that made room for refused arrivals (``plan_room()``).
    defragmentation: Planned = field(default_factory=Planned)
    repack: Planned = field(default_factory=Planned)
    room: Planned = field(default_factory=Planned)
    # With consolidation: the maintenance-window re-layouts (``plan_consolidation()``).
    consolidation: Planned = field(default_factory=Planned)
    # Moves, of any plan, whose target did not fit beside what was booked when they ran (never
    # expected).
    moves_infeasible: int = 0


@dataclass
class Fleet:
    """The simulated GPUs: totals by (node, uuid), the node kinds, and readings kept current."""

    totals: dict[tuple[str, str], int]
    kind_of: dict[str, str]
    views: dict[str, NodeView]

    @classmethod
    def build(cls) -> Fleet:
        totals: dict[tuple[str, str], int] = {}
        kind_of: dict[str, str] = {}
        views: dict[str, NodeView] = {}
        for kind, total, count in NODE_KINDS:
            for n in range(count):
                name = f"{kind}-{n:03d}"
                kind_of[name] = kind
                gpus = tuple(GpuReading(index=i, uuid=f"GPU-{name}-{i}", name=kind,
                                        memory_total_bytes=total, memory_used_bytes=0,
                                        memory_free_bytes=total) for i in range(GPUS_PER_NODE))
                views[name] = NodeView(name=name, gpus=gpus)
                totals.update({(name, gpu.uuid): total for gpu in gpus})
        return cls(totals, kind_of, views)


def make_versions(count: int, peak_demand: float, fleet_bytes: int) -> tuple[list[Version], float]:
    """``count`` versions with arrivals over ``SPAN`` and lifetimes scaled so that the memory asked
    by live versions peaks at ``peak_demand`` of ``fleet_bytes``; also the mean lifetime."""
    rng = random.Random(SEED)
    kinds = [(total, nodes) for _, total, nodes in NODE_KINDS]
    versions = []
    for number in range(count):
        name, params, layers, kv_heads, head_dim, _ = rng.choices(
            MODELS, weights=[m[5] for m in MODELS])[0]
        profile = ModelProfile(weights_bytes=params * 2, dtype="bfloat16", num_hidden_layers=layers,
                               num_key_value_heads=kv_heads, head_dim=head_dim,
                               max_position_embeddings=131_072)
        max_len = rng.choice(MAX_MODEL_LENS)
        start = rng.choices(range(len(kinds)), weights=[n for _, n in kinds])[0]
        tp, per_gpu = _fitting_tensor_parallel(profile, max_len, [t for t, _ in kinds[start:]])
        replicas = 2 if rng.random() < TWO_REPLICAS and tp <= 4 else 1
        request = PlacementRequest(holder=f"{name}/prod@fleet:v{number}", device=Device.GPU,
                                   bytes_per_gpu=per_gpu, tensor_parallel_size=tp,
                                   replicas=replicas, headroom_fraction=HEADROOM)
        # Arrivals rise and fall over the span (a busy period in the middle).
        arrival = rng.betavariate(2, 2) * SPAN
        versions.append(Version(number, arrival, rng.expovariate(1.0), name, request,
                                per_gpu * tp * replicas))
    scale = _lifetime_scale(versions, peak_demand * fleet_bytes)
    for version in versions:
        version.lifetime *= scale
    versions.sort(key=lambda v: v.arrival)
    return versions, scale


def _fitting_tensor_parallel(profile: ModelProfile, max_len: int,
                             totals: Sequence[int]) -> tuple[int, int]:
    """The smallest tensor parallelism that fits the first GPU kind it can, and bytes per GPU."""
    for total in totals:
        for tp in TENSOR_PARALLEL:
            per_gpu = estimate_memory(profile, tensor_parallel_size=tp,
                                      max_model_len=max_len).per_gpu_bytes
            if per_gpu <= total * (1 - HEADROOM) - 0.001 * total:
                return tp, per_gpu
    raise ValueError(f"no GPU kind holds the model with max_model_len {max_len}")


def _lifetime_scale(versions: list[Version], target: float) -> float:
    def peak(scale: float) -> float:
        events = sorted([(v.arrival, v.asked) for v in versions]
                        + [(v.arrival + v.lifetime * scale, -v.asked) for v in versions])
        live = best = 0
        for _, delta in events:
            live += delta
            best = max(best, live)
        return best

    low, high = 0.0, SPAN
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if peak(middle) < target else (low, middle)
    return high


# What a policy booked for a version and the GPU kind it chose (None: refused), and the wall and
# CPU seconds the policy itself took to decide, without the bench's bookkeeping around it.
Decided = tuple[tuple[Reservation, ...], str] | None
Decide = Callable[[Version], tuple[Decided, float, float]]
Leave = Callable[[Version, tuple[Reservation, ...]], None]
# Live versions by number: their reservations, the GPU kind they run on, the version.
Live = dict[int, tuple[tuple[Reservation, ...], str, Version]]
# Called after every arrival, with the arrival's number (0 is the first): may move live versions.
AfterArrival = Callable[[int], None]


def simulate(run: Run, versions: list[Version], fleet: Fleet, decide: Decide,
             on_leave: Leave, after_arrival: AfterArrival | None = None,
             live: Live | None = None) -> Run:
    """Feed arrivals and departures to ``decide``, recording in ``run`` (the caller's, for a
    ``decide`` that counts there too); sample and verify after every event, and keep what is
    live at the arrivals numbered in ``run.snapshot_at`` (0 is the first)."""
    events = sorted([(v.arrival, 1, v) for v in versions]
                    + [(v.arrival + v.lifetime, 0, v) for v in versions],
                    key=lambda e: (e[0], e[1], e[2].number))
    # ``live`` may be the caller's, for a ``decide`` that moves live versions to make room.
    live = {} if live is None else live
    for _, arriving, version in events:
        if arriving:
            decided, elapsed, cpu = decide(version)
            run.decision_s.append(elapsed)
            run.decision_cpu_s.append(cpu)
            if decided is None:
                run.refused += 1
            else:
                run.placed += 1
                live[version.number] = (decided[0], decided[1], version)
            if after_arrival is not None:
                after_arrival(len(run.in_use))
        elif version.number in live:
            reservations, _, _ = live.pop(version.number)
            on_leave(version, reservations)
        _verify(run, live, fleet)
        if arriving:
            if len(run.in_use) in run.snapshot_at:
                run.snapshots[len(run.in_use)] = [(rs, v) for rs, _, v in live.values()]
            _sample(run, live, fleet)
    return run


def _verify(run: Run, live: Live, fleet: Fleet) -> None:
    booked: Counter[tuple[str, str]] = Counter()
    for reservations, _, _ in live.values():
        for reservation in reservations:
            booked[(reservation.node, reservation.gpu_uuid)] += reservation.bytes
    for key, total_booked in booked.items():
        total = fleet.totals[key]
        run.over_commits += total_booked > total
        run.over_headroom += total_booked > total * (1 - HEADROOM)


def _sample(run: Run, live: Live, fleet: Fleet) -> None:
    used_gpus = {(r.node, r.gpu_uuid) for reservations, _, _ in live.values()
                 for r in reservations}
    asked: defaultdict[str, int] = defaultdict(int)
    shares: defaultdict[str, list[int]] = defaultdict(list)
    for _, kind, version in live.values():
        asked[kind] += version.asked
        request = version.request
        shares[kind] += [request.bytes_per_gpu] * (request.tensor_parallel_size * request.replicas)
    memory = {kind: total for kind, total, _ in NODE_KINDS}
    run.in_use.append(len(used_gpus))
    run.bound.append(sum(math.ceil(a / memory[k]) for k, a in asked.items()))
    run.bound_headroom.append(sum(math.ceil(a / (memory[k] * (1 - HEADROOM)))
                                  for k, a in asked.items()))
    run.bound_packing.append(sum(packing_bound(s, memory[k] * (1 - HEADROOM))
                                 for k, s in shares.items()))
    run.asked_live.append(sum(asked.values()))


def packing_bound(items: list[int], capacity: float) -> int:
    """Martello and Toth's L2 lower bound for packing ``items`` into bins of ``capacity``: an
    engine's share of a GPU larger than half of it cannot share that GPU with another such share,
    and the small shares fill the room the large ones leave before they need GPUs of their own."""
    large = [item for item in items if item > capacity / 2]
    small = sum(items) - sum(large)
    room = len(large) * capacity - sum(large)
    return len(large) + max(0, math.ceil((small - room) / capacity))
