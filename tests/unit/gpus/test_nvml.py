"""NvmlInventory against the pynvml stand-in (real error classes), and against the real pynvml."""

from __future__ import annotations

import sys
from pathlib import Path

import pynvml
import pytest
from nvml_standin import NvmlStandin, StandinGpu

from control_plane.gpus.nvml import NvmlInventory
from control_plane.gpus.readings import GpuHealth, GpuReading, InventoryUnavailable

GIB = 2**30
A100 = "NVIDIA A100-SXM4-80GB"


def two_gpus() -> list[StandinGpu]:
    return [
        StandinGpu("GPU-aaaa", A100, total=80 * GIB, used=3 * GIB, utilization=17, temperature=41),
        StandinGpu("GPU-bbbb", A100, total=80 * GIB, used=0, utilization=0, temperature=33),
    ]


def test_healthy_gpus_are_read_with_exact_values_in_index_order():
    readings = NvmlInventory(NvmlStandin(two_gpus())).snapshot()
    assert readings == [
        GpuReading(index=0, uuid="GPU-aaaa", name=A100, memory_total_bytes=80 * GIB,
                   memory_used_bytes=3 * GIB, memory_free_bytes=77 * GIB,
                   utilization_percent=17.0, temperature_c=41.0),
        GpuReading(index=1, uuid="GPU-bbbb", name=A100, memory_total_bytes=80 * GIB,
                   memory_used_bytes=0, memory_free_bytes=80 * GIB,
                   utilization_percent=0.0, temperature_c=33.0),
    ]


def test_nvml_is_initialized_once_and_kept_across_snapshots():
    nvml = NvmlStandin(two_gpus())
    inventory = NvmlInventory(nvml)
    inventory.snapshot()
    nvml.gpus[1].used = 5 * GIB
    second = inventory.snapshot()
    assert nvml.init_calls == 1 and nvml.shutdown_calls == 0
    assert second[1].memory_free_bytes == 75 * GIB


def test_driver_not_loaded_is_unavailable_with_the_nvml_error_and_what_to_check():
    nvml = NvmlStandin(two_gpus(), init_errors=[pynvml.NVML_ERROR_DRIVER_NOT_LOADED])
    with pytest.raises(InventoryUnavailable) as raised:
        NvmlInventory(nvml).snapshot()
    message = str(raised.value)
    assert "NVMLError_DriverNotLoaded (Driver Not Loaded)" in message
    assert "kernel driver is not loaded" in message
    assert "nvidia-smi" in message and "--gpus all" in message
    assert isinstance(raised.value.__cause__, pynvml.NVMLError_DriverNotLoaded)


@pytest.mark.parametrize(("code", "named"), [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVMLError_LibraryNotFound"),
    (pynvml.NVML_ERROR_NO_PERMISSION, "NVMLError_NoPermission"),
    (pynvml.NVML_ERROR_UNKNOWN, "NVMLError_Unknown"),
])
def test_every_init_failure_is_unavailable_naming_the_error(code, named):
    nvml = NvmlStandin(two_gpus(), init_errors=[code])
    with pytest.raises(InventoryUnavailable, match=named):
        NvmlInventory(nvml).snapshot()


def test_a_failed_init_is_retried_on_the_next_snapshot():
    nvml = NvmlStandin(two_gpus(), init_errors=[pynvml.NVML_ERROR_DRIVER_NOT_LOADED])
    inventory = NvmlInventory(nvml)
    with pytest.raises(InventoryUnavailable):
        inventory.snapshot()
    assert [gpu.uuid for gpu in inventory.snapshot()] == ["GPU-aaaa", "GPU-bbbb"]
    assert nvml.init_calls == 2


def test_a_driver_lost_after_init_is_unavailable_and_nvml_is_started_again():
    nvml = NvmlStandin(two_gpus())
    inventory = NvmlInventory(nvml)
    inventory.snapshot()
    nvml.count_errors = [pynvml.NVML_ERROR_UNKNOWN]
    with pytest.raises(InventoryUnavailable, match=r"could not count the GPUs: NVMLError_Unknown"):
        inventory.snapshot()
    assert nvml.shutdown_calls == 1
    assert len(inventory.snapshot()) == 2
    assert nvml.init_calls == 2


def test_a_lost_gpu_is_reported_lost_with_unknown_memory_and_the_other_still_read():
    gpus = two_gpus()
    gpus[0].errors = {"nvmlDeviceGetMemoryInfo": pynvml.NVML_ERROR_GPU_IS_LOST}
    lost, healthy = NvmlInventory(NvmlStandin(gpus)).snapshot()
    assert lost.health is GpuHealth.LOST
    assert (lost.index, lost.uuid, lost.name) == (0, "GPU-aaaa", A100)
    assert lost.memory_total_bytes is None
    assert lost.memory_used_bytes is None and lost.memory_free_bytes is None
    assert "NVMLError_GpuIsLost (GPU is lost)" in lost.detail and "Xid" in lost.detail
    assert healthy.health is GpuHealth.OK and healthy.memory_free_bytes == 80 * GIB


def test_a_gpu_lost_while_reading_temperature_is_lost_not_half_read():
    gpus = two_gpus()
    gpus[1].errors = {"nvmlDeviceGetTemperature": pynvml.NVML_ERROR_GPU_IS_LOST}
    readings = NvmlInventory(NvmlStandin(gpus)).snapshot()
    assert readings[1].health is GpuHealth.LOST and readings[1].memory_free_bytes is None
    assert readings[0].health is GpuHealth.OK


def test_another_memory_error_makes_the_gpu_lost_with_the_error_named():
    gpus = two_gpus()
    gpus[1].errors = {"nvmlDeviceGetMemoryInfo": pynvml.NVML_ERROR_UNKNOWN}
    reading = NvmlInventory(NvmlStandin(gpus)).snapshot()[1]
    assert reading.health is GpuHealth.LOST and reading.memory_free_bytes is None
    assert "NVMLError_Unknown" in reading.detail and "nvidia-smi -i 1" in reading.detail


def test_a_gpu_whose_handle_cannot_be_had_is_lost_without_a_uuid():
    gpus = two_gpus()
    gpus[0].errors = {"nvmlDeviceGetHandleByIndex": pynvml.NVML_ERROR_GPU_IS_LOST}
    reading = NvmlInventory(NvmlStandin(gpus)).snapshot()[0]
    assert (reading.index, reading.uuid, reading.health) == (0, "", GpuHealth.LOST)


def test_unsupported_utilization_and_temperature_are_none_and_the_gpu_stays_ok():
    gpus = two_gpus()
    gpus[0].errors = {"nvmlDeviceGetUtilizationRates": pynvml.NVML_ERROR_NOT_SUPPORTED,
                      "nvmlDeviceGetTemperature": pynvml.NVML_ERROR_NOT_SUPPORTED}
    reading = NvmlInventory(NvmlStandin(gpus)).snapshot()[0]
    assert reading.health is GpuHealth.OK and reading.detail == ""
    assert reading.utilization_percent is None and reading.temperature_c is None
    assert reading.memory_free_bytes == 77 * GIB


def test_bytes_uuids_and_names_from_older_pynvml_are_decoded():
    gpus = [StandinGpu(b"GPU-cccc", b"Tesla T4", total=16 * GIB, used=GIB)]
    (reading,) = NvmlInventory(NvmlStandin(gpus)).snapshot()
    assert (reading.uuid, reading.name) == ("GPU-cccc", "Tesla T4")


def test_a_machine_without_gpus_has_an_empty_inventory():
    assert NvmlInventory(NvmlStandin([])).snapshot() == []


def test_real_pynvml_without_a_driver_is_unavailable_naming_the_nvml_error():
    # The kernel driver publishes this file; with it loaded, NVML may well start.
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("an NVIDIA driver is loaded on this machine")
    with pytest.raises(InventoryUnavailable,
                       match=r"NVML did not start: NVMLError_\w+ \(") as raised:
        NvmlInventory().snapshot()
    assert isinstance(raised.value.__cause__, pynvml.NVMLError)


def test_without_nvidia_ml_py_installed_the_inventory_is_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # how Python marks a module unimportable
    with pytest.raises(InventoryUnavailable, match=r"pip install nvidia-ml-py"):
        NvmlInventory().snapshot()
