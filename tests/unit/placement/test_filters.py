"""Each placement rule on its own, one table per rule."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from control_plane.gpus.readings import GpuHealth, GpuReading
from control_plane.placement.accounting import EMPTY_BOOK, GpuBook, Ledger
from control_plane.placement.filters import RULE_NAMES, RULES
from control_plane.placement.filters.anti_affinity import AntiAffinity
from control_plane.placement.filters.fits_memory import FitsMemory
from control_plane.placement.filters.gpu_healthy import GpuHealthy
from control_plane.placement.filters.gpu_not_excluded import GpuNotExcluded
from control_plane.placement.filters.inventory_readable import InventoryReadable
from control_plane.placement.filters.node_allowed import NodeAllowed
from control_plane.placement.filters.tensor_parallel import TensorParallel
from control_plane.placement.model import NodeView, PlacementRequest, Reservation

from .fleet import GIB, HOLDER, booked, gib, gpu, node, request


def test_rules_have_distinct_names_and_one_sentence_descriptions() -> None:
    assert len(RULE_NAMES) == len(RULES) == 7
    for rule in RULES:
        assert rule.description.endswith(".") and rule.description.count(". ") == 0


@pytest.mark.parametrize(("error", "expected"), [
    (None, None),
    ("NVML not found", "GPU inventory unreadable: NVML not found"),
], ids=["readable", "unreadable"])
def test_inventory_readable(error: str | None, expected: str | None) -> None:
    assert InventoryReadable().check(request(), NodeView("a", error=error)) == expected


def test_inventory_readable_names_a_node_missing_from_the_inventory() -> None:
    assert InventoryReadable().missing("z", ["a", "b"]) == (
        "node 'z' is not in the inventory (known: a, b); register it or fix the deployment's node")


@pytest.mark.parametrize(("nodes", "expected"), [
    (None, None),
    (("a",), None),
    (("b", "a"), None),
    (("b", "c"), "the deployment runs only on: b, c"),
    ((), "the deployment runs only on: none"),
], ids=["any", "named", "one-of", "other-nodes", "no-nodes"])
def test_node_allowed(nodes: tuple[str, ...] | None, expected: str | None) -> None:
    assert NodeAllowed().check(request(nodes=nodes), NodeView("a")) == expected


@pytest.mark.parametrize(("excluded", "expected"), [
    ((), None),
    ((1,), None),
    ((0,), "excluded by an operator (GPU-a-0); include it again to place new engines on it"),
], ids=["none-excluded", "other-excluded", "excluded"])
def test_gpu_not_excluded(excluded: tuple[int, ...], expected: str | None) -> None:
    view = node("a", [80, 80], excluded=excluded)
    assert GpuNotExcluded().check(request(), view, view.gpus[0], EMPTY_BOOK) == expected


@pytest.mark.parametrize(("reading", "expected"), [
    (gpu(), None),
    (gpu(health=GpuHealth.UNHEALTHY, detail="XID 79"), "health is unhealthy: XID 79"),
    (gpu(health=GpuHealth.LOST), "health is lost"),
    (replace(gpu(), memory_total_bytes=None), "memory not readable (total None, used 0)"),
    (replace(gpu(), memory_used_bytes=None),
     f"memory not readable (total {80 * GIB}, used None)"),
    (replace(gpu(), memory_total_bytes=0), "memory not readable (total 0, used 0)"),
], ids=["ok", "unhealthy", "lost", "total-unread", "used-unread", "zero-total"])
def test_gpu_healthy(reading: GpuReading, expected: str | None) -> None:
    assert GpuHealthy().check(request(), NodeView("a"), reading, EMPTY_BOOK) == expected


@pytest.mark.parametrize(("reservations", "expected"), [
    ([], None),
    ([booked("a", 0, 1, holder="other/prod@a:v1")], None),
    ([booked("b", 0, 1, holder=HOLDER)], None),
    ([booked("a", 0, 1, holder="other/prod@a:v1"), booked("a", 0, 1, holder=HOLDER)],
     f"already holds an engine of {HOLDER}"),
], ids=["empty", "other-holder", "same-holder-other-node", "same-holder"])
def test_anti_affinity(reservations: list[Reservation], expected: str | None) -> None:
    book = Ledger(reservations, HOLDER).book("a", "GPU-a-0")
    assert AntiAffinity().check(request(), NodeView("a"), gpu(), book) == expected


def _fits(total: float, used: float, reservations: list[Reservation],
          asked: PlacementRequest) -> str | None:
    book = Ledger(reservations, asked.holder).book("a", "GPU-a-0")
    return FitsMemory().check(asked, NodeView("a"), gpu(0, total, used), book)


@pytest.mark.parametrize(("total", "used", "reservations", "asked", "expected"), [
    # 80 GiB x 5% = 4 GiB headroom; 21.4 / 80 = 0.2675 exactly, so the booking is 21.4 GiB.
    (80, 0, [booked("a", 0, 57.8)], request(21.4),
     ("needs 21.4 GiB, 18.2 GiB bookable: 80.0 GiB total - 4.0 GiB headroom - 57.8 GiB booked"
      " - 0.0 GiB used by others")),
    (80, 0, [booked("a", 0, 56)], request(20), None),
    (80, 0, [], request(76), None),
    (80, 0, [], request(76.01),
     ("needs 76.0 GiB, 76.0 GiB bookable: 80.0 GiB total"
      " - 4.0 GiB headroom - 0.0 GiB booked - 0.0 GiB used by others")),
    (80, 0, [], request(80, headroom=0), None),
    # Foreign use: 30 GiB used, of which 10 GiB is our loaded engine, so 20 GiB is someone else's.
    (80, 30, [booked("a", 0, 10, active=True)], request(47),
     ("needs 47.0 GiB, 46.0 GiB bookable: 80.0 GiB total - 4.0 GiB headroom - 10.0 GiB booked"
      " - 20.0 GiB used by others")),
    (80, 30, [booked("a", 0, 10, active=True)], request(46), None),
    # A booked engine that has not loaded yet: "used" does not show it, the booking counts.
    (80, 0, [booked("a", 0, 60, active=False)], request(20),
     ("needs 20.0 GiB, 16.0 GiB bookable: 80.0 GiB total - 4.0 GiB headroom - 60.0 GiB booked"
      " - 0.0 GiB used by others")),
    # A loaded engine whose memory "used" already shows is not counted twice.
    (80, 60, [booked("a", 0, 60, active=True)], request(16), None),
    # "used" lagging behind a loaded engine does not make foreign use negative.
    (80, 5, [booked("a", 0, 60, active=True)], request(16.01),
     ("needs 16.0 GiB, 16.0 GiB bookable: 80.0 GiB total - 4.0 GiB headroom - 60.0 GiB booked"
      " - 0.0 GiB used by others")),
    (24, 30, [], request(1),
     ("needs 1.0 GiB, 0.0 GiB bookable: 24.0 GiB total - 1.2 GiB headroom"
      " - 0.0 GiB booked - 30.0 GiB used by others")),
], ids=["brief-example", "fits", "fills-usable", "over-usable", "no-headroom", "foreign-refused",
        "foreign-fits", "inactive-counted", "active-not-twice", "used-lags", "over-full"])
def test_fits_memory(total: float, used: float, reservations: list[Reservation],
                     asked: PlacementRequest, expected: str | None) -> None:
    assert _fits(total, used, reservations, asked) == expected


def test_fits_memory_checks_the_booking_vllm_takes_not_the_estimate() -> None:
    # 10 GiB + 1 byte of 80 GiB is a utilization of 0.1251 after rounding up, so vLLM takes
    # ceil(0.1251 x 80 GiB) = 10.008 GiB: a GPU with only 10 GiB + 1 byte bookable cannot hold it.
    asked = replace(request(headroom=0), bytes_per_gpu=10 * GIB + 1)
    vllm_takes = math.ceil(80 * GIB * 0.1251)
    assert vllm_takes > 10 * GIB + 1
    too_much = [Reservation("a", "GPU-a-0", 70 * GIB - 1, "other")]
    assert _fits(80, 0, too_much, asked) == (
        "needs 10.0 GiB, 10.0 GiB bookable: 80.0 GiB total - 0.0 GiB headroom - 70.0 GiB booked"
        " - 0.0 GiB used by others")
    exactly = [Reservation("a", "GPU-a-0", 80 * GIB - vllm_takes, "other")]
    assert _fits(80, 0, exactly, asked) is None
    one_byte_short = [Reservation("a", "GPU-a-0", 80 * GIB - vllm_takes + 1, "other")]
    assert _fits(80, 0, one_byte_short, asked) is not None


@pytest.mark.parametrize(("tp", "replicas", "passing", "expected"), [
    (1, 1, [80], None),
    (2, 1, [80, 80], None),
    (2, 1, [80, 48, 80], None),
    (2, 2, [80] * 4, None),
    (1, 1, [],
     ("needs 1 GPU, none of its "
      "8 GPUs passed the GPU rules")),
    (2, 2, [80] * 3,
     ("needs 4 GPUs of equal memory (2 engines x tensor parallelism 2), 3 passed "
      "the GPU rules: 3 x 80.0 GiB")),
    (2, 1, [80, 48],
     ("needs 2 GPUs of equal memory (1 engine x tensor parallelism 2), 2 passed "
      "the GPU rules: 1 x 80.0 GiB, 1 x 48.0 GiB")),
    (1, 2, [80, 48],
     ("needs 2 GPUs of equal memory (2 engines x tensor parallelism 1), 2 passed "
      "the GPU rules: 1 x 80.0 GiB, 1 x 48.0 GiB")),
], ids=["one", "tp2", "tp2-of-mixed", "two-tp2", "none-passed", "too-few", "unequal-tp",
        "unequal-replicas"])
def test_tensor_parallel(tp: int, replicas: int, passing: list[float],
                         expected: str | None) -> None:
    view = node("a", [80] * 8)
    gpus = [gpu(i, total) for i, total in enumerate(passing)]
    assert TensorParallel().check(request(tp=tp, replicas=replicas), view, gpus) == expected


def test_ledger_adds_up_reservations_per_gpu() -> None:
    ledger = Ledger([booked("a", 0, 10, active=True), booked("a", 0, 5, holder=HOLDER),
                     booked("a", 0, 1, holder=HOLDER), booked("b", 0, 7)], HOLDER)
    assert ledger.book("a", "GPU-a-0") == GpuBook(booked=gib(16), active=gib(10),
                                                  holds_holder=True)
    assert ledger.book("b", "GPU-b-0") == GpuBook(booked=gib(7), holds_holder=False)
    # Matched by node and UUID: the same UUID on another node is another GPU.
    assert ledger.book("b", "GPU-a-0") == EMPTY_BOOK == GpuBook(0, 0, False)
