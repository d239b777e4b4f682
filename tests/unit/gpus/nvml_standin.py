"""A stand-in for the ``pynvml`` module, the one stand-in of this project (there is no GPU here).

It serves fixed GPUs through the calls NvmlInventory makes, and raises the real package's error
classes and returns its real ctypes structures (device handles and event sets are ctypes pointers,
events are ``c_nvmlEventData_t``), so the error mapping is tested against what nvidia-ml-py really
raises and returns.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from types import ModuleType

import pynvml


@dataclass
class StandinGpu:
    uuid: str | bytes
    name: str | bytes
    total: int
    used: int
    utilization: int = 0
    temperature: int = 35
    # Health signals: volatile uncorrected ECC errors, whether retired pages await a reset,
    # nvmlDeviceGetRemappedRows' (corrected, uncorrected, pending, failure), and the clock event
    # reasons bitmask (nvmlClocksThrottleReason* bits).
    ecc_uncorrected: int = 0
    retired_pages_pending: bool = False
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    clock_event_reasons: int = 0
    # Xid numbers queued for this GPU, delivered in order through the event sets it is registered
    # on for nvmlEventTypeXidCriticalError.
    xids: list[int] = field(default_factory=list)
    # Call name (e.g. "nvmlDeviceGetMemoryInfo") -> NVML error code that call returns.
    errors: dict[str, int] = field(default_factory=dict)


class NvmlStandin(ModuleType):
    """Answers like libnvidia-ml with these GPUs; ``init_errors`` fail the next nvmlInit calls,
    ``event_set_errors`` the next nvmlEventSetCreate calls, ``wait_errors`` the next
    nvmlEventSetWait_v2 calls."""

    def __init__(self, gpus: list[StandinGpu], init_errors: list[int] | None = None) -> None:
        super().__init__("pynvml")
        for name in dir(pynvml):
            if name.startswith(("NVMLError", "NVML_", "nvmlClocks", "nvmlEventType")):
                setattr(self, name, getattr(pynvml, name))
        self.gpus = gpus
        self.init_errors = list(init_errors or [])
        self.count_errors: list[int] = []
        self.event_set_errors: list[int] = []
        self.wait_errors: list[int] = []
        self.init_calls = 0
        self.shutdown_calls = 0
        self.initialized = False
        # Live event sets: set address -> indices of the GPUs registered on it for Xid events.
        self.event_sets: dict[int, list[int]] = {}
        self.wait_timeouts_ms: list[int] = []
        # One opaque device per index: handles point at it, as libnvidia-ml's point at its own.
        self._devices: dict[int, pynvml.struct_c_nvmlDevice_t] = {}
        self._sets: list[pynvml.struct_c_nvmlEventSet_t] = []

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_errors:
            raise pynvml.NVMLError(self.init_errors.pop(0))
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1
        self._check_initialized()
        self.initialized = False

    def nvmlDeviceGetCount(self) -> int:
        self._check_initialized()
        if self.count_errors:
            raise pynvml.NVMLError(self.count_errors.pop(0))
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> pynvml.c_nvmlDevice_t:
        self._check_initialized()
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if "nvmlDeviceGetHandleByIndex" in self.gpus[index].errors:
            raise pynvml.NVMLError(self.gpus[index].errors["nvmlDeviceGetHandleByIndex"])
        device = self._devices.setdefault(index, pynvml.struct_c_nvmlDevice_t())
        return ctypes.pointer(device)

    def nvmlDeviceGetUUID(self, handle: pynvml.c_nvmlDevice_t) -> str | bytes:
        return self._call(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle: pynvml.c_nvmlDevice_t) -> str | bytes:
        return self._call(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetMemoryInfo(self, handle: pynvml.c_nvmlDevice_t) -> pynvml.c_nvmlMemory_t:
        gpu = self._call(handle, "nvmlDeviceGetMemoryInfo")
        return pynvml.c_nvmlMemory_t(total=gpu.total, free=gpu.total - gpu.used, used=gpu.used)

    def nvmlDeviceGetUtilizationRates(
            self, handle: pynvml.c_nvmlDevice_t) -> pynvml.c_nvmlUtilization_t:
        gpu = self._call(handle, "nvmlDeviceGetUtilizationRates")
        return pynvml.c_nvmlUtilization_t(gpu=gpu.utilization, memory=0)

    def nvmlDeviceGetTemperature(self, handle: pynvml.c_nvmlDevice_t, sensor: int) -> int:
        gpu = self._call(handle, "nvmlDeviceGetTemperature")
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature

    def nvmlDeviceGetTotalEccErrors(self, handle: pynvml.c_nvmlDevice_t, error_type: int,
                                    counter_type: int) -> int:
        gpu = self._call(handle, "nvmlDeviceGetTotalEccErrors")
        # Only the counter the GPUs here model; asking for another is a bug in the caller.
        if (error_type, counter_type) != (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                          pynvml.NVML_VOLATILE_ECC):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.ecc_uncorrected

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: pynvml.c_nvmlDevice_t) -> int:
        gpu = self._call(handle, "nvmlDeviceGetRetiredPagesPendingStatus")
        return pynvml.NVML_FEATURE_ENABLED if gpu.retired_pages_pending \
            else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetRemappedRows(self, handle: pynvml.c_nvmlDevice_t
                                  ) -> tuple[int, int, int, int]:
        return self._call(handle, "nvmlDeviceGetRemappedRows").remapped_rows

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: pynvml.c_nvmlDevice_t) -> int:
        return self._call(handle, "nvmlDeviceGetCurrentClocksEventReasons").clock_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: pynvml.c_nvmlDevice_t) -> int:
        return self._call(handle,
                          "nvmlDeviceGetCurrentClocksThrottleReasons").clock_event_reasons

    def nvmlEventSetCreate(self) -> pynvml.c_nvmlEventSet_t:
        self._check_initialized()
        if self.event_set_errors:
            raise pynvml.NVMLError(self.event_set_errors.pop(0))
        self._sets.append(pynvml.struct_c_nvmlEventSet_t())
        event_set = ctypes.pointer(self._sets[-1])
        self.event_sets[_address(event_set)] = []
        return event_set

    def nvmlDeviceRegisterEvents(self, handle: pynvml.c_nvmlDevice_t, event_types: int,
                                 event_set: pynvml.c_nvmlEventSet_t) -> None:
        index = self._index(handle, "nvmlDeviceRegisterEvents")
        registered = self._live(event_set)
        if event_types & pynvml.nvmlEventTypeXidCriticalError:
            registered.append(index)

    def nvmlEventSetWait_v2(self, event_set: pynvml.c_nvmlEventSet_t,
                            timeout_ms: int) -> pynvml.c_nvmlEventData_t:
        registered = self._live(event_set)
        self.wait_timeouts_ms.append(timeout_ms)
        if self.wait_errors:
            raise pynvml.NVMLError(self.wait_errors.pop(0))
        for index in registered:
            if self.gpus[index].xids:
                return pynvml.c_nvmlEventData_t(
                    device=ctypes.pointer(self._devices[index]),
                    eventType=pynvml.nvmlEventTypeXidCriticalError,
                    eventData=self.gpus[index].xids.pop(0))
        # The stand-in cannot wait for events to come: it answers as if the wait ran out.
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: pynvml.c_nvmlEventSet_t) -> None:
        self._live(event_set)
        del self.event_sets[_address(event_set)]

    def _live(self, event_set: pynvml.c_nvmlEventSet_t) -> list[int]:
        self._check_initialized()
        if _address(event_set) not in self.event_sets:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.event_sets[_address(event_set)]

    def _call(self, handle: pynvml.c_nvmlDevice_t, call: str) -> StandinGpu:
        return self.gpus[self._index(handle, call)]

    def _index(self, handle: pynvml.c_nvmlDevice_t, call: str) -> int:
        """The index of the GPU the handle points at, after raising the error set for ``call``."""
        self._check_initialized()
        index = next((index for index, device in self._devices.items()
                      if ctypes.addressof(device) == _address(handle)), None)
        if index is None or index >= len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if call in self.gpus[index].errors:
            raise pynvml.NVMLError(self.gpus[index].errors[call])
        return index

    def _check_initialized(self) -> None:
        if not self.initialized:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)


def _address(pointer: pynvml.c_nvmlDevice_t | pynvml.c_nvmlEventSet_t) -> int | None:
    return ctypes.cast(pointer, ctypes.c_void_p).value
