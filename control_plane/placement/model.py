"""What placement decides over and what it answers: plain values, no I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple, overload

from control_plane.gpus.readings import GpuReading


class Device(StrEnum):
    GPU = "gpu"
    CPU = "cpu"


class Strategy(StrEnum):
    # Pack engines onto few GPUs: fill GPUs in use first, tightest first (see ``scorers``).
    BEST_FIT = "best_fit"
    # Use the GPU that will have the most memory left: less contention between engines.
    SPREAD = "spread"


@dataclass(frozen=True)
class NodeView:
    """One node as placement sees it: its latest readings, or why there are none."""

    name: str
    gpus: tuple[GpuReading, ...] = ()
    # Set when the inventory could not be read; the node is then refused as a whole.
    error: str | None = None
    # GPUs (by UUID) an operator took out of placement.
    excluded_gpus: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Reservation:
    """Memory booked on one GPU for one engine of one deployment version."""

    node: str
    gpu_uuid: str
    bytes: int
    # Who holds it, "<model>/<alias>@<node>:v<number>": the replicas of one deployment version
    # share a holder, which is what anti-affinity keeps apart.
    holder: str
    # The engine is loaded, so its memory is already part of the GPU's "used" reading.
    active: bool = False


@dataclass(frozen=True)
class PlacementRequest:
    holder: str
    device: Device
    # What one engine needs on each of its GPUs (the estimate divided by tensor parallelism).
    bytes_per_gpu: int
    tensor_parallel_size: int = 1
    # Engines of this deployment version on one node, each on its own GPUs (anti-affinity).
    replicas: int = 1
    # Only these nodes (a deployment names its node); None: any node.
    nodes: tuple[str, ...] | None = None
    # Fraction of each GPU's total memory never booked: CUDA context, fragmentation, other users.
    headroom_fraction: float = 0.05
    strategy: Strategy = Strategy.BEST_FIT


# A named tuple, not a frozen dataclass: a decision at peak creates about a thousand of these, and
# a frozen dataclass's __init__ (one object.__setattr__ per field) cost a millisecond of them.
class Verdict(NamedTuple):
    """Why one GPU (or, with no GPU named, one whole node) was not used."""

    node: str
    rule: str
    detail: str
    gpu_index: int | None = None
    gpu_uuid: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "gpu_index": self.gpu_index, "gpu_uuid": self.gpu_uuid,
                "rule": self.rule, "detail": self.detail}


class DeferredVerdicts(Sequence[Verdict]):
    """Verdicts worked out when first read, then kept; equal to the tuple of them.

    A placement passes over most of a busy fleet's GPUs, and explaining each (a verdict with its
    numbers, a thousand per decision) cost more than the decision itself, while only a preview
    reads them (issue 16). ``explain`` must read only what cannot change after the decision.
    """

    __slots__ = ("_explain", "_verdicts")

    def __init__(self, explain: Callable[[], Sequence[Verdict]]) -> None:
        self._explain: Callable[[], Sequence[Verdict]] | None = explain
        self._verdicts: tuple[Verdict, ...] = ()

    def _worked_out(self) -> tuple[Verdict, ...]:
        if self._explain is not None:
            # Dropping the function once called lets what it kept alive go.
            self._verdicts, self._explain = tuple(self._explain()), None
        return self._verdicts

    @overload
    def __getitem__(self, index: int) -> Verdict: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Verdict, ...]: ...

    def __getitem__(self, index: int | slice) -> Verdict | tuple[Verdict, ...]:
        return self._worked_out()[index]

    def __len__(self) -> int:
        return len(self._worked_out())

    def __iter__(self) -> Iterator[Verdict]:
        return iter(self._worked_out())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DeferredVerdicts):
            other = other._worked_out()
        return isinstance(other, tuple) and self._worked_out() == other

    def __hash__(self) -> int:
        return hash(self._worked_out())

    def __repr__(self) -> str:
        return repr(self._worked_out())


@dataclass(frozen=True)
class Placement:
    node: str
    device: Device
    # One tuple of GPU indexes per engine (replica); empty for the CPU.
    engines: tuple[tuple[int, ...], ...]
    tensor_parallel_size: int
    # vLLM's gpu_memory_utilization for each engine: a fraction of the whole GPU, set so that the
    # engines on one GPU sum to what the GPU can hold. None on the CPU.
    gpu_memory_utilization: float | None
    # What to book, one per (engine, GPU).
    reservations: tuple[Reservation, ...]
    score: float = 0.0
    # GPUs considered and passed over, and why: shown by the preview (a tuple, or verdicts
    # worked out when first read).
    passed_over: Sequence[Verdict] = ()

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(index for engine in self.engines for index in engine)


@dataclass(frozen=True)
class Refusal:
    summary: str
    # Every GPU (and node) considered, with the rule it failed; never empty.
    verdicts: tuple[Verdict, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "verdicts": [v.as_dict() for v in self.verdicts]}
