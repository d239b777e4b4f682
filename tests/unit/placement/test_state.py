"""FleetState: readings and bookings kept current between decisions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from control_plane.gpus.readings import GpuHealth
from control_plane.placement.accounting import EMPTY_BOOK, GpuBook, Ledger
from control_plane.placement.filters import READING_GPU_FILTERS
from control_plane.placement.model import Placement, Verdict
from control_plane.placement.place import place, place_on_fleet
from control_plane.placement.state import FleetState

from .fleet import HOLDER, booked, gib, gpu, node, request


def test_booking_and_releasing_keep_the_sums_of_a_fresh_ledger() -> None:
    first, second = booked("a", 0, 10, active=True), booked("a", 0, 5, holder=HOLDER)
    ledger = Ledger([first])
    ledger.add(second)
    ledger.add(second)
    assert ledger.book("a", "GPU-a-0", HOLDER) == GpuBook(gib(20), gib(10), holds_holder=True)
    ledger.remove(second)
    assert ledger.book("a", "GPU-a-0", HOLDER) == GpuBook(gib(15), gib(10), holds_holder=True)
    ledger.remove(second)
    assert ledger.book("a", "GPU-a-0", HOLDER) == GpuBook(gib(10), gib(10))
    ledger.remove(first)
    # Nothing left: the GPU and its node are gone from the books, as in a fresh ledger.
    assert ledger.node("a") == {} and ledger.book("a", "GPU-a-0") == EMPTY_BOOK
    assert ledger.reservations() == [] and not ledger.held_by(HOLDER)


def test_releasing_what_was_not_booked_says_so() -> None:
    ledger = Ledger([booked("a", 0, 10)])
    with pytest.raises(KeyError, match="no such reservation to release"):
        ledger.remove(booked("a", 0, 11))
    assert ledger.reservations() == [booked("a", 0, 10)]


def test_a_kept_state_sees_new_bookings_and_readings() -> None:
    state = FleetState([node("a", [80]), node("b", [80])])
    first = place_on_fleet(request(60), state)
    assert isinstance(first, Placement) and first.node == "a"
    state.book(first.reservations)
    # a's GPU is booked now: the next engine goes to b.
    second = place_on_fleet(request(60, holder="code/prod@a:v1"), state)
    assert isinstance(second, Placement) and second.node == "b"
    # b's GPU is read as lost: nowhere is left, and the refusal says why for each GPU.
    lost = replace(gpu(0, node="b"), health=GpuHealth.LOST, memory_used_bytes=None)
    state.set_node(replace(node("b", [80]), gpus=(lost,)))
    refused = place_on_fleet(request(60, holder="code/prod@a:v1"), state)
    assert not isinstance(refused, Placement)
    assert [(v.node, v.rule) for v in refused.verdicts] == [
        ("a", "fits-memory"), ("a", "tensor-parallel"), ("b", "gpu-healthy"),
        ("b", "tensor-parallel")]
    state.release(first.reservations)
    again = place_on_fleet(request(60, holder="code/prod@a:v1"), state)
    assert isinstance(again, Placement) and again.node == "a"
    state.remove_node("a")
    assert state.names == ["b"] and state.view("a") is None


def test_a_kept_state_decides_as_place_does() -> None:
    views = [node("b", [80, 80, 48]), node("a", [24, 24]), node("c", [80] * 4, excluded=(1,))]
    reservations = [booked("b", 0, 30), booked("c", 2, 50, active=True)]
    state = FleetState(views, reservations)
    for asked in (request(10), request(20, tp=2), request(30, replicas=2), request(70)):
        assert place_on_fleet(asked, state) == place(asked, views, reservations)


@pytest.mark.parametrize("reading_filter", READING_GPU_FILTERS, ids=lambda f: f.name)
def test_reading_rules_read_neither_the_request_nor_the_bookings(reading_filter: object) -> None:
    # FleetState checks them once per reading: their answer must not change with either.
    view = node("a", [80, 80], excluded=(1,))
    for reading in (*view.gpus, replace(gpu(0), health=GpuHealth.UNHEALTHY, detail="XID 79")):
        answers = {reading_filter.check(asked, view, reading, book)  # type: ignore[attr-defined]
                   for asked in (request(1), request(70, tp=2, holder="x/y@a:v1"))
                   for book in (EMPTY_BOOK, GpuBook(gib(79), gib(10), holds_holder=True))}
        assert len(answers) == 1


def test_passed_over_says_what_the_decision_saw_whenever_it_is_read() -> None:
    # The verdicts are worked out when first read: bookings made since must not change them.
    views, reservations = [node("a", [80, 80])], [booked("a", 0, 70)]
    state = FleetState(views, reservations)
    placement = place_on_fleet(request(20), state)
    assert isinstance(placement, Placement) and placement.engines == ((1,),)
    state.book(placement.reservations)
    state.release(reservations)
    state.set_node(node("a", [80, 80], used=[0, 60]))
    assert placement.passed_over == (Verdict(
        "a", "fits-memory", "needs 20.0 GiB, 6.0 GiB bookable: 80.0 GiB total - 4.0 GiB "
        "headroom - 70.0 GiB booked - 0.0 GiB used by others", 0, "GPU-a-0"),)
    assert placement == place(request(20), views, reservations)
    assert len(placement.passed_over) == 1 and placement.passed_over[0].gpu_index == 0
