"""NVML's fault signals through NvmlInventory, against the pynvml stand-in (real error classes)."""

from __future__ import annotations

import pynvml
import pytest
from nvml_standin import NvmlStandin, StandinGpu

from control_plane.gpus.nvml import NvmlInventory
from control_plane.gpus.readings import GpuHealth, InventoryUnavailable

GIB = 2**30
HOUR = 3600.0
T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def two_gpus() -> list[StandinGpu]:
    return [StandinGpu("GPU-aaaa", "NVIDIA A100", total=80 * GIB, used=GIB),
            StandinGpu("GPU-bbbb", "NVIDIA A100", total=80 * GIB, used=0)]


def read(gpus: list[StandinGpu]):
    return NvmlInventory(NvmlStandin(gpus)).snapshot()


@pytest.mark.parametrize(("signal", "fault"), [
    ({"ecc_uncorrected": 2},
     ("uncorrectable ECC errors: 2 since the driver loaded, drain the GPU and reset it "
      "(`nvidia-smi -r -i 0` with nothing running on it)")),
    ({"retired_pages_pending": True},
     ("retired pages pending: pages with ECC errors are retired only when the GPU is reset, "
      "reset it (`nvidia-smi -r -i 0`")),
    ({"remapped_rows": (7, 1, 0, 1)},
     ("row remapping failed: the GPU has no spare memory rows left for its ECC errors, replace "
      "the GPU")),
    ({"remapped_rows": (7, 1, 1, 0)},
     ("row remapping pending: rows with ECC errors are remapped only when the GPU is reset, "
      "reset it (`nvidia-smi -r -i 0`")),
    ({"clock_event_reasons": pynvml.nvmlClocksThrottleReasonHwSlowdown},
     "clocks slowed by hardware slowdown: "),
    ({"clock_event_reasons": pynvml.nvmlClocksThrottleReasonHwThermalSlowdown},
     "clocks slowed by hardware thermal slowdown: "),
    ({"clock_event_reasons": pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown},
     ("clocks slowed by hardware power brake slowdown: the GPU is protecting itself from heat or "
      "a power fault, check its cooling and power supply (`nvidia-smi -q -d PERFORMANCE -i 0`)")),
])
def test_each_signal_alone_makes_the_gpu_unhealthy_naming_the_fault_and_what_to_do(signal, fault):
    gpus = two_gpus()
    for name, value in signal.items():
        setattr(gpus[0], name, value)
    faulty, healthy = read(gpus)
    assert faulty.health is GpuHealth.UNHEALTHY
    assert faulty.detail.startswith(fault)
    assert ";" not in faulty.detail  # one fault, one clause
    assert faulty.memory_free_bytes == 79 * GIB  # still read: only placement skips it
    assert (healthy.health, healthy.detail) == (GpuHealth.OK, "")


def test_clock_reasons_that_are_not_hardware_slowdown_leave_the_gpu_ok():
    gpus = two_gpus()
    gpus[0].clock_event_reasons = (pynvml.nvmlClocksThrottleReasonGpuIdle
                                   | pynvml.nvmlClocksThrottleReasonSwPowerCap
                                   | pynvml.nvmlClocksThrottleReasonSwThermalSlowdown
                                   | pynvml.nvmlClocksThrottleReasonApplicationsClocksSetting)
    gpus[0].remapped_rows = (12, 0, 0, 0)  # corrected rows are the remapper doing its job
    assert read(gpus)[0].health is GpuHealth.OK


def test_several_faults_at_once_are_all_named_in_one_detail():
    gpus = two_gpus()
    gpus[1].ecc_uncorrected = 1
    gpus[1].retired_pages_pending = True
    gpus[1].remapped_rows = (0, 3, 1, 1)
    gpus[1].clock_event_reasons = (pynvml.nvmlClocksThrottleReasonHwSlowdown
                                   | pynvml.nvmlClocksThrottleReasonHwThermalSlowdown
                                   | pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown)
    reading = read(gpus)[1]
    assert reading.health is GpuHealth.UNHEALTHY
    clauses = reading.detail.split("; ")
    assert [clause.split(":")[0] for clause in clauses] == [
        "uncorrectable ECC errors", "retired pages pending", "row remapping failed",
        "row remapping pending",
        ("clocks slowed by hardware slowdown, hardware thermal slowdown, hardware power brake "
         "slowdown")]
    assert all("nvidia-smi -r -i 1" in clause for clause in clauses[:2] + clauses[3:4])


SIGNAL_CALLS = ["nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRetiredPagesPendingStatus",
                "nvmlDeviceGetRemappedRows", "nvmlDeviceGetCurrentClocksEventReasons"]


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_UNKNOWN,
                                  pynvml.NVML_ERROR_NO_PERMISSION])
def test_signals_a_gpu_cannot_give_are_skipped_and_it_stays_ok(code):
    gpus = two_gpus()
    gpus[0].errors = dict.fromkeys(SIGNAL_CALLS + ["nvmlDeviceGetCurrentClocksThrottleReasons",
                                                   "nvmlDeviceRegisterEvents"], code)
    reading = read(gpus)[0]
    assert (reading.health, reading.detail) == (GpuHealth.OK, "")


@pytest.mark.parametrize("unsupported", SIGNAL_CALLS)
def test_one_unsupported_signal_does_not_hide_the_others(unsupported):
    gpus = two_gpus()
    gpus[0].ecc_uncorrected = 1
    gpus[0].retired_pages_pending = True
    gpus[0].remapped_rows = (0, 0, 1, 0)
    gpus[0].clock_event_reasons = pynvml.nvmlClocksThrottleReasonHwThermalSlowdown
    gpus[0].errors = {unsupported: pynvml.NVML_ERROR_NOT_SUPPORTED}
    reading = read(gpus)[0]
    assert reading.health is GpuHealth.UNHEALTHY
    assert len(reading.detail.split("; ")) == 3


@pytest.mark.parametrize("call", SIGNAL_CALLS)
def test_a_gpu_lost_while_reading_a_signal_is_lost(call):
    gpus = two_gpus()
    gpus[0].errors = {call: pynvml.NVML_ERROR_GPU_IS_LOST}
    lost, healthy = read(gpus)
    assert lost.health is GpuHealth.LOST and lost.memory_free_bytes is None
    assert "NVMLError_GpuIsLost" in lost.detail
    assert healthy.health is GpuHealth.OK


def test_a_driver_before_535_answers_the_older_clock_reasons_call():
    gpus = two_gpus()
    gpus[0].clock_event_reasons = pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown
    gpus[0].errors = {"nvmlDeviceGetCurrentClocksEventReasons":
                      pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
    assert "hardware power brake slowdown" in read(gpus)[0].detail


def test_bindings_without_the_clock_event_reasons_call_use_the_older_one(monkeypatch):
    monkeypatch.delattr(NvmlStandin, "nvmlDeviceGetCurrentClocksEventReasons")
    gpus = two_gpus()
    gpus[1].clock_event_reasons = pynvml.nvmlClocksThrottleReasonHwSlowdown
    assert "clocks slowed by hardware slowdown" in read(gpus)[1].detail


# Xid events ---------------------------------------------------------------------------------


def watched(gpus: list[StandinGpu], hold: float = HOUR) -> tuple[NvmlStandin, NvmlInventory,
                                                                   Clock]:
    nvml, clock = NvmlStandin(gpus), Clock()
    return nvml, NvmlInventory(nvml, xid_hold_seconds=hold, clock=clock), clock


@pytest.mark.parametrize("xid", [48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140])
def test_a_hardware_xid_makes_only_the_gpu_it_names_unhealthy(xid):
    gpus = two_gpus()
    gpus[1].xids = [xid]
    _, inventory, _ = watched(gpus)
    other, named = inventory.snapshot()
    assert named.health is GpuHealth.UNHEALTHY
    assert named.detail.startswith(f"hardware Xid {xid} (")
    assert "at 2023-11-14T22:13:20Z, unhealthy until 2023-11-14T23:13:20Z" in named.detail
    assert "nvidia-smi -r -i 1" in named.detail and "dmesg" in named.detail
    assert (other.health, other.detail) == (GpuHealth.OK, "")


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 68, 109])
def test_an_application_xid_leaves_the_gpu_ok(xid):
    gpus = two_gpus()
    gpus[0].xids = [xid]
    _, inventory, _ = watched(gpus)
    assert [reading.health for reading in inventory.snapshot()] == [GpuHealth.OK] * 2
    assert gpus[0].xids == []  # drained all the same


def test_a_hardware_xid_counts_until_the_hold_after_the_last_one_has_passed():
    gpus = two_gpus()
    gpus[0].xids = [79]
    _, inventory, clock = watched(gpus, hold=HOUR)
    assert inventory.snapshot()[0].health is GpuHealth.UNHEALTHY
    clock.now = T0 + HOUR / 2
    gpus[0].xids = [48]
    detail = inventory.snapshot()[0].detail
    assert detail.startswith("hardware Xid 48 (double-bit ECC error) at 2023-11-14T22:43:20Z, "
                             "Xid 79 (GPU has fallen off the bus) at 2023-11-14T22:13:20Z, "
                             "unhealthy until 2023-11-14T23:43:20Z:")
    clock.now = T0 + HOUR  # 79's hold is over, 48's is not
    reading = inventory.snapshot()[0]
    assert reading.health is GpuHealth.UNHEALTHY
    assert "Xid 48" in reading.detail and "Xid 79" not in reading.detail
    clock.now = T0 + HOUR * 1.5
    assert inventory.snapshot()[0].health is GpuHealth.OK


def test_an_xid_and_a_signal_are_both_named():
    gpus = two_gpus()
    gpus[0].xids = [95]
    gpus[0].ecc_uncorrected = 4
    _, inventory, _ = watched(gpus)
    clauses = inventory.snapshot()[0].detail.split("; ")
    assert clauses[0].startswith("uncorrectable ECC errors: 4")
    assert clauses[1].startswith("hardware Xid 95 (uncontained ECC error)")


def test_each_gpu_is_registered_once_and_the_queue_drained_without_waiting():
    gpus = two_gpus()
    nvml, inventory, _ = watched(gpus)
    gpus[0].xids = [13, 79, 31]
    for _ in range(3):
        inventory.snapshot()
    assert list(nvml.event_sets.values()) == [[0, 1]]
    assert gpus[0].xids == []
    assert set(nvml.wait_timeouts_ms) == {0}


def test_a_gpu_without_xid_events_is_judged_on_its_other_signals():
    gpus = two_gpus()
    gpus[0].errors = {"nvmlDeviceRegisterEvents": pynvml.NVML_ERROR_NOT_SUPPORTED}
    gpus[0].retired_pages_pending = True
    gpus[1].xids = [74]
    nvml, inventory, _ = watched(gpus)
    first, second = inventory.snapshot()
    assert first.health is GpuHealth.UNHEALTHY and "Xid" not in first.detail
    assert second.detail.startswith("hardware Xid 74 (NVLink error)")
    assert list(nvml.event_sets.values()) == [[1]]


def test_a_failed_registration_is_tried_again_at_the_next_snapshot():
    gpus = two_gpus()
    gpus[0].errors = {"nvmlDeviceRegisterEvents": pynvml.NVML_ERROR_UNKNOWN}
    nvml, inventory, _ = watched(gpus)
    assert inventory.snapshot()[0].health is GpuHealth.OK
    gpus[0].errors = {}
    gpus[0].xids = [64]
    assert inventory.snapshot()[0].health is GpuHealth.UNHEALTHY
    assert list(nvml.event_sets.values()) == [[1, 0]]


def test_without_an_event_set_the_other_signals_still_count():
    gpus = two_gpus()
    gpus[0].xids = [79]
    gpus[1].ecc_uncorrected = 1
    nvml, inventory, _ = watched(gpus)
    nvml.event_set_errors = [pynvml.NVML_ERROR_NOT_SUPPORTED]
    first, second = inventory.snapshot()
    assert first.health is GpuHealth.OK
    assert second.health is GpuHealth.UNHEALTHY
    assert nvml.event_sets == {} and nvml.wait_timeouts_ms == []


def test_a_failed_wait_keeps_the_events_for_the_next_snapshot():
    gpus = two_gpus()
    gpus[0].xids = [119]
    nvml, inventory, _ = watched(gpus)
    nvml.wait_errors = [pynvml.NVML_ERROR_UNKNOWN]
    assert inventory.snapshot()[0].health is GpuHealth.OK
    assert inventory.snapshot()[0].detail.startswith("hardware Xid 119 (GSP RPC timeout)")


def test_the_event_set_is_freed_on_shutdown_and_the_hold_outlives_the_restart():
    gpus = two_gpus()
    gpus[1].xids = [48]
    nvml, inventory, clock = watched(gpus)
    inventory.snapshot()
    nvml.count_errors = [pynvml.NVML_ERROR_UNKNOWN]
    with pytest.raises(InventoryUnavailable, match="could not count the GPUs"):
        inventory.snapshot()
    assert nvml.event_sets == {} and nvml.shutdown_calls == 1
    clock.now = T0 + 60
    readings = inventory.snapshot()
    assert readings[1].detail.startswith("hardware Xid 48")
    assert list(nvml.event_sets.values()) == [[0, 1]]  # a fresh set, both GPUs registered again


def test_a_lost_gpu_stays_lost_with_its_xid_named():
    gpus = two_gpus()
    gpus[0].xids = [79]
    _, inventory, _ = watched(gpus)
    inventory.snapshot()
    gpus[0].errors = {"nvmlDeviceGetMemoryInfo": pynvml.NVML_ERROR_GPU_IS_LOST}
    reading = inventory.snapshot()[0]
    assert reading.health is GpuHealth.LOST
    assert "NVMLError_GpuIsLost" in reading.detail
    assert "; hardware Xid 79 (GPU has fallen off the bus)" in reading.detail
