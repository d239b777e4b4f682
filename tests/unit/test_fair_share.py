"""Fair share inside a priority level (the Virtual Token Counter): a tenant that arrives behind
another's backlog is not stuck behind it, weights divide the service while both wait, an idle
tenant banks no credit, and requests without a tenant share one counter."""

from __future__ import annotations

from collections import Counter

from llm_backend.fair_share import INPUT_WEIGHT, OUTPUT_WEIGHT, SHARED, VirtualCounters
from llm_backend.scheduler import AdmissionScheduler, QueuePolicy
from tests.unit.test_scheduler import Recorder


def one_slot(rec: Recorder) -> AdmissionScheduler[str]:
    return AdmissionScheduler(capacity=1, reserved=0, urgent_level=1,
                              policies={1: QueuePolicy(), 2: QueuePolicy(), 3: QueuePolicy()},
                              start=rec.start, reject=rec.reject)


def serve_next(sched: AdmissionScheduler[str], rec: Recorder, output_tokens: int = 10) -> str:
    """The running request generates its tokens and ends; the next one starts."""
    item, level = rec.started[-1]
    sched.generated(item, output_tokens)
    sched.release(level, item)
    return rec.started[-1][0]


def test_a_tenant_behind_anothers_backlog_starts_within_two_slots() -> None:
    rec = Recorder()
    sched = one_slot(rec)
    for index in range(10):
        sched.submit(f"a{index}", 3, tenant="a", prompt_tokens=20)
    sched.submit("b0", 3, tenant="b", prompt_tokens=20)
    order = [rec.started_items[0]] + [serve_next(sched, rec) for _ in range(3)]
    # FIFO would start b0 eleventh, after the whole backlog.
    assert order.index("b0") <= 2, order


def test_weights_divide_the_service_while_both_wait() -> None:
    rec = Recorder()
    sched = one_slot(rec)
    for index in range(60):
        sched.submit(f"a{index}", 3, tenant="a", weight=2.0, prompt_tokens=10)
        sched.submit(f"b{index}", 3, tenant="b", weight=1.0, prompt_tokens=10)
    for _ in range(60):
        serve_next(sched, rec)
    served = Counter(item[0] for item in rec.started_items)
    # Equal requests (10 in, 10 out): service follows the 2:1 weights, within one request.
    assert abs(served["a"] - 2 * served["b"]) <= 3, served


def test_levels_still_come_first() -> None:
    rec = Recorder()
    sched = one_slot(rec)
    sched.submit("running", 3, tenant="a")
    sched.submit("b-low", 3, tenant="b")
    sched.submit("a-urgent", 1, tenant="a")
    assert serve_next(sched, rec) == "a-urgent"  # a's counter is higher, but level 1 wins


def test_an_idle_tenant_banks_no_credit() -> None:
    counters = VirtualCounters()
    counters.arrive("a", 1.0, set())
    counters.started("a", 100)
    counters.generated("a", 50)
    counters.finished("a")
    counters.arrive("b", 1.0, set())  # nobody busy: history is forgotten
    assert counters.of("b") == 0.0 and counters.of("a") == 0.0
    counters.started("b", 10)
    # a comes back while b runs: lifted to b's counter, not below it.
    counters.arrive("a", 1.0, set())
    assert counters.of("a") == counters.of("b") == 10 * INPUT_WEIGHT


def test_service_is_weighted_tokens_divided_by_the_weight() -> None:
    counters = VirtualCounters()
    counters.arrive("a", 4.0, set())
    counters.started("a", 8)
    counters.generated("a", 2)
    assert counters.of("a") == (8 * INPUT_WEIGHT + 2 * OUTPUT_WEIGHT) / 4.0


def test_requests_without_a_tenant_share_one_counter_and_expire_and_close_still_work() -> None:
    rec = Recorder()
    sched = one_slot(rec)
    sched.submit("first", 3)
    sched.submit("anon", 3)
    sched.submit("named", 3, tenant="x", prompt_tokens=5)
    assert sched.snapshot()[1][3] == 2
    # "first" and "anon" are one tenant: its 10 output tokens put "named" ahead.
    assert serve_next(sched, rec) == "named"
    assert sched.counters.of(SHARED) == 10 * OUTPUT_WEIGHT
    assert sched.close() == ["anon"]
