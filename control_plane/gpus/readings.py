"""One reading of one GPU, and the protocol every inventory source implements.

A reading that could not be taken is reported as such (``health`` and ``detail``), never as a GPU
with zero free memory: placement must tell "full" from "unknown".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

# nvidia-smi and the static inventory files count memory in MiB; readings count bytes.
MIB = 2**20


class GpuHealth(StrEnum):
    OK = "ok"
    # Readable, but reports a fault (an XID error, a retired-page or ECC failure, throttled off).
    UNHEALTHY = "unhealthy"
    # Present in the inventory but unreadable now (NVML's GPU_IS_LOST, a metric series missing).
    LOST = "lost"


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment. Memory is in bytes; ``None`` means "could not be read" and only
    appears when ``health`` is not OK."""

    index: int
    uuid: str
    name: str
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    memory_free_bytes: int | None
    utilization_percent: float | None = None
    temperature_c: float | None = None
    health: GpuHealth = GpuHealth.OK
    detail: str = ""


class InventoryUnavailable(Exception):
    """The whole inventory could not be read (no driver, NVML not installed, the node's metrics
    endpoint did not answer, the file is missing or malformed); the message says which."""


class GpuInventory(Protocol):
    """Where a node's GPU readings come from."""

    def snapshot(self) -> list[GpuReading]:
        """Every GPU of the node, ordered by index; raises InventoryUnavailable."""
        ...
