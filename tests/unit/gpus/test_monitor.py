"""GpuMonitor over real static inventory files and inventories that fail or hang."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

from control_plane.gpus.monitor import GpuMonitor, NodeReadings
from control_plane.gpus.readings import MIB, GpuInventory, GpuReading, InventoryUnavailable
from control_plane.gpus.static import StaticInventory

FLEET = """\
nodes:
  node-a:
    - {index: 0, uuid: GPU-a0, memory_total_mib: 1024, memory_used_mib: 24}
  node-b:
    - {index: 0, uuid: GPU-b0, memory_total_mib: 2048}
    - {index: 1, uuid: GPU-b1, memory_total_mib: 2048}
"""


class UnavailableInventory:
    """A node whose inventory cannot be read, as a node without a driver answers."""

    def __init__(self) -> None:
        self.calls = 0

    def snapshot(self) -> list[GpuReading]:
        self.calls += 1
        raise InventoryUnavailable(f"NVML did not start (call {self.calls})")


class BrokenInventory:
    def snapshot(self) -> list[GpuReading]:
        raise KeyError("gpu_uuid")


class HangingInventory:
    """A node whose read blocks until released, as a GPU fallen off the bus can make NVML do."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def snapshot(self) -> list[GpuReading]:
        self.calls += 1
        self.release.wait(timeout=30)
        return []


class Clock:
    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fleet_file(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    return path


def test_each_node_is_read_and_a_failing_node_records_its_error_without_stopping_others(
        fleet_file):
    inventories: dict[str, GpuInventory] = {
        "node-a": StaticInventory(fleet_file, "node-a"),
        "node-down": UnavailableInventory(),
        "node-bug": BrokenInventory(),
        "node-b": StaticInventory(fleet_file, "node-b"),
    }
    clock = Clock()
    monitor = GpuMonitor(lambda: inventories, clock=clock)
    try:
        recorded = monitor.poll_once()
    finally:
        monitor.stop()
    assert set(recorded) == set(inventories)
    a = monitor.latest("node-a")
    assert a is not None and a.error is None
    assert a.taken_at == datetime.fromtimestamp(clock.now, tz=UTC)
    assert [(gpu.uuid, gpu.memory_free_bytes) for gpu in a.gpus] == [("GPU-a0", 1000 * MIB)]
    assert [gpu.uuid for gpu in monitor.latest("node-b").gpus] == ["GPU-b0", "GPU-b1"]
    assert monitor.latest("node-down") == NodeReadings(
        "node-down", a.taken_at, (), "InventoryUnavailable: NVML did not start (call 1)")
    assert monitor.latest("node-bug").error == "KeyError: 'gpu_uuid'"
    assert monitor.latest("node-never") is None


def test_history_keeps_the_newest_polls_up_to_its_bound(fleet_file):
    clock = Clock()
    down = UnavailableInventory()
    monitor = GpuMonitor(lambda: {"node-a": StaticInventory(fleet_file, "node-a"),
                                  "node-down": down}, history=3, clock=clock)
    try:
        for _ in range(5):
            monitor.poll_once()
            clock.now += 5
    finally:
        monitor.stop()
    times = [poll.taken_at.timestamp() for poll in monitor.history("node-a")]
    assert times == [1_700_000_010.0, 1_700_000_015.0, 1_700_000_020.0]
    assert [poll.error for poll in monitor.history("node-down")] == [
        f"InventoryUnavailable: NVML did not start (call {n})" for n in (3, 4, 5)]
    assert monitor.latest("node-a") == monitor.history("node-a")[-1]


def test_nodes_that_leave_the_fleet_are_dropped_and_new_ones_picked_up(fleet_file):
    nodes = ["node-a", "node-b"]
    monitor = GpuMonitor(lambda: {node: StaticInventory(fleet_file, node) for node in nodes})
    try:
        monitor.poll_once()
        nodes[:] = ["node-b", "node-c"]
        monitor.poll_once()
    finally:
        monitor.stop()
    assert monitor.latest("node-a") is None and monitor.history("node-a") == []
    assert set(monitor.latest_all()) == {"node-b", "node-c"}
    assert len(monitor.history("node-b")) == 2
    assert "has no node 'node-c'" in monitor.latest("node-c").error


def test_a_hanging_node_times_out_without_holding_up_the_others(fleet_file):
    hanging = HangingInventory()
    monitor = GpuMonitor(lambda: {"node-a": StaticInventory(fleet_file, "node-a"),
                                  "node-hung": hanging}, node_timeout_s=0.2)
    try:
        began = time.monotonic()
        first = monitor.poll_once()
        assert time.monotonic() - began < 5
        assert first["node-a"].error is None and len(first["node-a"].gpus) == 1
        assert first["node-hung"].error == "no answer within 0.2 s"
        second = monitor.poll_once()
        # Still hung: not read a second time, and said so.
        assert hanging.calls == 1
        assert "previous read has not returned" in second["node-hung"].error
        hanging.release.set()
        deadline = time.monotonic() + 10
        third = monitor.poll_once()
        while third["node-hung"].error is not None and time.monotonic() < deadline:
            time.sleep(0.02)  # the released read has yet to hand its result back
            third = monitor.poll_once()
        assert hanging.calls == 2 and third["node-hung"] == NodeReadings(
            "node-hung", third["node-hung"].taken_at, ())
    finally:
        hanging.release.set()
        monitor.stop()


def test_start_polls_in_the_background_and_survives_a_failing_fleet_lookup(fleet_file):
    lookups = 0

    def inventories() -> dict[str, GpuInventory]:
        nonlocal lookups
        lookups += 1
        if lookups == 2:
            raise RuntimeError("node registry unreachable")
        return {"node-a": StaticInventory(fleet_file, "node-a")}

    monitor = GpuMonitor(inventories, interval_s=0.05)
    monitor.start()
    try:
        with pytest.raises(RuntimeError, match="already running"):
            monitor.start()
        deadline = time.monotonic() + 10
        while len(monitor.history("node-a")) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        monitor.stop()
    assert lookups >= 4  # the failed second lookup did not end the loop
    assert len(monitor.history("node-a")) >= 3
    polls_after_stop = len(monitor.history("node-a"))
    time.sleep(0.2)
    assert len(monitor.history("node-a")) == polls_after_stop
    monitor.start()  # a stopped monitor starts again
    try:
        deadline = time.monotonic() + 10
        while len(monitor.history("node-a")) == polls_after_stop and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(monitor.history("node-a")) > polls_after_stop
    finally:
        monitor.stop()


@pytest.mark.parametrize(("interval_s", "history"), [(0, 10), (5, 0)])
def test_nonsense_settings_are_refused(interval_s, history):
    with pytest.raises(ValueError, match="interval_s > 0 and history >= 1"):
        GpuMonitor(dict, interval_s=interval_s, history=history)
