"""The GPUs of the machine the control plane runs on, read through NVML (nvidia-ml-py).

``pynvml`` is imported on the first snapshot, not at import time, so the control plane imports and
runs on machines without it (they use the Triton-metrics or static inventories instead). A GPU
NVML can read is OK unless its fault signals (nvml_health) report a fault: then it is UNHEALTHY.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from types import ModuleType
from typing import Any

from control_plane.gpus.nvml_health import XidWatch, gpu_faults, nvml_text
from control_plane.gpus.readings import GpuHealth, GpuReading, InventoryUnavailable

_CHECK = ("check that the NVIDIA driver is installed and loaded (`nvidia-smi` works on the host) "
          "and, in a container, that it was started with GPUs (`--gpus all` or the NVIDIA "
          "container runtime)")

# What nvmlInit's usual failures mean, by the class name pynvml gives each NVML error code.
_INIT_HINTS = {
    "NVMLError_LibraryNotFound": "libnvidia-ml.so.1 is not on this machine or not in the "
                                 "container",
    "NVMLError_DriverNotLoaded": "the NVIDIA kernel driver is not loaded",
    "NVMLError_NoPermission": "this user may not open /dev/nvidia*",
    "NVMLError_LibRmVersionMismatch": "the NVML library and the kernel driver are different "
                                      "versions (reboot after a driver upgrade)",
}


class NvmlInventory:
    """This machine's GPUs through NVML, which stays initialized between snapshots."""

    def __init__(self, nvml: ModuleType | None = None, xid_hold_seconds: float = 3600.0,
                 clock: Callable[[], float] = time.time) -> None:
        # A module given here is used as is (tests pass a stand-in); None means `import pynvml`.
        self._nvml = nvml
        self._initialized = False
        self._xids = XidWatch(xid_hold_seconds, clock)
        # NVML calls are thread-safe, but init/shutdown bookkeeping is ours to guard.
        self._lock = threading.Lock()

    def snapshot(self) -> list[GpuReading]:
        """Every GPU, ordered by NVML index; raises InventoryUnavailable if NVML cannot start."""
        with self._lock:
            nvml = self._started()
            try:
                count = int(nvml.nvmlDeviceGetCount())
            except nvml.NVMLError as error:
                # The driver went away under a running NVML (unloaded, devices taken from the
                # container): shut down so that the next snapshot initializes afresh.
                self._shutdown(nvml)
                raise InventoryUnavailable(
                    f"NVML could not count the GPUs: {_describe(error)}; {_CHECK}") from error
            readings = [_read_gpu(nvml, index, self._xids) for index in range(count)]
            # Drained after the reads, so that every Xid up to now counts, even on a GPU that
            # was registered for events just now.
            self._xids.drain(nvml)
            return [_with_faults(reading, self._xids.faults(reading.uuid, reading.index))
                    for reading in readings]

    def _started(self) -> Any:
        nvml = self._module()
        if not self._initialized:
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as error:
                hint = _INIT_HINTS.get(type(error).__name__)
                raise InventoryUnavailable(
                    f"NVML did not start: {_describe(error)}"
                    f"{f' ({hint})' if hint else ''}; {_CHECK}") from error
            self._initialized = True
            self._xids.open(nvml)
        return nvml

    def _module(self) -> ModuleType:
        if self._nvml is None:
            try:
                self._nvml = importlib.import_module("pynvml")
            except ImportError as error:
                raise InventoryUnavailable(
                    f"cannot read GPUs through NVML: `import pynvml` failed ({error}); install "
                    f"nvidia-ml-py (`pip install nvidia-ml-py`), or use the Triton-metrics or "
                    f"static inventory on machines without NVIDIA GPUs") from error
        return self._nvml

    def _shutdown(self, nvml: Any) -> None:
        self._initialized = False
        self._xids.close(nvml)
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass  # NVML is already unusable; the next nvmlInit reports why, if it still is


def _describe(error: BaseException) -> str:
    """An NVML error as its pynvml class and NVML's text: ``NVMLError_GpuIsLost (GPU is lost)``."""
    return f"{type(error).__name__} ({error})"


def _read_gpu(nvml: Any, index: int, xids: XidWatch) -> GpuReading:
    uuid = name = ""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = nvml_text(nvml.nvmlDeviceGetUUID(handle))
        name = nvml_text(nvml.nvmlDeviceGetName(handle))
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        utilization = _optional(nvml, lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        temperature = _optional(
            nvml, lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
        faults = gpu_faults(nvml, handle, index)
        xids.watch(nvml, handle, uuid)
    except nvml.NVMLError as error:
        # Unreadable memory is "unknown", never "0 free": placement must skip the GPU, not fill it.
        return GpuReading(index=index, uuid=uuid, name=name, memory_total_bytes=None,
                          memory_used_bytes=None, memory_free_bytes=None, health=GpuHealth.LOST,
                          detail=_lost_detail(nvml, error, index))
    return _with_faults(
        GpuReading(index=index, uuid=uuid, name=name, memory_total_bytes=int(memory.total),
                   memory_used_bytes=int(memory.used), memory_free_bytes=int(memory.free),
                   utilization_percent=utilization, temperature_c=temperature), faults)


def _with_faults(reading: GpuReading, faults: list[str]) -> GpuReading:
    """The reading UNHEALTHY with its faults named, unless it has none; a LOST one stays LOST."""
    if not faults:
        return reading
    return replace(reading,
                   health=GpuHealth.UNHEALTHY if reading.health is GpuHealth.OK else reading.health,
                   detail="; ".join([reading.detail, *faults] if reading.detail else faults))


def _optional(nvml: Any, read: Callable[[], Any]) -> float | None:
    """A reading many GPUs do not support (NVMLError_NotSupported): None, the GPU stays OK."""
    try:
        return float(read())
    except nvml.NVMLError_GpuIsLost:
        raise
    except nvml.NVMLError:
        return None


def _lost_detail(nvml: Any, error: BaseException, index: int) -> str:
    if isinstance(error, nvml.NVMLError_GpuIsLost):
        return (f"NVML reports the GPU lost: {_describe(error)}; it has fallen off the bus or "
                f"needs a reset: check `nvidia-smi -i {index}` and the kernel log for Xid errors")
    return (f"NVML could not read the GPU: {_describe(error)}; check `nvidia-smi -i {index}`")
