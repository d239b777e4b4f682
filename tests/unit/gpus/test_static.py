"""StaticInventory and load_static_fleet on real JSON and YAML files."""

from __future__ import annotations

import json
import os

import pytest

from control_plane.gpus.readings import MIB, GpuHealth, GpuReading, InventoryUnavailable
from control_plane.gpus.static import StaticInventory, load_static_fleet

A100 = "NVIDIA A100-SXM4-80GB"
FLEET_YAML = f"""\
nodes:
  gpu-node-a:
    - {{index: 1, uuid: GPU-a1, name: "{A100}", memory_total_mib: 81920, memory_used_mib: 1024,
       utilization_percent: 12.5, temperature_c: 44, health: ok}}
    - {{index: 0, uuid: GPU-a0, name: "{A100}", memory_total_mib: 81920, memory_used_mib: 0,
       utilization_percent: 0, temperature_c: 30}}
  gpu-node-b:
    - {{index: 0, uuid: GPU-b0, name: Tesla T4, memory_total_bytes: 16106127360}}
    - {{index: 1, uuid: GPU-b1, health: lost, detail: fell off the bus}}
"""


def write(path, text):
    path.write_text(text)
    return path


def test_yaml_fleet_is_read_with_exact_values_ordered_by_index(tmp_path):
    fleet = load_static_fleet(write(tmp_path / "fleet.yaml", FLEET_YAML))
    assert list(fleet) == ["gpu-node-a", "gpu-node-b"]
    assert fleet["gpu-node-a"] == [
        GpuReading(index=0, uuid="GPU-a0", name=A100, memory_total_bytes=81920 * MIB,
                   memory_used_bytes=0, memory_free_bytes=81920 * MIB,
                   utilization_percent=0.0, temperature_c=30.0),
        GpuReading(index=1, uuid="GPU-a1", name=A100, memory_total_bytes=81920 * MIB,
                   memory_used_bytes=1024 * MIB, memory_free_bytes=80896 * MIB,
                   utilization_percent=12.5, temperature_c=44.0),
    ]


def test_bytes_used_defaulting_to_zero_and_a_lost_gpu_without_memory(tmp_path):
    t4, lost = load_static_fleet(write(tmp_path / "fleet.yml", FLEET_YAML))["gpu-node-b"]
    assert (t4.memory_total_bytes, t4.memory_used_bytes, t4.memory_free_bytes) == (
        16106127360, 0, 16106127360)
    assert t4.health is GpuHealth.OK and t4.utilization_percent is None
    assert lost.health is GpuHealth.LOST and lost.detail == "fell off the bus"
    assert lost.memory_total_bytes is None and lost.memory_free_bytes is None


def test_json_is_read_like_yaml(tmp_path):
    document = {"nodes": {"n": [{"index": 0, "uuid": "GPU-0", "memory_total_mib": 1024,
                                 "memory_used_mib": 256, "health": "unhealthy"}]}}
    (gpu,) = StaticInventory(write(tmp_path / "fleet.json", json.dumps(document)), "n").snapshot()
    assert gpu.memory_free_bytes == 768 * MIB and gpu.health is GpuHealth.UNHEALTHY
    assert gpu.name == ""


def test_the_file_is_read_again_when_an_operator_edits_it(tmp_path):
    path = write(tmp_path / "fleet.yaml", FLEET_YAML)
    inventory = StaticInventory(path, "gpu-node-a")
    assert inventory.snapshot()[0].memory_used_bytes == 0
    path.write_text(FLEET_YAML.replace("memory_used_mib: 0,", "memory_used_mib: 40960,"))
    # An edit within the file system's timestamp resolution must still be seen.
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert inventory.snapshot()[0].memory_used_bytes == 40960 * MIB


def test_an_unchanged_file_is_not_parsed_again(tmp_path):
    path = write(tmp_path / "fleet.yaml", FLEET_YAML)
    inventory = StaticInventory(path, "gpu-node-a")
    inventory.snapshot()
    stat = path.stat()
    # Same size and mtime as before: the inventory has no reason to look inside.
    path.write_text(FLEET_YAML.replace("memory_used_mib: 0,", "memory_used_mib: 9,"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert inventory.snapshot()[0].memory_used_bytes == 0
    assert load_static_fleet(path)["gpu-node-a"][0].memory_used_bytes == 9 * MIB


def test_a_missing_file_names_the_file_and_the_node(tmp_path):
    with pytest.raises(InventoryUnavailable,
                       match=r"missing\.yaml \(node 'gpu-node-a'\) cannot be read: No such file"):
        StaticInventory(tmp_path / "missing.yaml", "gpu-node-a").snapshot()


def test_a_node_not_in_the_file_names_the_nodes_it_has(tmp_path):
    path = write(tmp_path / "fleet.yaml", FLEET_YAML)
    with pytest.raises(InventoryUnavailable, match=r"has no node 'gpu-node-z' \(it lists "
                                                   r"gpu-node-a, gpu-node-b\)"):
        StaticInventory(path, "gpu-node-z").snapshot()


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bad.yaml", "nodes: [unclosed", r"bad\.yaml is not valid YAML"),
    ("bad.json", "{\"nodes\": ", r"bad\.json is not valid JSON"),
    ("fleet.toml", "nodes = 1", r"unknown format '\.toml'"),
    ("empty.yaml", "", r"expected a mapping `nodes:`"),
    ("list.yaml", "nodes: {n: {index: 0}}", r"node 'n': expected a list of GPUs, got dict"),
])
def test_malformed_files_name_the_file_and_the_problem(tmp_path, name, text, message):
    with pytest.raises(InventoryUnavailable, match=message):
        load_static_fleet(write(tmp_path / name, text))


@pytest.mark.parametrize(("entry", "field", "problem"), [
    ("{uuid: G}", "index", "is missing"),
    ("{index: -1, uuid: G, memory_total_mib: 1}", "index", "whole number"),
    ("{index: 0, memory_total_mib: 1}", "uuid", "non-empty string"),
    ("{index: 0, uuid: G}", "memory_total_mib", "is missing"),
    ("{index: 0, uuid: G, memory_total_mib: 80.5}", "memory_total_mib", "whole number"),
    ("{index: 0, uuid: G, memory_total_mib: true}", "memory_total_mib", "whole number"),
    ("{index: 0, uuid: G, memory_total_mib: 1, memory_total_bytes: 1}", "memory_total_mib",
     "both given"),
    ("{index: 0, uuid: G, memory_total_mib: 1, memory_used_mib: 2}", "memory_used_mib",
     "exceeds the total"),
    ("{index: 0, uuid: G, memory_total_bytes: 1, memory_used_bytes: 2}", "memory_used_bytes",
     "(2 bytes) exceeds the total (1 bytes)"),
    ("{index: 0, uuid: G, memory_total_mib: 1, 7: x}", "7", "is not known"),
    ("{index: 0, uuid: G, memory_total_mib: 1, health: dead}", "health", "ok, unhealthy or lost"),
    ("{index: 0, uuid: G, memory_total_mib: 1, utilization_percent: 150}",
     "utilization_percent", "from 0 to 100"),
    ("{index: 0, uuid: G, memory_total_gb: 80}", "memory_total_gb", "is not known"),
    ("just-a-string", "(entry)", "must be a mapping"),
])
def test_a_bad_entry_names_the_file_the_node_and_the_field(tmp_path, entry, field, problem):
    path = write(tmp_path / "fleet.yaml", f"nodes:\n  node-x:\n    - {entry}\n")
    with pytest.raises(InventoryUnavailable) as raised:
        StaticInventory(path, "node-x").snapshot()
    message = str(raised.value)
    assert str(path) in message and "node 'node-x', GPU entry 0" in message
    assert f"field '{field}'" in message and problem in message


@pytest.mark.parametrize("field", ["index", "uuid"])
def test_two_gpus_sharing_an_index_or_uuid_are_refused(tmp_path, field):
    second = "{index: 0, uuid: G1, memory_total_mib: 1}" if field == "index" else (
        "{index: 1, uuid: G0, memory_total_mib: 1}")
    first = "{index: 0, uuid: G0, memory_total_mib: 1}"
    path = write(tmp_path / "fleet.yaml", f"nodes:\n  n:\n    - {first}\n    - {second}\n")
    with pytest.raises(InventoryUnavailable, match=f"field '{field}' .* appears twice"):
        load_static_fleet(path)


def test_a_file_broken_by_an_edit_is_reported_and_then_read_once_fixed(tmp_path):
    path = write(tmp_path / "fleet.yaml", FLEET_YAML)
    inventory = StaticInventory(path, "gpu-node-b")
    path.write_text("nodes: [unclosed")
    with pytest.raises(InventoryUnavailable, match="not valid YAML"):
        inventory.snapshot()
    path.write_text(FLEET_YAML)
    assert [gpu.uuid for gpu in inventory.snapshot()] == ["GPU-b0", "GPU-b1"]
