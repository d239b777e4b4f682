"""The placement rules, one per module, in the order they are checked.

Each rule has a ``name`` (shown in refusals), a ``description`` (one sentence for the docs) and a
``check`` that returns None when the node or GPU passes, or a detail saying what was wrong, with
numbers. A GPU or node is reported with the first rule it fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from control_plane.gpus.readings import GpuReading
from control_plane.placement.accounting import GpuBook
from control_plane.placement.filters.anti_affinity import AntiAffinity
from control_plane.placement.filters.fits_memory import FitsMemory
from control_plane.placement.filters.gpu_healthy import GpuHealthy
from control_plane.placement.filters.gpu_not_excluded import GpuNotExcluded
from control_plane.placement.filters.inventory_readable import InventoryReadable
from control_plane.placement.filters.node_allowed import NodeAllowed
from control_plane.placement.filters.tensor_parallel import TensorParallel
from control_plane.placement.model import NodeView, PlacementRequest


class Rule(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...


class NodeFilter(Rule, Protocol):
    def check(self, request: PlacementRequest, node: NodeView) -> str | None: ...


class GpuFilter(Rule, Protocol):
    def check(self, request: PlacementRequest, node: NodeView, gpu: GpuReading,
              book: GpuBook) -> str | None: ...


class CapacityFilter(Rule, Protocol):
    def check(self, request: PlacementRequest, node: NodeView,
              passing: Sequence[GpuReading]) -> str | None: ...


INVENTORY_READABLE = InventoryReadable()
NODE_ALLOWED = NodeAllowed()
# Checked before the node's GPUs are looked at. The CPU device checks NODE_ALLOWED only.
NODE_FILTERS: tuple[NodeFilter, ...] = (NODE_ALLOWED, INVENTORY_READABLE)
# Cheapest and most telling first: an operator's exclusion explains more than "does not fit".
GPU_FILTERS: tuple[GpuFilter, ...] = (GpuNotExcluded(), GpuHealthy(), AntiAffinity(), FitsMemory())
# The first GPU rules read only the node's readings, never the request or the bookings (a test
# holds them to it): a kept FleetState checks them once per reading, not once per decision.
READING_GPU_FILTERS: tuple[GpuFilter, ...] = GPU_FILTERS[:2]
# The rest, checked per decision.
BOOKING_GPU_FILTERS: tuple[GpuFilter, ...] = GPU_FILTERS[2:]
# Checked on the GPUs that passed GPU_FILTERS.
CAPACITY_FILTERS: tuple[CapacityFilter, ...] = (TensorParallel(),)

RULES: tuple[Rule, ...] = (*NODE_FILTERS, *GPU_FILTERS, *CAPACITY_FILTERS)
RULE_NAMES: frozenset[str] = frozenset(rule.name for rule in RULES)

__all__ = [
    "BOOKING_GPU_FILTERS",
    "CAPACITY_FILTERS",
    "GPU_FILTERS",
    "INVENTORY_READABLE",
    "NODE_ALLOWED",
    "NODE_FILTERS",
    "READING_GPU_FILTERS",
    "RULES",
    "RULE_NAMES",
    "CapacityFilter",
    "GpuFilter",
    "NodeFilter",
    "Rule",
]
