"""Fair-share preemption in the admission queue: a tenant with nothing running takes a slot from
the tenant holding the most, the victim resumes first of its tenant's, and nothing thrashes."""

from __future__ import annotations

import pytest

from llm_backend.scheduler import MAX_PREEMPTIONS, AdmissionScheduler, QueuePolicy
from tests.unit.test_scheduler import FakeClock, Recorder


class Preempting(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.preempted: list[tuple[str, str]] = []
        self.unstoppable: set[str] = set()

    def preempt(self, victim: str, item: str) -> None:
        self.preempted.append((victim, item))

    def preemptible(self, item: str) -> bool:
        return item not in self.unstoppable


def two_slots(rec: Preempting, clock: FakeClock | None = None,
              policies: dict[int, QueuePolicy] | None = None) -> AdmissionScheduler[str]:
    return AdmissionScheduler(
        capacity=2, reserved=0, urgent_level=1,
        policies=policies or {level: QueuePolicy() for level in (1, 2, 3)},
        start=rec.start, reject=rec.reject, preempt=rec.preempt, preemptible=rec.preemptible,
        **({"clock": clock} if clock else {}))


@pytest.fixture
def rec() -> Preempting:
    return Preempting()


def test_a_newcomer_takes_the_slot_of_the_latest_request_of_the_tenant_holding_both(rec):
    sched = two_slots(rec)
    for name in ("a0", "a1", "a2"):
        sched.submit(name, 3, tenant="a")
    sched.submit("b0", 3, tenant="b")
    assert rec.started_items == ["a0", "a1"]
    # a1 started last: the least work to redo.
    assert rec.preempted == [("a1", "b0")]
    # Both count until a1 has stopped: nothing else starts in between.
    assert sched.running == 3
    sched.release(3, "a0")
    assert rec.started_items == ["a0", "a1"]
    # a1 stops early: it waits again, ahead of a2, and takes the next free slot.
    sched.release(3, "a1", stopped_early=True)
    assert rec.started_items == ["a0", "a1", "a1"]
    assert sched.snapshot() == ({1: 0, 2: 0, 3: 2}, {1: 0, 2: 0, 3: 1})


def test_a_victim_that_finished_before_it_was_stopped_is_not_queued_again(rec):
    sched = two_slots(rec)
    sched.submit("a0", 3, tenant="a")
    sched.submit("a1", 3, tenant="a")
    sched.submit("b0", 3, tenant="b")
    sched.release(3, "a1")  # it ended on its own
    assert sched.snapshot()[1][3] == 0
    assert sched.running == 2


@pytest.mark.parametrize("case", ["newcomer already runs", "victim holds one slot",
                                  "victim more urgent", "not preemptible", "same tenant"])
def test_when_nothing_is_preempted(rec, case):
    sched = two_slots(rec)
    if case == "newcomer already runs":
        sched.submit("a0", 3, tenant="a")
        sched.submit("b0", 3, tenant="b")
        sched.submit("b1", 3, tenant="b")
    elif case == "victim holds one slot":
        sched.submit("a0", 3, tenant="a")
        sched.submit("c0", 3, tenant="c")
        sched.submit("b0", 3, tenant="b")
    elif case == "victim more urgent":
        sched.submit("a0", 2, tenant="a")
        sched.submit("a1", 2, tenant="a")
        sched.submit("b0", 3, tenant="b")
    elif case == "not preemptible":
        rec.unstoppable |= {"a0", "a1"}
        sched.submit("a0", 3, tenant="a")
        sched.submit("a1", 3, tenant="a")
        sched.submit("b0", 3, tenant="b")
    else:
        sched.submit("a0", 3, tenant="a")
        sched.submit("a1", 3, tenant="a")
        sched.submit("a2", 3, tenant="a")
    assert rec.preempted == []
    assert sched.running == 2


def test_a_more_urgent_newcomer_may_take_a_less_urgent_slot(rec):
    sched = two_slots(rec)
    sched.submit("a0", 3, tenant="a")
    sched.submit("a1", 3, tenant="a")
    sched.submit("b0", 2, tenant="b")
    assert rec.preempted == [("a1", "b0")]


def test_no_preemption_without_the_callback():
    rec = Recorder()
    sched = AdmissionScheduler(capacity=2, reserved=0, urgent_level=1,
                               policies={3: QueuePolicy()}, start=rec.start, reject=rec.reject)
    for name in ("a0", "a1"):
        sched.submit(name, 3, tenant="a")
    sched.submit("b0", 3, tenant="b")
    assert rec.started_items == ["a0", "a1"] and sched.snapshot()[1][3] == 1


def test_a_request_is_preempted_at_most_max_preemptions_times(rec):
    sched = two_slots(rec)
    sched.submit("a0", 3, tenant="a")
    sched.submit("a1", 3, tenant="a")
    rec.unstoppable.add("a0")
    for round_ in range(MAX_PREEMPTIONS + 1):
        newcomer = f"n{round_}"
        sched.submit(newcomer, 3, tenant=newcomer)
        if round_ == MAX_PREEMPTIONS:
            break
        assert rec.preempted[-1] == ("a1", newcomer)
        sched.release(3, "a1", stopped_early=True)
        sched.release(3, newcomer)  # the newcomer ends; a1 resumes in its slot
        assert rec.started_items[-1] == "a1"
    assert len(rec.preempted) == MAX_PREEMPTIONS  # the last newcomer waits
    assert sched.snapshot()[1][3] == 1


def test_a_preempted_request_never_times_out_while_it_waits_again(rec):
    clock = FakeClock()
    sched = two_slots(rec, clock, {3: QueuePolicy(default_timeout_s=1.0)})
    sched.submit("a0", 3, tenant="a")
    sched.submit("a1", 3, tenant="a")
    sched.submit("b0", 3, tenant="b")
    sched.release(3, "a1", stopped_early=True)
    clock.advance(60)
    sched.expire()
    assert rec.rejected == []
    sched.release(3, "b0")
    assert rec.started_items[-1] == "a1"


def test_the_tenant_snapshot_counts_running_waiting_and_preempted(rec):
    sched = two_slots(rec)
    for name in ("a0", "a1", "a2"):
        sched.submit(name, 3, tenant="a")
    sched.submit("b0", 3, tenant="b")
    sched.submit("b1", 3, tenant="b")
    # a1 is being stopped: it no longer counts as a's.
    assert sched.tenant_snapshot() == {"a": (1, 1, 1), "b": (1, 1, 0)}
    sched.release(3, "a1", stopped_early=True)
    assert sched.tenant_snapshot() == {"a": (1, 2, 1), "b": (1, 1, 0)}


def test_pauses_are_spread_over_the_tenants_requests(rec):
    sched = two_slots(rec)
    sched.submit("a0", 3, tenant="a")
    sched.submit("a1", 3, tenant="a")
    sched.submit("b0", 3, tenant="b")
    assert rec.preempted == [("a1", "b0")]
    sched.release(3, "a1", stopped_early=True)
    sched.release(3, "b0")  # a1 resumes
    sched.submit("b1", 3, tenant="b")
    # a1 started last, but has been paused once already: a0's turn.
    assert rec.preempted[-1] == ("a0", "b1")


def test_a_newcomer_just_served_takes_a_slot_once_the_holder_has_had_as_much(rec):
    sched = two_slots(rec)
    sched.submit("a0", 3, tenant="a", prompt_tokens=10)
    sched.submit("a1", 3, tenant="a", prompt_tokens=10)
    sched.submit("b0", 3, tenant="b", prompt_tokens=10)
    assert rec.preempted == [("a1", "b0")]
    sched.release(3, "a1", stopped_early=True)
    sched.generated("b0", 30)  # b is served well past a's counter
    sched.release(3, "b0")
    sched.submit("b1", 3, tenant="b", prompt_tokens=10)
    # b had more service than a: it waits, first in line, while a's requests run.
    assert len(rec.preempted) == 1 and sched.snapshot()[1][3] == 1
    sched.generated("a0", 10)
    assert len(rec.preempted) == 1
    sched.generated("a0", 30)  # now a has had as much: b takes a slot (a0: never paused yet)
    assert rec.preempted[-1] == ("a0", "b1")
    assert sched.tenant_snapshot()["b"] == (1, 0, 0)
