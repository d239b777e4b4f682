"""scripts/check_nvml_inventory.py: parsing nvidia-smi's CSV and comparing it with NVML readings."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from control_plane.gpus.readings import MIB, GpuHealth, GpuReading

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "check_nvml_inventory.py"


def load_script() -> ModuleType:
    # scripts/ is not a package; load the file the way `python scripts/...` would run it.
    spec = importlib.util.spec_from_file_location("check_nvml_inventory", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


check = load_script()

H100 = "NVIDIA H100 80GB HBM3"
UUID0 = "GPU-5d4b3a2c-0000-1111-2222-333344445555"
UUID1 = "GPU-0f1e2d3c-aaaa-bbbb-cccc-ddddeeeeffff"
# nvidia-smi --query-gpu=index,uuid,...,temperature.gpu --format=csv,noheader,nounits
SMI_TWO_GPUS = f"""\
0, {UUID0}, {H100}, 81559, 3600, 77422, 37, 41
1, {UUID1}, {H100}, 81559, 0, 81022, [N/A], [Not Supported]
"""
TOTAL = 81559 * MIB


def reading(index: int, uuid: str, used_mib: float, name: str = H100,
            total: int = TOTAL) -> GpuReading:
    used = int(used_mib * MIB)
    return GpuReading(index=index, uuid=uuid, name=name, memory_total_bytes=total,
                      memory_used_bytes=used, memory_free_bytes=total - used,
                      utilization_percent=37.0, temperature_c=41.0)


def agreeing_readings() -> list[GpuReading]:
    # NVML's v1 memory call counts the driver-reserved ~537 MiB as used; nvidia-smi does not.
    return [reading(0, UUID0, 3600 + 537), reading(1, UUID1, 537)]


def test_nvidia_smi_csv_is_parsed_with_not_available_values_as_none():
    first, second = check.parse_smi_csv(SMI_TWO_GPUS)
    assert first == check.SmiRow(index=0, uuid=UUID0, name=H100, memory_total_mib=81559,
                                 memory_used_mib=3600, memory_free_mib=77422,
                                 utilization_percent=37.0, temperature_c=41.0)
    assert second.utilization_percent is None and second.temperature_c is None


def test_a_name_with_a_comma_is_kept_whole():
    (row,) = check.parse_smi_csv(f"0, {UUID0}, Odd, Name, 1024, 0, 1024, 0, 30\n")
    assert row.name == "Odd, Name" and row.memory_total_mib == 1024


def test_an_unreadable_line_is_a_value_error_quoting_it():
    with pytest.raises(ValueError, match="nvidia-smi line '0, GPU-x, T4, lots"):
        check.parse_smi_csv("0, GPU-x, T4, lots, 0, 0, 0, 0\n")


def test_matching_gpus_agree_within_the_moving_memory_tolerance():
    comparisons = check.compare(check.parse_smi_csv(SMI_TWO_GPUS), agreeing_readings())
    assert [(item.index, item.mismatches) for item in comparisons] == [(0, ()), (1, ())]
    table = check.format_table(comparisons)
    assert UUID0 in table and "81559 / 81559" in table and "- / 37" in table
    assert "MISMATCH" not in table


def test_tolerance_is_two_percent_of_total_or_256_mib_whichever_is_larger():
    assert check.moving_tolerance_mib(81559) == pytest.approx(1631.18)
    assert check.moving_tolerance_mib(4096) == 256


def test_used_memory_far_apart_is_a_mismatch():
    readings = agreeing_readings()
    readings[0] = reading(0, UUID0, 3600 + 2000)
    (first, second) = check.compare(check.parse_smi_csv(SMI_TWO_GPUS), readings)
    assert second.mismatches == ()
    # Free is 1463 MiB apart, inside the tolerance; used is 2000 MiB apart, outside it.
    assert first.mismatches == (
        "memory.used: nvidia-smi 3600 MiB, NVML 5600 MiB (more than 1631 MiB apart)",)
    assert "MISMATCH" in check.format_table([first, second])


def test_uuid_name_and_total_must_match_exactly():
    readings = [reading(0, UUID1, 4137, name="NVIDIA A100", total=TOTAL + MIB),
                agreeing_readings()[1]]
    (first, _) = check.compare(check.parse_smi_csv(SMI_TWO_GPUS), readings)
    assert first.mismatches[0] == f"uuid: nvidia-smi {UUID0!r}, NVML {UUID1!r}"
    assert first.mismatches[1] == f"name: nvidia-smi {H100!r}, NVML 'NVIDIA A100'"
    assert first.mismatches[2].startswith("memory.total: nvidia-smi 81559 MiB, NVML 81560.0")


def test_a_gpu_only_one_side_sees_and_a_lost_gpu_are_mismatches():
    lost = GpuReading(index=1, uuid=UUID1, name=H100, memory_total_bytes=None,
                      memory_used_bytes=None, memory_free_bytes=None, health=GpuHealth.LOST,
                      detail="NVML reports the GPU lost")
    extra = reading(2, "GPU-extra", 0)
    comparisons = check.compare(check.parse_smi_csv(SMI_TWO_GPUS)[1:], [lost, extra])
    assert [(item.index, item.mismatches) for item in comparisons] == [
        (1, ("NVML reports it lost: NVML reports the GPU lost",)),
        (2, ("NVML reports this GPU, nvidia-smi does not",)),
    ]
    missing = check.compare(check.parse_smi_csv(SMI_TWO_GPUS), [])
    assert missing[0].mismatches == ("nvidia-smi reports this GPU, NVML does not",)
    assert "-" in check.format_table(missing)


def test_the_script_without_nvidia_smi_exits_2_saying_there_is_no_gpu():
    # Run as an operator would, with a PATH that holds no nvidia-smi on any machine.
    done = subprocess.run([sys.executable, str(SCRIPT)], env={**os.environ, "PATH": "/nonexistent"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "no GPU here: nvidia-smi is not on PATH" in done.stderr
