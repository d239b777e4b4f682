"""scripts/check_nvml_inventory.py: parsing nvidia-smi's CSV and comparing it with NVML readings."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pynvml
import pytest
from nvml_standin import NvmlStandin, StandinGpu

from control_plane.gpus.nvml import NvmlInventory
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


# nvidia-smi --query-gpu=index,ecc.errors.uncorrected.volatile.total,retired_pages.pending,
# clocks_event_reasons.hw_slowdown,...hw_thermal_slowdown,...hw_power_brake_slowdown
# --format=csv,noheader,nounits: GPU 1 is an H100 (no page retirement) in thermal slowdown.
SMI_HEALTH_CLEAN = """\
0, 0, No, Not Active, Not Active, Not Active
1, 0, [N/A], Not Active, Not Active, Not Active
"""
SMI_HEALTH_FAULTY = """\
0, 3, Yes, Not Active, Not Active, Not Active
1, 0, [N/A], Active, Active, Not Active
"""


def nvml_readings(gpu0: dict | None = None, gpu1: dict | None = None) -> list[GpuReading]:
    """What NvmlInventory reads from GPUs matching SMI_TWO_GPUS, with these StandinGpu fields
    set, so that the details compared are NvmlInventory's own."""
    gpus = [StandinGpu(UUID0, H100, total=TOTAL, used=(3600 + 537) * MIB, **(gpu0 or {})),
            StandinGpu(UUID1, H100, total=TOTAL, used=537 * MIB, **(gpu1 or {}))]
    return NvmlInventory(NvmlStandin(gpus)).snapshot()


THERMAL = (pynvml.nvmlClocksThrottleReasonHwSlowdown
           | pynvml.nvmlClocksThrottleReasonHwThermalSlowdown)


def test_nvidia_smi_health_csv_is_parsed_with_not_available_values_as_none():
    first, second = check.parse_smi_health_csv(SMI_HEALTH_FAULTY)
    assert first == check.SmiHealth(index=0, ecc_uncorrected=3, retired_pages_pending=True,
                                    hw_slowdown=False, hw_thermal_slowdown=False,
                                    hw_power_brake_slowdown=False)
    assert second == check.SmiHealth(index=1, ecc_uncorrected=0, retired_pages_pending=None,
                                     hw_slowdown=True, hw_thermal_slowdown=True,
                                     hw_power_brake_slowdown=False)
    (unsupported,) = check.parse_smi_health_csv("2, [N/A], [N/A], [N/A], [N/A], [Not Supported]")
    assert unsupported.ecc_uncorrected is None and unsupported.hw_power_brake_slowdown is None


@pytest.mark.parametrize(("line", "complaint"), [
    ("0, 0, No, Maybe, Not Active, Not Active", "'Maybe' is none of Active"),
    ("0, lots, No, Not Active, Not Active, Not Active", "invalid literal"),
    ("0, 0, No, Not Active", "has 4 fields, expected 6"),
])
def test_an_unreadable_health_line_is_a_value_error_quoting_it(line, complaint):
    with pytest.raises(ValueError, match=f"nvidia-smi line '{line}'.*{complaint}"):
        check.parse_smi_health_csv(line)


def test_healthy_gpus_agree_and_the_health_table_shows_both_views():
    comparisons = check.compare(check.parse_smi_csv(SMI_TWO_GPUS), nvml_readings(),
                                check.parse_smi_health_csv(SMI_HEALTH_CLEAN))
    assert [item.mismatches for item in comparisons] == [(), ()]
    lines = check.format_health(comparisons).splitlines()
    assert lines[0].startswith("idx  nvidia-smi: ECC / pending pages / slowdown")
    assert lines[1].split() == ["0", "0", "/", "no", "/", "no", "/", "no", "/", "no", "ok"]
    assert lines[2].split()[:4] == ["1", "0", "/", "n/a"]


def test_faults_nvidia_smi_shows_and_nvml_does_not_name_are_mismatches():
    first, second = check.compare(check.parse_smi_csv(SMI_TWO_GPUS), nvml_readings(),
                                  check.parse_smi_health_csv(SMI_HEALTH_FAULTY))
    assert first.mismatches == (
        ("health: nvidia-smi shows uncorrectable ECC errors (3), NVML does not name it "
         "(health ok)"),
        ("health: nvidia-smi shows retired pages pending (yes), NVML does not name it "
         "(health ok)"))
    assert second.mismatches == (
        "health: nvidia-smi shows hardware slowdown (yes), NVML does not name it (health ok)",
        ("health: nvidia-smi shows hardware thermal slowdown (yes), NVML does not name it "
         "(health ok)"))
    assert "MISMATCH" in check.format_table([first, second])


def test_faults_both_sides_see_agree_and_unhealthy_gpus_still_compare_memory():
    readings = nvml_readings(gpu0={"ecc_uncorrected": 3, "retired_pages_pending": True},
                             gpu1={"clock_event_reasons": THERMAL})
    comparisons = check.compare(check.parse_smi_csv(SMI_TWO_GPUS), readings,
                                check.parse_smi_health_csv(SMI_HEALTH_FAULTY))
    assert [item.mismatches for item in comparisons] == [(), ()]
    table = check.format_health(comparisons)
    assert "3 / yes / no / no / no" in table
    assert "unhealthy: uncorrectable ECC errors: 3 since the driver loaded" in table
    moved = [replace(readings[0], memory_used_bytes=readings[0].memory_used_bytes + 4096 * MIB),
             readings[1]]
    (first, _) = check.compare(check.parse_smi_csv(SMI_TWO_GPUS), moved,
                               check.parse_smi_health_csv(SMI_HEALTH_FAULTY))
    assert first.mismatches[0].startswith("memory.used: nvidia-smi 3600 MiB")


def test_ecc_and_retired_pages_nvml_names_but_nvidia_smi_does_not_show_are_mismatches():
    readings = nvml_readings(gpu0={"ecc_uncorrected": 1, "retired_pages_pending": True},
                             gpu1={"ecc_uncorrected": 2, "retired_pages_pending": True,
                                   "clock_event_reasons": THERMAL})
    first, second = check.compare(check.parse_smi_csv(SMI_TWO_GPUS), readings,
                                  check.parse_smi_health_csv(SMI_HEALTH_CLEAN))
    assert first.mismatches == (
        "health: NVML names uncorrectable ECC errors, nvidia-smi shows none (0)",
        "health: NVML names retired pages pending, nvidia-smi shows none (no)")
    # nvidia-smi cannot show GPU 1's retired pages ([N/A]), and a slowdown may end between reads.
    assert second.mismatches == (
        "health: NVML names uncorrectable ECC errors, nvidia-smi shows none (0)",)


def test_faults_only_nvml_reads_are_not_compared():
    readings = nvml_readings(gpu0={"remapped_rows": (0, 1, 1, 0), "xids": [79]})
    comparisons = check.compare(check.parse_smi_csv(SMI_TWO_GPUS), readings,
                                check.parse_smi_health_csv(SMI_HEALTH_CLEAN))
    assert readings[0].health is GpuHealth.UNHEALTHY
    assert [item.mismatches for item in comparisons] == [(), ()]
