"""Unit tests for llm_backend.scheduler: the per-level admission queue in front of the engine."""

from __future__ import annotations

import dataclasses
import queue
import random
import threading
import time

import pytest

from llm_backend.errors import BackendError, Unavailable
from llm_backend.scheduler import (
    AdmissionScheduler,
    QueuePolicy,
    QueueRejected,
)


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Recorder:
    """The scheduler's start and reject callbacks, recording what they were given."""

    def __init__(self) -> None:
        self.started: list[tuple[str, int]] = []
        self.rejected: list[tuple[str, QueueRejected]] = []

    def start(self, item: str, level: int) -> None:
        self.started.append((item, level))

    def reject(self, item: str, error: QueueRejected) -> None:
        self.rejected.append((item, error))

    @property
    def started_items(self) -> list[str]:
        return [item for item, _ in self.started]

    @property
    def rejected_items(self) -> list[str]:
        return [item for item, _ in self.rejected]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


def make(
    rec: Recorder,
    clock: FakeClock | None = None,
    *,
    capacity: int = 3,
    reserved: int = 1,
    urgent_level: int = 1,
    levels: int = 3,
    policies: dict[int, QueuePolicy] | None = None,
) -> AdmissionScheduler[str]:
    if policies is None:
        policies = {level: QueuePolicy() for level in range(1, levels + 1)}
    kwargs = {} if clock is None else {"clock": clock}
    return AdmissionScheduler(
        capacity=capacity, reserved=reserved, urgent_level=urgent_level, policies=policies,
        start=rec.start, reject=rec.reject, **kwargs,
    )


def waiting(sched: AdmissionScheduler) -> dict[int, int]:
    return sched.snapshot()[1]


def running(sched: AdmissionScheduler) -> dict[int, int]:
    return sched.snapshot()[0]


# -- errors --------------------------------------------------------------------------------------


def test_queue_rejected_is_unavailable():
    assert issubclass(QueueRejected, Unavailable)
    assert issubclass(QueueRejected, BackendError)
    error = QueueRejected("full")
    assert error.message == "full"
    assert str(error) == "full"


# -- construction --------------------------------------------------------------------------------


@pytest.mark.parametrize("capacity", [0, -1, -10])
def test_capacity_must_be_positive(rec, capacity):
    with pytest.raises(ValueError, match=f"capacity must be at least 1, got {capacity}"):
        make(rec, capacity=capacity, reserved=0)


@pytest.mark.parametrize(("capacity", "reserved"), [(1, 1), (3, 3), (3, 4), (2, -1)])
def test_reserved_must_leave_a_shared_slot(rec, capacity, reserved):
    with pytest.raises(ValueError) as info:
        make(rec, capacity=capacity, reserved=reserved)
    assert f"reserved slots must be in 0..{capacity - 1}, got {reserved}" == str(info.value)


@pytest.mark.parametrize(("capacity", "reserved", "shared"), [(1, 0, 1), (3, 1, 2), (8, 7, 1)])
def test_valid_construction(rec, capacity, reserved, shared):
    sched = make(rec, capacity=capacity, reserved=reserved)
    assert sched.capacity == capacity
    assert sched.reserved == reserved
    assert sched.shared_capacity == shared
    assert sched.running == 0
    assert sched.snapshot() == ({1: 0, 2: 0, 3: 0}, {1: 0, 2: 0, 3: 0})


def test_default_clock_is_monotonic(rec):
    assert make(rec).clock is time.monotonic


# -- starting at once ----------------------------------------------------------------------------


def test_starts_immediately_while_capacity_allows(rec, clock):
    sched = make(rec, clock, capacity=3, reserved=0)
    for item in ("a", "b", "c"):
        sched.submit(item, 3)
    assert rec.started == [("a", 3), ("b", 3), ("c", 3)]
    assert rec.rejected == []
    assert sched.running == 3
    assert sched.snapshot() == ({1: 0, 2: 0, 3: 3}, {1: 0, 2: 0, 3: 0})


def test_queues_once_capacity_is_taken(rec, clock):
    sched = make(rec, clock, capacity=2, reserved=0)
    sched.submit("a", 2)
    sched.submit("b", 3)
    sched.submit("c", 1)  # no reserved slot: even the most urgent level waits
    assert rec.started_items == ["a", "b"]
    assert sched.snapshot() == ({1: 0, 2: 1, 3: 1}, {1: 1, 2: 0, 3: 0})


def test_non_urgent_limited_to_shared_capacity(rec, clock):
    sched = make(rec, clock, capacity=3, reserved=1)
    sched.submit("s1", 3)
    sched.submit("s2", 3)
    sched.submit("s3", 3)  # the third slot is reserved for level 1
    sched.submit("e1", 2)  # level 2 is not urgent either
    assert rec.started_items == ["s1", "s2"]
    assert waiting(sched) == {1: 0, 2: 1, 3: 1}
    sched.submit("u1", 1)  # urgent: takes the reserved slot at once
    assert rec.started[-1] == ("u1", 1)
    assert sched.running == 3
    sched.submit("u2", 1)  # now all slots are taken, urgent or not
    assert rec.started_items == ["s1", "s2", "u1"]
    assert waiting(sched) == {1: 1, 2: 1, 3: 1}
    assert rec.rejected == []


def test_urgent_level_includes_every_level_up_to_it(rec, clock):
    sched = make(rec, clock, capacity=3, reserved=2, urgent_level=2)
    sched.submit("s1", 3)
    sched.submit("s2", 3)  # shared capacity is 1
    sched.submit("e1", 2)  # level 2 <= urgent_level: may use the reserved slots
    sched.submit("u1", 1)
    assert rec.started_items == ["s1", "e1", "u1"]
    assert waiting(sched) == {1: 0, 2: 0, 3: 1}


def test_urgent_requests_count_against_shared_capacity(rec, clock):
    # The reserved slots stay free for urgent work only while non-urgent work leaves them free:
    # urgent requests already running use up shared slots too.
    sched = make(rec, clock, capacity=3, reserved=1)
    sched.submit("u1", 1)
    sched.submit("u2", 1)
    sched.submit("s1", 3)
    assert rec.started_items == ["u1", "u2"]
    assert waiting(sched) == {1: 0, 2: 0, 3: 1}


def test_no_reserved_slots_means_one_shared_pool(rec, clock):
    sched = make(rec, clock, capacity=2, reserved=0)
    sched.submit("s1", 3)
    sched.submit("s2", 3)
    sched.submit("u1", 1)
    assert rec.started_items == ["s1", "s2"]
    assert waiting(sched) == {1: 1, 2: 0, 3: 0}


def test_single_level_single_slot(rec, clock):
    sched = make(rec, clock, capacity=1, reserved=0, levels=1)
    sched.submit("a", 1)
    sched.submit("b", 1)
    assert rec.started_items == ["a"]
    sched.release(1)
    assert rec.started_items == ["a", "b"]
    sched.release(1)
    assert sched.running == 0


# -- release and dispatch order ------------------------------------------------------------------


def test_release_starts_most_urgent_then_fifo(rec, clock):
    sched = make(rec, clock, capacity=2, reserved=0)
    sched.submit("run1", 3)
    sched.submit("run2", 3)
    for item, level in [("s1", 3), ("e1", 2), ("s2", 3), ("u1", 1), ("e2", 2), ("u2", 1)]:
        sched.submit(item, level)
    assert rec.started_items == ["run1", "run2"]
    assert waiting(sched) == {1: 2, 2: 2, 3: 2}

    order = []
    for _ in range(6):
        finished_level = rec.started[len(order)][1]
        sched.release(finished_level)
        order.append(rec.started[-1][0])
    assert order == ["u1", "u2", "e1", "e2", "s1", "s2"]
    assert waiting(sched) == {1: 0, 2: 0, 3: 0}
    assert rec.rejected == []


def test_release_fills_every_free_slot(rec, clock):
    sched = make(rec, clock, capacity=2, reserved=1)
    sched.submit("u1", 1)
    sched.submit("u2", 1)
    sched.submit("u3", 1)
    sched.submit("u4", 1)
    assert rec.started_items == ["u1", "u2"]
    sched.release(1)
    assert rec.started_items == ["u1", "u2", "u3"]
    assert sched.running == 2
    assert waiting(sched) == {1: 1, 2: 0, 3: 0}


def test_release_starts_at_most_the_free_slots(rec, clock):
    sched = make(rec, clock, capacity=3, reserved=0)
    for item in ("a", "b", "c", "d", "e", "f"):
        sched.submit(item, 3)
    sched.release(3)
    assert rec.started_items == ["a", "b", "c", "d"]
    assert running(sched) == {1: 0, 2: 0, 3: 3}
    assert waiting(sched) == {1: 0, 2: 0, 3: 2}


def test_waiting_non_urgent_level_does_not_block_urgent(rec, clock):
    sched = make(rec, clock, capacity=2, reserved=1)
    sched.submit("s1", 3)
    sched.submit("u1", 1)
    sched.submit("s2", 3)  # waits: the shared slot is taken
    sched.submit("u2", 1)  # waits: both slots are taken
    assert waiting(sched) == {1: 1, 2: 0, 3: 1}
    # The urgent request's slot frees: s2 is older, but only u2 may take the reserved slot.
    sched.release(1)
    assert rec.started_items == ["s1", "u1", "u2"]
    assert waiting(sched) == {1: 0, 2: 0, 3: 1}
    # With s2 still waiting, a new urgent request still starts at once.
    sched.release(1)
    assert rec.started_items == ["s1", "u1", "u2"]  # s2 still does not fit the shared slot
    sched.submit("u3", 1)
    assert rec.started_items == ["s1", "u1", "u2", "u3"]
    # Once the non-urgent request running finishes, s2 takes the shared slot.
    sched.release(3)
    assert rec.started_items == ["s1", "u1", "u2", "u3"]  # u3 keeps total at the shared limit
    sched.release(1)
    assert rec.started_items == ["s1", "u1", "u2", "u3", "s2"]
    assert sched.snapshot() == ({1: 0, 2: 0, 3: 1}, {1: 0, 2: 0, 3: 0})


def test_waiting_level_two_does_not_block_level_one_with_urgent_level_one(rec, clock):
    sched = make(rec, clock, capacity=3, reserved=1)
    sched.submit("e1", 2)
    sched.submit("e2", 2)
    sched.submit("e3", 2)
    sched.submit("s1", 3)
    sched.submit("u1", 1)
    assert rec.started_items == ["e1", "e2", "u1"]
    assert waiting(sched) == {1: 0, 2: 1, 3: 1}


def test_release_without_start_raises(rec, clock):
    sched = make(rec, clock)
    with pytest.raises(RuntimeError, match="release without start at priority level 2"):
        sched.release(2)
    sched.submit("a", 3)
    with pytest.raises(RuntimeError, match="priority level 1"):
        sched.release(1)  # a level with nothing running, though another level has work
    sched.release(3)
    with pytest.raises(RuntimeError, match="release without start at priority level 3"):
        sched.release(3)  # released twice
    assert sched.snapshot() == ({1: 0, 2: 0, 3: 0}, {1: 0, 2: 0, 3: 0})


# -- max_queue_size ------------------------------------------------------------------------------


def test_max_queue_size_rejects_at_submit(rec, clock):
    policies = {1: QueuePolicy(), 2: QueuePolicy(), 3: QueuePolicy(max_queue_size=2)}
    sched = make(rec, clock, capacity=1, reserved=0, policies=policies)
    sched.submit("run", 3)  # starting at once does not count against the queue size
    sched.submit("q1", 3)
    sched.submit("q2", 3)
    with pytest.raises(QueueRejected) as info:
        sched.submit("q3", 3)
    message = info.value.message
    assert "priority level 3" in message
    assert "max_queue_size" in message
    assert "2 waiting" in message
    assert isinstance(info.value, Unavailable)
    # Refused at submit: raised, neither started nor passed to the reject callback.
    assert rec.started_items == ["run"]
    assert rec.rejected == []
    assert waiting(sched) == {1: 0, 2: 0, 3: 2}


def test_max_queue_size_is_per_level(rec, clock):
    policies = {
        1: QueuePolicy(max_queue_size=1), 2: QueuePolicy(), 3: QueuePolicy(max_queue_size=1),
    }
    sched = make(rec, clock, capacity=1, reserved=0, policies=policies)
    sched.submit("run", 2)
    sched.submit("s1", 3)
    for item in ("e1", "e2", "e3"):
        sched.submit(item, 2)  # level 2 is unbounded
    sched.submit("u1", 1)
    with pytest.raises(QueueRejected, match="priority level 1 queue is full"):
        sched.submit("u2", 1)
    with pytest.raises(QueueRejected, match="priority level 3 queue is full"):
        sched.submit("s2", 3)
    assert waiting(sched) == {1: 1, 2: 3, 3: 1}


def test_max_queue_size_frees_up_when_items_start(rec, clock):
    policies = {1: QueuePolicy(max_queue_size=1)}
    sched = make(rec, clock, capacity=1, reserved=0, levels=1, policies=policies)
    sched.submit("a", 1)
    sched.submit("b", 1)
    with pytest.raises(QueueRejected):
        sched.submit("c", 1)
    sched.release(1)  # b starts, its queue place frees
    sched.submit("c", 1)
    assert rec.started_items == ["a", "b"]
    assert waiting(sched) == {1: 1}


def test_zero_max_queue_size_is_unbounded(rec, clock):
    sched = make(rec, clock, capacity=1, reserved=0, levels=1)
    for i in range(500):
        sched.submit(f"r{i}", 1)
    assert waiting(sched) == {1: 499}


# -- expire: timeouts ----------------------------------------------------------------------------


def timed_policies(**per_level: QueuePolicy) -> dict[int, QueuePolicy]:
    policies = {1: QueuePolicy(), 2: QueuePolicy(), 3: QueuePolicy()}
    policies.update({int(key[1:]): policy for key, policy in per_level.items()})
    return policies


def test_expire_rejects_past_deadline(rec, clock):
    policies = timed_policies(l3=QueuePolicy(default_timeout_s=10.0))
    sched = make(rec, clock, capacity=1, reserved=0, policies=policies)
    sched.submit("run", 3)
    sched.submit("late", 3)
    clock.advance(9.999)
    sched.expire()
    assert rec.rejected == []
    assert waiting(sched) == {1: 0, 2: 0, 3: 1}
    clock.advance(0.001)  # the deadline itself counts as past
    sched.expire()
    assert rec.rejected_items == ["late"]
    error = rec.rejected[0][1]
    assert isinstance(error, QueueRejected)
    assert "timed out" in error.message
    assert "priority level 3" in error.message
    assert "10000 ms" in error.message
    assert waiting(sched) == {1: 0, 2: 0, 3: 0}
    # A rejected item never starts afterwards.
    sched.release(3)
    assert rec.started_items == ["run"]
    assert sched.running == 0


def test_expire_keeps_items_within_deadline_in_order(rec, clock):
    policies = timed_policies(l3=QueuePolicy(default_timeout_s=5.0))
    sched = make(rec, clock, capacity=1, reserved=0, policies=policies)
    sched.submit("run", 3)
    sched.submit("old", 3)
    clock.advance(3)
    sched.submit("mid", 3)
    clock.advance(1)
    sched.submit("new", 3)
    clock.advance(1)  # old: 5 s, mid: 2 s, new: 1 s
    sched.expire()
    assert rec.rejected_items == ["old"]
    sched.release(3)
    sched.release(3)
    assert rec.started_items == ["run", "mid", "new"]


def test_expire_uses_each_levels_own_timeout(rec, clock):
    policies = timed_policies(
        l1=QueuePolicy(default_timeout_s=1.0),
        l2=QueuePolicy(default_timeout_s=2.0),
        l3=QueuePolicy(),  # no timeout
    )
    sched = make(rec, clock, capacity=1, reserved=0, policies=policies)
    sched.submit("run", 3)
    sched.submit("u", 1)
    sched.submit("e", 2)
    sched.submit("s", 3)
    clock.advance(1.5)
    sched.expire()
    assert rec.rejected_items == ["u"]
    assert "priority level 1" in rec.rejected[0][1].message
    clock.advance(1.0)
    sched.expire()
    assert rec.rejected_items == ["u", "e"]
    assert "priority level 2" in rec.rejected[1][1].message
    clock.advance(1e6)
    sched.expire()
    assert rec.rejected_items == ["u", "e"]
    assert waiting(sched) == {1: 0, 2: 0, 3: 1}


def test_expire_without_timeouts_rejects_nothing(rec, clock):
    sched = make(rec, clock, capacity=1, reserved=0)
    sched.submit("run", 3)
    sched.submit("a", 1)
    sched.submit("b", 3)
    clock.advance(1e9)
    sched.expire()
    assert rec.rejected == []
    assert waiting(sched) == {1: 1, 2: 0, 3: 1}


def test_started_items_never_time_out(rec, clock):
    policies = timed_policies(l3=QueuePolicy(default_timeout_s=1.0))
    sched = make(rec, clock, capacity=1, reserved=0, policies=policies)
    sched.submit("run", 3)
    sched.submit("next", 3)
    clock.advance(0.5)
    sched.release(3)  # "next" starts before its deadline
    clock.advance(10)
    sched.expire()
    assert rec.rejected == []
    assert rec.started_items == ["run", "next"]


def test_deadline_counts_from_submit_time(rec, clock):
    policies = timed_policies(l3=QueuePolicy(default_timeout_s=2.0))
    sched = make(rec, clock, capacity=1, reserved=0, policies=policies)
    sched.submit("run", 3)
    clock.advance(100)  # time passing before the submit does not count
    sched.submit("q", 3)
    clock.advance(1.9)
    sched.expire()
    assert rec.rejected == []
    clock.advance(0.1)
    sched.expire()
    assert rec.rejected_items == ["q"]


@pytest.mark.parametrize("requested", [1.0, 0.25])
def test_request_timeout_used_when_override_allowed(rec, clock, requested):
    policies = timed_policies(l3=QueuePolicy(default_timeout_s=10.0, allow_timeout_override=True))
    sched = make(rec, clock, capacity=1, reserved=0, policies=policies)
    sched.submit("run", 3)
    sched.submit("q", 3, timeout_s=requested)
    clock.advance(requested - 0.01)
    sched.expire()
    assert rec.rejected == []
    clock.advance(0.01)
    sched.expire()
    assert rec.rejected_items == ["q"]
    assert "timed out" in rec.rejected[0][1].message


def test_request_timeout_ignored_when_override_not_allowed(rec, clock):
    policies = timed_policies(l3=QueuePolicy(default_timeout_s=10.0, allow_timeout_override=False))
    sched = make(rec, clock, capacity=1, reserved=0, policies=policies)
    sched.submit("run", 3)
    sched.submit("q", 3, timeout_s=1.0)
    clock.advance(5)
    sched.expire()
    assert rec.rejected == []  # the request's own 1 s does not apply
    clock.advance(5)
    sched.expire()
    assert rec.rejected_items == ["q"]


def test_request_timeout_ignored_without_override_and_without_default(rec, clock):
    sched = make(rec, clock, capacity=1, reserved=0)
    sched.submit("run", 3)
    sched.submit("q", 3, timeout_s=1.0)
    clock.advance(1e6)
    sched.expire()
    assert rec.rejected == []


@pytest.mark.parametrize("requested", [None, 0, 0.0])
def test_unset_request_timeout_uses_default(rec, clock, requested):
    policies = timed_policies(l3=QueuePolicy(default_timeout_s=3.0, allow_timeout_override=True))
    sched = make(rec, clock, capacity=1, reserved=0, policies=policies)
    sched.submit("run", 3)
    sched.submit("q", 3, timeout_s=requested)
    clock.advance(2.99)
    sched.expire()
    assert rec.rejected == []
    clock.advance(0.01)
    sched.expire()
    assert rec.rejected_items == ["q"]


def test_request_timeout_is_per_request(rec, clock):
    policies = timed_policies(l3=QueuePolicy(default_timeout_s=10.0, allow_timeout_override=True))
    sched = make(rec, clock, capacity=1, reserved=0, policies=policies)
    sched.submit("run", 3)
    sched.submit("short", 3, timeout_s=1.0)
    sched.submit("default", 3)
    clock.advance(1)
    sched.expire()
    assert rec.rejected_items == ["short"]
    clock.advance(9)
    sched.expire()
    assert rec.rejected_items == ["short", "default"]


# -- expire: cancellations -----------------------------------------------------------------------


def test_expire_drops_cancelled(rec, clock):
    sched = make(rec, clock, capacity=1, reserved=0)
    sched.submit("run", 3)
    for item, level in [("a", 3), ("gone1", 3), ("b", 1), ("gone2", 2), ("c", 3)]:
        sched.submit(item, level)
    cancelled = {"gone1", "gone2", "run"}  # "run" is started: not the queue's business
    seen = []

    def is_cancelled(item: str) -> bool:
        seen.append(item)
        return item in cancelled

    sched.expire(is_cancelled)
    assert sorted(rec.rejected_items) == ["gone1", "gone2"]
    for _, error in rec.rejected:
        assert isinstance(error, QueueRejected)
        assert "cancelled" in error.message
    assert "run" not in seen  # only waiting items are asked about
    assert waiting(sched) == {1: 1, 2: 0, 3: 2}
    for _ in range(3):
        sched.release(rec.started[-1][1])
    assert rec.started_items == ["run", "b", "a", "c"]


def test_release_passes_over_cancelled_items_and_fills_the_slot(rec, clock):
    gone = {"gone1", "gone2"}
    sched = AdmissionScheduler(
        capacity=1, reserved=0, urgent_level=1,
        policies={level: QueuePolicy() for level in (1, 2, 3)},
        start=rec.start, reject=rec.reject, cancelled=lambda item: item in gone, clock=clock,
    )
    sched.submit("run", 3)
    for item in ("gone1", "gone2", "next", "later"):
        sched.submit(item, 3)
    sched.release(3)
    # The freed slot goes to the first waiting request whose client is still there.
    assert rec.started_items == ["run", "next"]
    assert rec.rejected_items == ["gone1", "gone2"]
    assert all("cancelled by the client" in error.message for _, error in rec.rejected)
    assert sched.snapshot() == ({1: 0, 2: 0, 3: 1}, {1: 0, 2: 0, 3: 1})


def test_cancelled_items_are_rejected_outside_the_lock(clock):
    sched: AdmissionScheduler[str]
    seen: list[tuple[dict[int, int], dict[int, int]]] = []

    def reject(item: str, error: QueueRejected) -> None:
        seen.append(sched.snapshot())  # would deadlock if called under the lock

    sched = AdmissionScheduler(
        capacity=1, reserved=0, urgent_level=1, policies={1: QueuePolicy()},
        start=lambda item, level: None, reject=reject, cancelled=lambda item: item == "gone",
        clock=clock,
    )
    sched.submit("run", 1)
    sched.submit("gone", 1)
    sched.release(1)
    assert seen == [({1: 0}, {1: 0})]


def test_expire_without_is_cancelled_keeps_everything(rec, clock):
    sched = make(rec, clock, capacity=1, reserved=0)
    sched.submit("run", 3)
    sched.submit("a", 3)
    sched.expire()
    sched.expire(None)
    assert rec.rejected == []
    assert waiting(sched) == {1: 0, 2: 0, 3: 1}


def test_expire_reports_timeout_and_cancellation_together(rec, clock):
    policies = timed_policies(l2=QueuePolicy(default_timeout_s=1.0))
    sched = make(rec, clock, capacity=1, reserved=0, policies=policies)
    sched.submit("run", 3)
    sched.submit("late", 2)
    sched.submit("cancelled", 3)
    sched.submit("kept", 3)
    clock.advance(1)
    sched.expire(lambda item: item == "cancelled")
    reasons = {item: error.message for item, error in rec.rejected}
    assert set(reasons) == {"late", "cancelled"}
    assert "timed out" in reasons["late"]
    assert "cancelled" in reasons["cancelled"]
    assert waiting(sched) == {1: 0, 2: 0, 3: 1}


def test_reject_callback_runs_outside_the_lock(clock):
    # The model answers a rejected request from the callback; the scheduler must be usable there.
    calls: list[tuple[dict[int, int], dict[int, int]]] = []
    sched: AdmissionScheduler[str]

    def reject(item: str, error: QueueRejected) -> None:
        calls.append(sched.snapshot())

    sched = AdmissionScheduler(
        capacity=1, reserved=0, urgent_level=1,
        policies={1: QueuePolicy(default_timeout_s=1.0)},
        start=lambda item, level: None, reject=reject, clock=clock,
    )
    sched.submit("run", 1)
    sched.submit("q", 1)
    clock.advance(1)
    worker = threading.Thread(target=sched.expire, daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert not worker.is_alive(), "expire() deadlocked calling reject"
    assert calls == [({1: 1}, {1: 0})]


# -- close ---------------------------------------------------------------------------------------


def test_close_returns_waiting_items(rec, clock):
    sched = make(rec, clock, capacity=1, reserved=0)
    sched.submit("run", 3)
    for item, level in [("s1", 3), ("u1", 1), ("e1", 2), ("s2", 3)]:
        sched.submit(item, level)
    left = sched.close()
    assert left == ["u1", "e1", "s1", "s2"]  # by level, then FIFO
    assert rec.rejected == []  # the caller answers them
    assert sched.snapshot() == ({1: 0, 2: 0, 3: 1}, {1: 0, 2: 0, 3: 0})


def test_close_with_nothing_waiting(rec, clock):
    sched = make(rec, clock)
    assert sched.close() == []
    assert sched.close() == []  # closing twice is harmless


def test_submit_after_close_raises(rec, clock):
    sched = make(rec, clock, capacity=2, reserved=0)
    sched.close()
    for level in (1, 2, 3):
        with pytest.raises(QueueRejected, match="unloading"):
            sched.submit("late", level)
    assert rec.started == []
    assert sched.running == 0


def test_running_items_finish_after_close(rec, clock):
    sched = make(rec, clock, capacity=1, reserved=0)
    sched.submit("run", 3)
    sched.submit("waiting", 3)
    assert sched.close() == ["waiting"]
    sched.release(3)  # nothing left to start
    assert rec.started_items == ["run"]
    assert sched.running == 0
    sched.expire(lambda item: True)
    assert rec.rejected == []


# -- snapshot and running ------------------------------------------------------------------------


def test_snapshot_counts(rec, clock):
    sched = make(rec, clock, capacity=4, reserved=1)
    sched.submit("u1", 1)
    sched.submit("e1", 2)
    sched.submit("s1", 3)
    sched.submit("s2", 3)  # shared capacity 3 is taken
    sched.submit("e2", 2)
    sched.submit("u2", 1)  # the reserved slot
    sched.submit("u3", 1)
    assert sched.snapshot() == ({1: 2, 2: 1, 3: 1}, {1: 1, 2: 1, 3: 1})
    assert sched.running == 4
    sched.release(3)
    assert sched.snapshot() == ({1: 3, 2: 1, 3: 0}, {1: 0, 2: 1, 3: 1})
    assert sched.running == 4


def test_snapshot_returns_copies(rec, clock):
    sched = make(rec, clock)
    running_counts, waiting_counts = sched.snapshot()
    running_counts[1] = 99
    waiting_counts[1] = 99
    assert sched.snapshot() == ({1: 0, 2: 0, 3: 0}, {1: 0, 2: 0, 3: 0})


def test_snapshot_lists_every_configured_level(rec, clock):
    sched = make(rec, clock, levels=5, capacity=2, reserved=1)
    assert sched.snapshot() == ({1: 0, 2: 0, 3: 0, 4: 0, 5: 0}, {1: 0, 2: 0, 3: 0, 4: 0, 5: 0})


# -- wait_idle (real time) -----------------------------------------------------------------------


def test_wait_idle_true_when_nothing_runs(rec):
    sched = make(rec)
    begun = time.monotonic()
    assert sched.wait_idle(0.0) is True
    assert sched.wait_idle(5.0) is True
    assert time.monotonic() - begun < 4.0  # it did not wait its 5 s


def test_wait_idle_false_when_work_stays(rec):
    sched = make(rec)
    sched.submit("run", 3)
    begun = time.monotonic()
    assert sched.wait_idle(0.02) is False
    elapsed = time.monotonic() - begun
    assert 0.02 <= elapsed < 2.0
    assert sched.running == 1


def test_wait_idle_ignores_waiting_items_once_closed(rec):
    sched = make(rec, capacity=1, reserved=0)
    sched.submit("run", 3)
    sched.submit("q", 3)
    sched.close()
    sched.release(3)
    assert sched.wait_idle(0.01) is True


def test_wait_idle_true_once_released_by_another_thread(rec):
    sched = make(rec, capacity=2, reserved=0)
    sched.submit("a", 3)
    sched.submit("b", 2)
    timer_a = threading.Timer(0.02, sched.release, args=(3,))
    timer_b = threading.Timer(0.04, sched.release, args=(2,))
    timer_a.start()
    timer_b.start()
    try:
        begun = time.monotonic()
        assert sched.wait_idle(5.0) is True
        assert time.monotonic() - begun < 4.0
    finally:
        timer_a.cancel()
        timer_b.cancel()
    assert sched.running == 0


# -- concurrency ---------------------------------------------------------------------------------


def test_concurrent_submit_and_release_respect_capacity():
    capacity, reserved, levels = 4, 1, 3
    started: queue.Queue[tuple[int, int]] = queue.Queue()
    active = {"total": 0, "max": 0, "max_non_urgent_before": 0}
    seen: list[int] = []
    lock = threading.Lock()

    def start(item: int, level: int) -> None:
        # The count drops before each release(), so it never exceeds the scheduler's own.
        with lock:
            if level > 1:
                active["max_non_urgent_before"] = max(
                    active["max_non_urgent_before"], active["total"]
                )
            active["total"] += 1
            active["max"] = max(active["max"], active["total"])
            seen.append(item)
        started.put((item, level))

    sched: AdmissionScheduler[int] = AdmissionScheduler(
        capacity=capacity, reserved=reserved, urgent_level=1,
        policies={level: QueuePolicy() for level in range(1, levels + 1)},
        start=start, reject=lambda item, error: pytest.fail(f"rejected {item}: {error}"),
    )
    per_thread, threads = 50, 6

    def producer(seed: int) -> None:
        rng = random.Random(seed)
        for i in range(per_thread):
            sched.submit(seed * 1000 + i, rng.randint(1, levels))

    def consumer() -> None:
        for _ in range(per_thread * threads):
            _, level = started.get(timeout=10)
            with lock:
                active["total"] -= 1
            sched.release(level)

    workers = [threading.Thread(target=producer, args=(n,)) for n in range(threads)]
    finisher = threading.Thread(target=consumer)
    finisher.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=20)
    finisher.join(timeout=20)
    assert not finisher.is_alive()
    assert len(seen) == len(set(seen)) == per_thread * threads
    assert active["max"] <= capacity
    # A non-urgent start never took one of the reserved slots.
    assert active["max_non_urgent_before"] < capacity - reserved
    assert sched.snapshot() == ({1: 0, 2: 0, 3: 0}, {1: 0, 2: 0, 3: 0})


# -- QueuePolicy ---------------------------------------------------------------------------------


def test_queue_policy_defaults():
    policy = QueuePolicy()
    assert policy.max_queue_size == 0
    assert policy.default_timeout_s == 0.0
    assert policy.allow_timeout_override is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.max_queue_size = 3  # type: ignore[misc]


@pytest.mark.parametrize("raw", [None, {}])
def test_queue_policy_from_empty_config(raw):
    assert QueuePolicy.from_config(raw) == QueuePolicy()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"max_queue_size": 16}, QueuePolicy(max_queue_size=16)),
        ({"max_queue_size": "16"}, QueuePolicy(max_queue_size=16)),
        ({"max_queue_size": 0}, QueuePolicy()),
        ({"default_timeout_microseconds": "30000000"}, QueuePolicy(default_timeout_s=30.0)),
        ({"default_timeout_microseconds": 1500}, QueuePolicy(default_timeout_s=0.0015)),
        ({"default_timeout_microseconds": "0"}, QueuePolicy()),
        ({"allow_timeout_override": True}, QueuePolicy(allow_timeout_override=True)),
        ({"allow_timeout_override": False}, QueuePolicy()),
        ({"timeout_action": "REJECT"}, QueuePolicy()),
        (
            {"max_queue_size": "16", "default_timeout_microseconds": "30000000",
             "allow_timeout_override": True, "timeout_action": "REJECT"},
            QueuePolicy(max_queue_size=16, default_timeout_s=30.0, allow_timeout_override=True),
        ),
    ],
)
def test_queue_policy_from_config(raw, expected):
    policy = QueuePolicy.from_config(raw)
    assert policy == expected
    assert type(policy.max_queue_size) is int
    assert isinstance(policy.default_timeout_s, float)
    assert type(policy.allow_timeout_override) is bool


@pytest.mark.parametrize(
    ("policy", "requested", "expected"),
    [
        (QueuePolicy(default_timeout_s=10.0), None, 10.0),
        (QueuePolicy(default_timeout_s=10.0), 2.0, 10.0),  # override not allowed
        (QueuePolicy(default_timeout_s=10.0, allow_timeout_override=True), 2.0, 2.0),
        (QueuePolicy(default_timeout_s=10.0, allow_timeout_override=True), None, 10.0),
        (QueuePolicy(default_timeout_s=10.0, allow_timeout_override=True), 0.0, 10.0),
        (QueuePolicy(), None, 0.0),
        (QueuePolicy(), 5.0, 0.0),
    ],
)
def test_queue_policy_timeout_for(policy, requested, expected):
    assert policy.timeout_for(requested) == expected


# -- Triton's override rule and unsupported actions ------------------------------------------------


def test_request_timeout_may_only_shorten_the_default_like_triton():
    policy = QueuePolicy(default_timeout_s=10, allow_timeout_override=True)
    assert policy.timeout_for(2) == 2
    assert policy.timeout_for(60) == 10
    assert QueuePolicy(default_timeout_s=0, allow_timeout_override=True).timeout_for(5) == 0


def test_delay_timeout_action_is_refused():
    with pytest.raises(ValueError, match="DELAY"):
        QueuePolicy.from_config({"timeout_action": "DELAY"})
