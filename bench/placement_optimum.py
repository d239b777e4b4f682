"""The offline optimum of a snapshot of the placement benchmark: a bin-packing MIP solved by HiGHS.

A snapshot is the versions live at one moment. The MIP places all of them at once, free to choose
any node of any kind, under the rules ``place()`` applies: an engine group (tensor parallelism x
replicas GPUs) on one node, on distinct GPUs of equal size (anti-affinity and tensor-parallel);
each GPU booked what vLLM takes at the utilization ``place()`` computes (``booking_bytes``), at
most its total less the headroom (fits-memory). It minimises the GPUs holding anything.

Versions of one shape (bytes per GPU, GPUs per version) are counted, not named: per node, ``z``
versions of a shape, ``w`` of their shares on each GPU; ``w <= z`` on every GPU and ``sum(w) =
n z`` are exactly what lets the ``z`` versions be cut into ``n`` distinct GPUs each (wrap-around
assignment). Nodes of a kind, and GPUs of a node, are interchangeable, so the used GPUs of a node
come first and the nodes of a kind are ordered by GPUs used: that removes symmetric copies of every
solution without removing any solution's value.

The solver starts from an incumbent computed here (every live version re-placed at once, largest
first, with the product's own best fit on an empty fleet) and gets ``time_limit`` seconds. It
reports the best solution it has (``incumbent``) and the best proven lower bound (``bound``); when
the two differ the optimum lies between them, and both are reported.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import highspy
import numpy as np

from control_plane.placement.accounting import booking_bytes, usable_bytes, utilization_for


@dataclass(frozen=True)
class Shape:
    """Versions that pack the same way: bytes per GPU and GPUs per version (tp x replicas)."""

    bytes_per_gpu: int
    gpus: int


@dataclass(frozen=True)
class NodeKind:
    name: str
    memory_total_bytes: int
    nodes: int
    gpus_per_node: int


@dataclass(frozen=True)
class Solved:
    incumbent: int
    # The best proven: the larger of the MIP's own bound and the relaxation's.
    bound: float
    mip_bound: float
    relaxation_bound: float
    relaxation_status: str
    start: int
    status: str
    gap: float
    seconds: float
    variables: int
    constraints: int

    def as_dict(self) -> dict[str, Any]:
        return {"incumbent_gpus": self.incumbent, "bound_gpus": round(self.bound, 3),
                "mip_bound_gpus": round(self.mip_bound, 3),
                "relaxation_bound_gpus": round(self.relaxation_bound, 3),
                "relaxation_status": self.relaxation_status,
                "start_gpus": self.start, "status": self.status, "gap": round(self.gap, 4),
                "seconds": round(self.seconds, 2), "variables": self.variables,
                "constraints": self.constraints}


class MipModel:
    """Columns and rows of the MIP, collected as sparse triplets, then passed to HiGHS at once."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.upper: list[float] = []
        self.rows_lower: list[float] = []
        self.rows_upper: list[float] = []
        self.entries: list[tuple[int, int, float]] = []

    def column(self, upper: float, cost: float = 0.0) -> int:
        self.cost.append(cost)
        self.upper.append(upper)
        return len(self.cost) - 1

    def row(self, terms: Sequence[tuple[int, float]], lower: float, upper: float) -> None:
        index = len(self.rows_lower)
        self.rows_lower.append(lower)
        self.rows_upper.append(upper)
        self.entries.extend((index, column, value) for column, value in terms)

    def highs(self, time_limit: float, threads: int) -> highspy.Highs:
        columns = len(self.cost)
        solver = highspy.Highs()
        solver.setOptionValue("output_flag", False)
        solver.setOptionValue("time_limit", float(time_limit))
        solver.setOptionValue("threads", threads)
        solver.setOptionValue("mip_rel_gap", 1e-4)
        lp = highspy.HighsLp()
        lp.num_col_ = columns
        lp.num_row_ = len(self.rows_lower)
        lp.col_cost_ = np.array(self.cost, dtype=np.double)
        lp.col_lower_ = np.zeros(columns, dtype=np.double)
        lp.col_upper_ = np.array(self.upper, dtype=np.double)
        lp.row_lower_ = np.array(self.rows_lower, dtype=np.double)
        lp.row_upper_ = np.array(self.rows_upper, dtype=np.double)
        lp.integrality_ = [highspy.HighsVarType.kInteger] * columns
        by_column = sorted(self.entries, key=lambda entry: (entry[1], entry[0]))
        starts = np.zeros(columns + 1, dtype=np.int32)
        for _, column, _ in by_column:
            starts[column + 1] += 1
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = np.cumsum(starts).astype(np.int32)
        lp.a_matrix_.index_ = np.array([row for row, _, _ in by_column], dtype=np.int32)
        lp.a_matrix_.value_ = np.array([value for _, _, value in by_column], dtype=np.double)
        solver.passModel(lp)
        return solver


def relaxation_bound(demand: Counter[Shape], kinds: Sequence[NodeKind], headroom: float,
                     *, time_limit: float = 30.0) -> tuple[float, str]:
    """A lower bound on the fewest GPUs, from a small MIP that drops which GPU of which node each
    share is on and keeps, per kind, the memory and the counts of shares that cannot share a GPU
    (at most one share over half a GPU on it, two over a third, three over a quarter); solved to
    optimality in well under a second, it is a bound the large MIP often does not reach."""
    model = MipModel()
    shapes = sorted(demand, key=lambda s: (s.gpus, s.bytes_per_gpu))
    placed: dict[Shape, list[tuple[int, float]]] = {shape: [] for shape in shapes}
    for kind in kinds:
        total = kind.memory_total_bytes
        usable = usable_bytes(total, headroom)
        gpus = model.column(float(kind.nodes * kind.gpus_per_node), cost=1.0)
        booking = {s: booking_bytes(utilization_for(s.bytes_per_gpu, total), total)
                   for s in shapes}
        count = {s: model.column(float(demand[s])) for s in shapes
                 if booking[s] <= usable and s.gpus <= kind.gpus_per_node}
        for shape, column in count.items():
            placed[shape].append((column, 1.0))
        model.row([(c, float(booking[s] * s.gpus)) for s, c in count.items()]
                  + [(gpus, -float(usable))], -np.inf, 0.0)
        for most, over in ((1, 2), (2, 3), (3, 4)):
            model.row([(c, float(s.gpus)) for s, c in count.items()
                       if booking[s] * over > usable] + [(gpus, -float(most))], -np.inf, 0.0)
    for shape in shapes:
        model.row(placed[shape], float(demand[shape]), float(demand[shape]))
    solver = model.highs(time_limit, threads=1)
    solver.run()
    status = solver.modelStatusToString(solver.getModelStatus())
    return solver.getInfo().mip_dual_bound, status


def solve(demand: Counter[Shape], kinds: Sequence[NodeKind], headroom: float,
          start: dict[str, list[list[Counter[Shape]]]], *, time_limit: float,
          threads: int = 1) -> Solved:
    """The fewest GPUs that hold ``demand``, from the feasible ``start`` (per kind, per node, per
    GPU: the shapes' shares on it) that the solver improves on within ``time_limit`` seconds."""
    started = time.perf_counter()
    relaxation, relaxation_status = relaxation_bound(demand, kinds, headroom)
    model = MipModel()
    shapes = sorted(demand, key=lambda s: (s.gpus, s.bytes_per_gpu))
    used: dict[tuple[int, int, int], int] = {}      # (kind, node, gpu) -> y
    shares: dict[tuple[int, int, int, Shape], int] = {}  # (kind, node, gpu, shape) -> w
    groups: dict[tuple[int, int, Shape], int] = {}   # (kind, node, shape) -> z, for gpus > 1
    placed: dict[Shape, list[tuple[int, float]]] = {shape: [] for shape in shapes}
    for k, kind in enumerate(kinds):
        total = kind.memory_total_bytes
        usable = usable_bytes(total, headroom)
        booking = {s: booking_bytes(utilization_for(s.bytes_per_gpu, total), total)
                   for s in shapes}
        fitting = [s for s in shapes if booking[s] <= usable and s.gpus <= kind.gpus_per_node]
        for n in range(kind.nodes):
            for g in range(kind.gpus_per_node):
                used[(k, n, g)] = model.column(1.0, cost=1.0)
                for shape in fitting:
                    shares[(k, n, g, shape)] = model.column(
                        float(min(usable // booking[shape], demand[shape])))
            for shape in fitting:
                if shape.gpus > 1:
                    groups[(k, n, shape)] = z = model.column(float(min(
                        demand[shape], kind.gpus_per_node * (usable // booking[shape])
                        // shape.gpus)))
                    placed[shape].append((z, 1.0))
                    # sum over the node's GPUs of w = gpus x z; each GPU at most one share of
                    # each of the z versions.
                    model.row([(shares[(k, n, g, shape)], 1.0)
                               for g in range(kind.gpus_per_node)] + [(z, -float(shape.gpus))],
                              0.0, 0.0)
                    # A share over half a GPU is alone on it (upper bound 1), which implies it.
                    if usable // booking[shape] > 1:
                        for g in range(kind.gpus_per_node):
                            model.row([(shares[(k, n, g, shape)], 1.0), (z, -1.0)],
                                      -np.inf, 0.0)
                else:
                    placed[shape].extend((shares[(k, n, g, shape)], 1.0)
                                         for g in range(kind.gpus_per_node))
            for g in range(kind.gpus_per_node):
                # Capacity: the bookings on a GPU fit its usable memory, and only if it is used.
                model.row([(shares[(k, n, g, s)], float(booking[s])) for s in fitting]
                          + [(used[(k, n, g)], -float(usable))], -np.inf, 0.0)
                # Valid cuts the capacity row implies only for whole numbers: at most one share
                # over half the GPU, at most two over a third.
                for most, over in ((1, 2), (2, 3)):
                    large = [s for s in fitting if booking[s] * over > usable]
                    if len(large) > 1:
                        model.row([(shares[(k, n, g, s)], 1.0) for s in large]
                                  + [(used[(k, n, g)], -float(most))], -np.inf, 0.0)
                if g:
                    model.row([(used[(k, n, g)], 1.0), (used[(k, n, g - 1)], -1.0)],
                              -np.inf, 0.0)
            if n:
                model.row([(used[(k, n, g)], 1.0) for g in range(kind.gpus_per_node)]
                          + [(used[(k, n - 1, g)], -1.0) for g in range(kind.gpus_per_node)],
                          -np.inf, 0.0)
    for shape in shapes:
        model.row(placed[shape], float(demand[shape]), float(demand[shape]))
    solver = model.highs(time_limit, threads)
    start_values, start_gpus = _start_values(model, kinds, start, used, shares, groups)
    solution = highspy.HighsSolution()
    solution.col_value = start_values
    solution.value_valid = True
    solver.setSolution(solution)
    solver.run()
    info = solver.getInfo()
    status = solver.modelStatusToString(solver.getModelStatus())
    incumbent = round(info.objective_function_value)
    # Below the bound's rounding up, nothing: the count of GPUs is a whole number.
    bound = math.ceil(max(info.mip_dual_bound, relaxation) - 1e-6)
    status = "Optimal" if bound >= incumbent else status
    return Solved(incumbent=incumbent, bound=bound, mip_bound=info.mip_dual_bound,
                  relaxation_bound=relaxation, relaxation_status=relaxation_status,
                  start=start_gpus, status=status,
                  gap=(incumbent - bound) / incumbent if incumbent else 0.0,
                  seconds=time.perf_counter() - started, variables=len(model.cost),
                  constraints=len(model.rows_lower))


def _start_values(model: MipModel, kinds: Sequence[NodeKind],
                  start: dict[str, list[list[Counter[Shape]]]],
                  used: dict[tuple[int, int, int], int],
                  shares: dict[tuple[int, int, int, Shape], int],
                  groups: dict[tuple[int, int, Shape], int]) -> tuple[list[float], int]:
    """The start as column values, its GPUs permuted into the order symmetry breaking asks for:
    used GPUs first within a node, nodes of a kind by GPUs used, most first."""
    values = [0.0] * len(model.cost)
    gpus_used = 0
    for k, kind in enumerate(kinds):
        nodes = [sorted(node, key=lambda gpu: not gpu) for node in start.get(kind.name, [])]
        nodes.sort(key=lambda node: -sum(1 for gpu in node if gpu))
        for n, node in enumerate(nodes):
            node_groups: Counter[Shape] = Counter()
            for g, gpu in enumerate(node):
                if gpu:
                    values[used[(k, n, g)]] = 1.0
                    gpus_used += 1
                for shape, count in gpu.items():
                    values[shares[(k, n, g, shape)]] += count
                    node_groups[shape] += count
            for shape, count in node_groups.items():
                if shape.gpus > 1:
                    values[groups[(k, n, shape)]] = count / shape.gpus
    return values, gpus_used
