"""NVML's fault signals: what is wrong with a GPU that NVML can still read.

Each signal a GPU or driver does not support (NVMLError_NotSupported, or any other NVML error) is
skipped, so the GPU is judged on the others. NVMLError_GpuIsLost propagates: the caller reports the
GPU lost, which says more than any one signal could.

Fault texts start with the names below, which scripts/check_nvml_inventory.py looks for when it
compares them with nvidia-smi.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

ECC_FAULT = "uncorrectable ECC errors"
RETIRED_PAGES_FAULT = "retired pages pending"
HW_SLOWDOWN = "hardware slowdown"
HW_THERMAL_SLOWDOWN = "hardware thermal slowdown"
HW_POWER_BRAKE_SLOWDOWN = "hardware power brake slowdown"

# A clock-event bit's pynvml name, and its name in a fault. NVML reports hardware slowdown only
# when the GPU protects itself (overheating, the power supply asserting its brake), never for a
# limit an operator set, so any of these makes the GPU unfit for a latency-bound engine.
_SLOWDOWN_BITS = (("nvmlClocksThrottleReasonHwSlowdown", HW_SLOWDOWN),
                  ("nvmlClocksThrottleReasonHwThermalSlowdown", HW_THERMAL_SLOWDOWN),
                  ("nvmlClocksThrottleReasonHwPowerBrakeSlowdown", HW_POWER_BRAKE_SLOWDOWN))

# The Xids that NVIDIA's Xid catalogue puts down to the GPU's memory, links or firmware, not to the
# program that ran on it. Application Xids (13, 31, 43, 45, ...) end one process and leave the GPU
# fit for the next, so they do not count.
HARDWARE_XIDS: Mapping[int, str] = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}

_T = TypeVar("_T")


def gpu_faults(nvml: Any, handle: Any, index: int) -> list[str]:
    """Every fault the GPU's health signals report, each naming what to do; empty when none."""
    reset = f"reset it (`nvidia-smi -r -i {index}` with nothing running on it)"
    faults = []
    ecc = _supported(nvml, lambda: int(nvml.nvmlDeviceGetTotalEccErrors(
        handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)))
    if ecc:
        faults.append(f"{ECC_FAULT}: {ecc} since the driver loaded, drain the GPU and {reset} to "
                      f"retire the failing memory, and replace it if they recur")
    pending = _supported(nvml, lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))
    if pending == nvml.NVML_FEATURE_ENABLED:
        faults.append(f"{RETIRED_PAGES_FAULT}: pages with ECC errors are retired only when the "
                      f"GPU is reset, {reset} or reboot the machine")
    rows = _supported(nvml, lambda: nvml.nvmlDeviceGetRemappedRows(handle))
    if rows is not None:
        _corrected, _uncorrected, remap_pending, remap_failed = rows
        if remap_failed:
            faults.append("row remapping failed: the GPU has no spare memory rows left for its "
                          "ECC errors, replace the GPU")
        if remap_pending:
            faults.append(f"row remapping pending: rows with ECC errors are remapped only when "
                          f"the GPU is reset, {reset}")
    reasons = _supported(nvml, lambda: _clock_event_reasons(nvml, handle)) or 0
    slowdowns = [name for bit, name in _SLOWDOWN_BITS if reasons & getattr(nvml, bit)]
    if slowdowns:
        faults.append(f"clocks slowed by {', '.join(slowdowns)}: the GPU is protecting itself "
                      f"from heat or a power fault, check its cooling and power supply "
                      f"(`nvidia-smi -q -d PERFORMANCE -i {index}`)")
    return faults


def _clock_event_reasons(nvml: Any, handle: Any) -> int:
    # NVML 535 renamed "throttle reasons" to "clock event reasons"; older bindings lack the new
    # call and older drivers answer it with FunctionNotFound, and the old call reads the same bits.
    read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if read is not None:
        try:
            return int(read(handle))
        except nvml.NVMLError_FunctionNotFound:
            pass
    return int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))


def _supported(nvml: Any, read: Callable[[], _T]) -> _T | None:
    try:
        return read()
    except nvml.NVMLError_GpuIsLost:
        raise
    except nvml.NVMLError:
        return None


class XidWatch:
    """Hardware Xids from NVML's critical-error events, held against the GPU they name.

    An Xid is an event, not a state: once it has passed nothing in NVML shows it, yet the GPU that
    raised it is likely to fail again, so it counts for ``hold_seconds`` after the last one.
    """

    def __init__(self, hold_seconds: float, clock: Callable[[], float]) -> None:
        self._hold_seconds = hold_seconds
        self._clock = clock
        self._events: Any = None
        self._registered: set[str] = set()
        # UUID -> Xid -> when last drained. Kept across NVML restarts, which mend no GPU.
        self._seen: dict[str, dict[int, float]] = {}

    def open(self, nvml: Any) -> None:
        """Creates the event set; call after nvmlInit."""
        try:
            self._events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError:
            self._events = None  # no events on this platform: the other signals still count

    def close(self, nvml: Any) -> None:
        """Frees the event set; call before nvmlShutdown, which invalidates it."""
        events, self._events = self._events, None
        self._registered.clear()
        if events is not None:
            try:
                nvml.nvmlEventSetFree(events)
            except nvml.NVMLError:
                pass  # NVML is going down; the set goes with it

    def watch(self, nvml: Any, handle: Any, uuid: str) -> None:
        """Registers the GPU for critical Xid events, once per GPU while the event set lives."""
        if self._events is None or uuid in self._registered:
            return
        try:
            nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._events)
        except nvml.NVMLError_NotSupported:
            pass  # a GPU without Xid events (some GeForce and virtual GPUs) will not gain them
        except nvml.NVMLError:
            return  # tried again at the next snapshot
        self._registered.add(uuid)

    def drain(self, nvml: Any) -> None:
        """Takes every event NVML has queued, without waiting for more."""
        if self._events is None:
            return
        now = self._clock()
        while True:
            try:
                event = nvml.nvmlEventSetWait_v2(self._events, 0)
            except nvml.NVMLError:
                # NVMLError_Timeout: the queue is empty. Any other error (a GPU fell off the bus
                # mid-wait) leaves the rest for the next drain; the GPU's own reading says why.
                break
            xid = int(event.eventData)
            if xid not in HARDWARE_XIDS:
                continue
            try:
                uuid = nvml_text(nvml.nvmlDeviceGetUUID(event.device))
            except nvml.NVMLError:
                continue  # the GPU is unreadable, so its reading is LOST, which placement skips
            self._seen.setdefault(uuid, {})[xid] = now
        self._seen = {uuid: held for uuid, xids in self._seen.items()
                      if (held := {xid: at for xid, at in xids.items()
                                   if now - at < self._hold_seconds})}

    def faults(self, uuid: str, index: int) -> list[str]:
        """The GPU's hardware Xids still held, as one fault naming each; empty when none."""
        xids = self._seen.get(uuid, {})
        if not xids:
            return []
        seen = ", ".join(f"Xid {xid} ({HARDWARE_XIDS[xid]}) at {_utc(at)}"
                         for xid, at in sorted(xids.items()))
        until = _utc(max(xids.values()) + self._hold_seconds)
        return [(f"hardware {seen}, unhealthy until {until}: drain the GPU, read the kernel log "
                 f"(`dmesg | grep -i xid`), reset it (`nvidia-smi -r -i {index}` with nothing "
                 f"running on it), and replace it if the Xids recur")]


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def nvml_text(value: str | bytes) -> str:
    """A UUID or name as str: older nvidia-ml-py releases return them as bytes."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
