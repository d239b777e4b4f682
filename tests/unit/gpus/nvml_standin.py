"""A stand-in for the ``pynvml`` module, the one stand-in of this project (there is no GPU here).

It serves fixed GPUs through the calls NvmlInventory makes, and raises the real package's error
classes and returns its real ctypes structures, so the error mapping is tested against what
nvidia-ml-py really raises.
"""

from __future__ import annotations

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
    # Call name (e.g. "nvmlDeviceGetMemoryInfo") -> NVML error code that call returns.
    errors: dict[str, int] = field(default_factory=dict)


class NvmlStandin(ModuleType):
    """Answers like libnvidia-ml with these GPUs; ``init_errors`` fail the next nvmlInit calls."""

    def __init__(self, gpus: list[StandinGpu], init_errors: list[int] | None = None) -> None:
        super().__init__("pynvml")
        for name in dir(pynvml):
            if name.startswith(("NVMLError", "NVML_")):
                setattr(self, name, getattr(pynvml, name))
        self.gpus = gpus
        self.init_errors = list(init_errors or [])
        self.count_errors: list[int] = []
        self.init_calls = 0
        self.shutdown_calls = 0
        self.initialized = False

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

    def nvmlDeviceGetHandleByIndex(self, index: int) -> StandinGpu:
        self._check_initialized()
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._call(self.gpus[index], "nvmlDeviceGetHandleByIndex")

    def nvmlDeviceGetUUID(self, handle: StandinGpu) -> str | bytes:
        return self._call(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle: StandinGpu) -> str | bytes:
        return self._call(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetMemoryInfo(self, handle: StandinGpu) -> pynvml.c_nvmlMemory_t:
        gpu = self._call(handle, "nvmlDeviceGetMemoryInfo")
        return pynvml.c_nvmlMemory_t(total=gpu.total, free=gpu.total - gpu.used, used=gpu.used)

    def nvmlDeviceGetUtilizationRates(self, handle: StandinGpu) -> pynvml.c_nvmlUtilization_t:
        gpu = self._call(handle, "nvmlDeviceGetUtilizationRates")
        return pynvml.c_nvmlUtilization_t(gpu=gpu.utilization, memory=0)

    def nvmlDeviceGetTemperature(self, handle: StandinGpu, sensor: int) -> int:
        gpu = self._call(handle, "nvmlDeviceGetTemperature")
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature

    def _call(self, gpu: StandinGpu, call: str) -> StandinGpu:
        self._check_initialized()
        if call in gpu.errors:
            raise pynvml.NVMLError(gpu.errors[call])
        return gpu

    def _check_initialized(self) -> None:
        if not self.initialized:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
