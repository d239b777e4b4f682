"""Check NvmlInventory against nvidia-smi on a machine with NVIDIA GPUs.

    .venv/bin/python scripts/check_nvml_inventory.py

Index, UUID and name must match exactly and total memory to the MiB. Used and free memory move
between the two reads, so they may differ by 2% of the total or 256 MiB, whichever is larger
(which also covers the driver-reserved memory that nvidia-smi leaves out of "used" and NVML's
v1 memory call counts in). Utilization and temperature are shown, not compared.

Health: each GPU's fault signals as nvidia-smi shows them, beside the health and detail NVML gave
it. A fault nvidia-smi shows (uncorrected ECC errors, retired pages pending, a hardware slowdown)
that NVML does not name is a mismatch, and so is an ECC or retired-pages fault NVML names where
nvidia-smi shows none. Slowdowns come and go between the reads, so only their first direction
counts; NVML's own signals that nvidia-smi does not show here (row remapping, Xids) are not
compared.

Exit status: 0 when they agree, 1 on a mismatch, 2 when there is no GPU or no working driver.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from control_plane.gpus.nvml import NvmlInventory
from control_plane.gpus.nvml_health import (
    ECC_FAULT,
    HW_POWER_BRAKE_SLOWDOWN,
    HW_SLOWDOWN,
    HW_THERMAL_SLOWDOWN,
    RETIRED_PAGES_FAULT,
)
from control_plane.gpus.readings import MIB, GpuHealth, GpuReading, InventoryUnavailable

QUERY = ("index,uuid,name,memory.total,memory.used,memory.free,utilization.gpu,"
         "temperature.gpu")
HEALTH_QUERY = ("index,ecc.errors.uncorrected.volatile.total,retired_pages.pending,"
                "clocks_event_reasons.hw_slowdown,clocks_event_reasons.hw_thermal_slowdown,"
                "clocks_event_reasons.hw_power_brake_slowdown")
# nvidia-smi before driver 535 knows the clock fields by their older name.
HEALTH_QUERY_BEFORE_535 = HEALTH_QUERY.replace("clocks_event_reasons", "clocks_throttle_reasons")
MOVING_MEMORY_FRACTION = 0.02
MOVING_MEMORY_FLOOR_MIB = 256


@dataclass(frozen=True)
class SmiRow:
    """One GPU as ``nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits`` prints it."""

    index: int
    uuid: str
    name: str
    memory_total_mib: int
    memory_used_mib: int
    memory_free_mib: int
    utilization_percent: float | None
    temperature_c: float | None


@dataclass(frozen=True)
class SmiHealth:
    """One GPU's fault signals as ``nvidia-smi --query-gpu=HEALTH_QUERY`` prints them; None where
    it prints "[N/A]" (no ECC, no page retirement on Ampere and later, an old driver)."""

    index: int
    ecc_uncorrected: int | None
    retired_pages_pending: bool | None
    hw_slowdown: bool | None
    hw_thermal_slowdown: bool | None
    hw_power_brake_slowdown: bool | None

    def signals(self) -> tuple[tuple[str, bool | None, int | bool | None], ...]:
        """(the fault's name in NVML's detail, whether nvidia-smi shows it, what it printed)."""
        ecc = self.ecc_uncorrected
        return ((ECC_FAULT, None if ecc is None else ecc > 0, ecc),
                (RETIRED_PAGES_FAULT, self.retired_pages_pending, self.retired_pages_pending),
                (HW_SLOWDOWN, self.hw_slowdown, self.hw_slowdown),
                (HW_THERMAL_SLOWDOWN, self.hw_thermal_slowdown, self.hw_thermal_slowdown),
                (HW_POWER_BRAKE_SLOWDOWN, self.hw_power_brake_slowdown,
                 self.hw_power_brake_slowdown))


@dataclass(frozen=True)
class Comparison:
    """One GPU index seen by either side, and every way the two disagree about it."""

    index: int
    smi: SmiRow | None
    smi_health: SmiHealth | None
    reading: GpuReading | None
    mismatches: tuple[str, ...]


def parse_smi_csv(text: str) -> list[SmiRow]:
    """Rows of nvidia-smi's CSV; raises ValueError naming a line it cannot read."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) < 8:
            raise ValueError(f"nvidia-smi line {line!r} has {len(fields)} fields, expected 8")
        try:
            rows.append(SmiRow(
                index=int(fields[0]), uuid=fields[1],
                # nvidia-smi does not quote: a comma in a name would split it, so the name is
                # whatever lies between the UUID and the five numeric fields.
                name=", ".join(fields[2:-5]),
                memory_total_mib=int(fields[-5]), memory_used_mib=int(fields[-4]),
                memory_free_mib=int(fields[-3]),
                utilization_percent=_optional(fields[-2]), temperature_c=_optional(fields[-1])))
        except ValueError as error:
            raise ValueError(f"nvidia-smi line {line!r}: {error}") from None
    return rows


def _optional(field: str) -> float | None:
    # "[N/A]" or "[Not Supported]" where the GPU does not report it.
    return None if field.startswith("[") else float(field)


def parse_smi_health_csv(text: str) -> list[SmiHealth]:
    """Rows of nvidia-smi's HEALTH_QUERY CSV; raises ValueError naming a line it cannot read."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 6:
            raise ValueError(f"nvidia-smi line {line!r} has {len(fields)} fields, expected 6")
        try:
            rows.append(SmiHealth(
                index=int(fields[0]),
                ecc_uncorrected=None if fields[1].startswith("[") else int(fields[1]),
                retired_pages_pending=_flag(fields[2]), hw_slowdown=_flag(fields[3]),
                hw_thermal_slowdown=_flag(fields[4]), hw_power_brake_slowdown=_flag(fields[5])))
        except ValueError as error:
            raise ValueError(f"nvidia-smi line {line!r}: {error}") from None
    return rows


# retired_pages.pending prints Yes/No, the clock event reasons Active/Not Active.
_FLAGS = {"yes": True, "active": True, "no": False, "not active": False}


def _flag(field: str) -> bool | None:
    if field.startswith("["):
        return None
    try:
        return _FLAGS[field.lower()]
    except KeyError:
        raise ValueError(f"{field!r} is none of Active, Not Active, Yes, No, [N/A]") from None


def moving_tolerance_mib(total_mib: int) -> float:
    """How far used and free memory may differ between two reads taken moments apart."""
    return max(MOVING_MEMORY_FRACTION * total_mib, MOVING_MEMORY_FLOOR_MIB)


def compare(rows: Sequence[SmiRow], readings: Sequence[GpuReading],
            health: Sequence[SmiHealth] = ()) -> list[Comparison]:
    """Pair nvidia-smi rows (and its health rows, where given) with NVML readings by index and
    list their disagreements."""
    by_index = {row.index: row for row in rows}
    health_by_index = {row.index: row for row in health}
    read = {reading.index: reading for reading in readings}
    return [Comparison(index, by_index.get(index), health_by_index.get(index), read.get(index),
                       _mismatches(by_index.get(index), health_by_index.get(index),
                                   read.get(index)))
            for index in sorted(by_index.keys() | read.keys())]


def _mismatches(row: SmiRow | None, health: SmiHealth | None,
                reading: GpuReading | None) -> tuple[str, ...]:
    if row is None:
        return ("NVML reports this GPU, nvidia-smi does not",)
    if reading is None:
        return ("nvidia-smi reports this GPU, NVML does not",)
    total, used, free = (reading.memory_total_bytes, reading.memory_used_bytes,
                         reading.memory_free_bytes)
    if reading.health is GpuHealth.LOST or total is None or used is None or free is None:
        return (f"NVML reports it {reading.health.value}: {reading.detail}",)
    found = [f"{what}: nvidia-smi {smi!r}, NVML {nvml!r}"
             for what, smi, nvml in (("uuid", row.uuid, reading.uuid),
                                     ("name", row.name, reading.name)) if smi != nvml]
    # nvidia-smi truncates to whole MiB; the NVML total is exact.
    if not 0 <= total / MIB - row.memory_total_mib < 1:
        found.append(f"memory.total: nvidia-smi {row.memory_total_mib} MiB, "
                     f"NVML {total / MIB:.1f} MiB")
    tolerance = moving_tolerance_mib(row.memory_total_mib)
    for what, smi_mib, nvml_bytes in (("memory.used", row.memory_used_mib, used),
                                      ("memory.free", row.memory_free_mib, free)):
        if abs(nvml_bytes / MIB - smi_mib) > tolerance:
            found.append(f"{what}: nvidia-smi {smi_mib} MiB, NVML {nvml_bytes / MIB:.0f} MiB "
                         f"(more than {tolerance:.0f} MiB apart)")
    if health is not None:
        found.extend(_health_mismatches(health, reading))
    return tuple(found)


def _health_mismatches(health: SmiHealth, reading: GpuReading) -> list[str]:
    found = []
    for fault, shown, printed in health.signals():
        named = reading.health is GpuHealth.UNHEALTHY and fault in reading.detail
        if shown and not named:
            found.append(f"health: nvidia-smi shows {fault} ({_state(printed)}), NVML does not "
                         f"name it (health {reading.health.value})")
        elif shown is False and named and fault in (ECC_FAULT, RETIRED_PAGES_FAULT):
            found.append(f"health: NVML names {fault}, nvidia-smi shows none "
                         f"({_state(printed)})")
    return found


_COLUMNS = ("total MiB", "used MiB", "free MiB", "util %", "temp C")


def format_table(comparisons: Sequence[Comparison]) -> str:
    """One line per GPU with "nvidia-smi / NVML" in each column, then each mismatch."""
    lines = [f"{'idx':>3}  {'uuid':<40}  " + "  ".join(f"{title:>17}" for title in _COLUMNS)
             + "  verdict"]
    for item in comparisons:
        row, reading = item.smi, item.reading
        smi: tuple[float | None, ...] = (None,) * 5 if row is None else (
            row.memory_total_mib, row.memory_used_mib, row.memory_free_mib,
            row.utilization_percent, row.temperature_c)
        nvml: tuple[float | None, ...] = (None,) * 5 if reading is None else (
            _mib(reading.memory_total_bytes), _mib(reading.memory_used_bytes),
            _mib(reading.memory_free_bytes), reading.utilization_percent, reading.temperature_c)
        uuid = row.uuid if row else reading.uuid if reading else ""
        cells = "  ".join(f"{_shown(a) + ' / ' + _shown(b):>17}"
                          for a, b in zip(smi, nvml, strict=True))
        lines.append(f"{item.index:>3}  {uuid:<40}  {cells}  "
                     f"{'MISMATCH' if item.mismatches else 'ok'}")
        lines.extend(f"     - {mismatch}" for mismatch in item.mismatches)
    return "\n".join(lines)


_HEALTH_TITLE = "nvidia-smi: ECC / pending pages / slowdown / thermal / power brake"


def format_health(comparisons: Sequence[Comparison]) -> str:
    """One line per GPU: nvidia-smi's fault signals, then the health NVML gave it and why."""
    lines = [f"{'idx':>3}  {_HEALTH_TITLE}  NVML health"]
    for item in comparisons:
        smi = "-" if item.smi_health is None else " / ".join(
            _state(printed) for _, _, printed in item.smi_health.signals())
        nvml = "-" if item.reading is None else item.reading.health.value + (
            f": {item.reading.detail}" if item.reading.detail else "")
        lines.append(f"{item.index:>3}  {smi:<{len(_HEALTH_TITLE)}}  {nvml}")
    return "\n".join(lines)


def _state(printed: int | bool | None) -> str:
    if printed is None:
        return "n/a"
    if isinstance(printed, bool):
        return "yes" if printed else "no"
    return str(printed)


def _mib(value: int | None) -> float | None:
    return None if value is None else value / MIB


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def main() -> int:
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        print("no GPU here: nvidia-smi is not on PATH (install the NVIDIA driver)",
              file=sys.stderr)
        return 2
    try:
        readings = NvmlInventory().snapshot()
    except InventoryUnavailable as error:
        print(f"no GPU here: {error}", file=sys.stderr)
        return 2
    # Right after NVML, so that used/free moved as little as possible in between.
    smi = _query(nvidia_smi, QUERY)
    if smi.returncode != 0:
        print(f"no GPU here: nvidia-smi exited with {smi.returncode}: {_output(smi)}",
              file=sys.stderr)
        return 2
    health = _query(nvidia_smi, HEALTH_QUERY)
    if health.returncode != 0:
        health = _query(nvidia_smi, HEALTH_QUERY_BEFORE_535)
    if health.returncode != 0:
        print(f"cannot compare health: nvidia-smi --query-gpu={HEALTH_QUERY} (also with the "
              f"pre-535 clocks_throttle_reasons names) exited with {health.returncode}: "
              f"{_output(health)}; `nvidia-smi --help-query-gpu` lists the fields this driver "
              f"knows", file=sys.stderr)
        return 1
    try:
        rows = parse_smi_csv(smi.stdout)
        health_rows = parse_smi_health_csv(health.stdout)
    except ValueError as error:
        print(f"cannot compare: {error}", file=sys.stderr)
        return 1
    if not rows and not readings:
        print("no GPU here: nvidia-smi and NVML both list no GPUs", file=sys.stderr)
        return 2
    comparisons = compare(rows, readings, health_rows)
    print(format_table(comparisons))
    print()
    print(format_health(comparisons))
    agree = not any(item.mismatches for item in comparisons)
    print(f"\n{len(comparisons)} GPU(s): NVML and nvidia-smi "
          f"{'agree' if agree else 'DISAGREE'}")
    return 0 if agree else 1


def _query(nvidia_smi: str, query: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([nvidia_smi, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, timeout=60, check=False)


def _output(done: subprocess.CompletedProcess[str]) -> str:
    return f"{done.stdout.strip()} {done.stderr.strip()}".strip()


if __name__ == "__main__":
    sys.exit(main())
