"""Unit tests for llm_backend.batcher_wakeup, with a recording send_noop."""

from __future__ import annotations

import threading
import time

import pytest

from llm_backend import batcher_wakeup as bw
from llm_backend.batcher_wakeup import (
    QUEUED_BEHIND_WORK_NS,
    WAKEUP_DELAY_S,
    BatcherWakeup,
    waited_behind_work,
)

pytestmark = pytest.mark.timeout(10)


class Recorder:
    def __init__(self, fail_first: int = 0) -> None:
        self.calls: list[int] = []
        self.threads: list[str] = []
        self.fail_first = fail_first
        self.attempts = 0
        self._lock = threading.Lock()

    def __call__(self, sent_at_ns: int) -> None:
        with self._lock:
            self.attempts += 1
            self.threads.append(threading.current_thread().name)
            if self.attempts <= self.fail_first:
                raise RuntimeError("BLS request failed")
            self.calls.append(sent_at_ns)


def wait_until(predicate, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.002)
    return predicate()


@pytest.fixture
def started():
    wakeups: list[BatcherWakeup] = []

    def make(send, **kwargs) -> BatcherWakeup:
        wakeup = BatcherWakeup(send, **kwargs)
        wakeup.start()
        wakeups.append(wakeup)
        return wakeup

    yield make
    for wakeup in wakeups:
        wakeup.stop()


def test_defaults():
    assert WAKEUP_DELAY_S == 0.001
    assert QUEUED_BEHIND_WORK_NS == 3_000_000


def test_nothing_sent_without_poke(started):
    recorder = Recorder()
    wakeup = started(recorder)
    time.sleep(0.05)
    assert recorder.calls == []
    assert wakeup.sent == 0


def test_one_poke_one_send(started):
    recorder = Recorder()
    wakeup = started(recorder)
    before = time.monotonic_ns()
    wakeup.poke()
    assert wait_until(lambda: len(recorder.calls) == 1)
    time.sleep(0.05)  # and no more follow
    assert len(recorder.calls) == 1
    assert wakeup.sent == 1
    sent_at = recorder.calls[0]
    assert type(sent_at) is int
    assert before <= sent_at <= time.monotonic_ns()
    assert recorder.threads == ["batcher-wakeup"]


@pytest.mark.parametrize("pokes", [2, 5, 20])
def test_several_pokes_as_many_sends(started, pokes):
    recorder = Recorder()
    wakeup = started(recorder)
    for _ in range(pokes):
        wakeup.poke()
    assert wait_until(lambda: len(recorder.calls) == pokes)
    time.sleep(0.05)
    assert len(recorder.calls) == pokes
    assert wakeup.sent == pokes
    assert recorder.calls == sorted(recorder.calls)  # monotonic clock, sent in order


def test_pokes_from_many_threads(started):
    recorder = Recorder()
    wakeup = started(recorder)
    threads = [threading.Thread(target=lambda: [wakeup.poke() for _ in range(5)]) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wait_until(lambda: len(recorder.calls) == 20)
    assert wakeup.sent == 20


def test_poke_before_start_is_kept():
    recorder = Recorder()
    wakeup = BatcherWakeup(recorder)
    wakeup.poke()
    wakeup.poke()
    time.sleep(0.02)
    assert recorder.calls == []
    wakeup.start()
    try:
        assert wait_until(lambda: len(recorder.calls) == 2)
    finally:
        wakeup.stop()


def test_delay_before_send(started):
    recorder = Recorder()
    wakeup = started(recorder, delay_s=0.05)
    poked = time.monotonic_ns()
    wakeup.poke()
    assert wait_until(lambda: len(recorder.calls) == 1)
    assert recorder.calls[0] - poked >= 45_000_000


def test_exception_in_send_does_not_kill_thread(started, caplog):
    recorder = Recorder(fail_first=1)
    wakeup = started(recorder)
    with caplog.at_level("WARNING", logger=bw.__name__):
        wakeup.poke()
        assert wait_until(lambda: recorder.attempts == 1)
        time.sleep(0.02)
    assert recorder.calls == []
    assert wakeup.sent == 0  # a failed send is not counted
    assert any("wake-up request failed" in r.getMessage() for r in caplog.records)

    wakeup.poke()
    assert wait_until(lambda: len(recorder.calls) == 1), "thread must survive the exception"
    assert wakeup.sent == 1
    assert wakeup._thread.is_alive()


def test_stop_joins_thread():
    recorder = Recorder()
    wakeup = BatcherWakeup(recorder)
    wakeup.start()
    assert wakeup._thread.is_alive()
    assert wakeup._thread.daemon
    start = time.monotonic()
    wakeup.stop()
    assert time.monotonic() - start < 1.0
    assert not wakeup._thread.is_alive()
    # pokes after stop send nothing
    wakeup.poke()
    time.sleep(0.02)
    assert recorder.calls == []


def test_stop_wakes_thread_blocked_in_wait(started):
    recorder = Recorder()
    wakeup = started(recorder)
    wakeup.poke()
    assert wait_until(lambda: len(recorder.calls) == 1)
    wakeup.stop()
    assert not wakeup._thread.is_alive()


@pytest.mark.parametrize(
    ("offset_ns", "expected"),
    [
        (0, False),  # just sent: answered at once
        (-1_000_000, False),  # clock in the future: not behind work
        (1_000_000, False),
        (2_000_000, False),
        (QUEUED_BEHIND_WORK_NS + 2_000_000, True),
        (10_000_000, True),
        (1_000_000_000, True),
    ],
)
def test_waited_behind_work(offset_ns, expected):
    assert waited_behind_work(time.monotonic_ns() - offset_ns) is expected


def test_waited_behind_work_uses_monotonic_ns(monkeypatch):
    monkeypatch.setattr(bw.time, "monotonic_ns", lambda: 100_000_000)
    assert waited_behind_work(100_000_000 - QUEUED_BEHIND_WORK_NS) is False  # exactly: not over
    assert waited_behind_work(100_000_000 - QUEUED_BEHIND_WORK_NS - 1) is True
    assert waited_behind_work(0) is True


def test_chained_noop_pokes_are_bounded_until_a_client_request_resets_them():
    from llm_backend.batcher_wakeup import MAX_CHAINED_NOOPS

    sent: list[int] = []
    wakeup = BatcherWakeup(sent.append, delay_s=0)
    wakeup.start()
    try:
        for _ in range(MAX_CHAINED_NOOPS + 3):
            wakeup.poke_after_noop()
        deadline = time.monotonic() + 2
        while len(sent) < MAX_CHAINED_NOOPS and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        assert len(sent) == MAX_CHAINED_NOOPS
        wakeup.poke()
        wakeup.poke_after_noop()
        deadline = time.monotonic() + 2
        while len(sent) < MAX_CHAINED_NOOPS + 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(sent) == MAX_CHAINED_NOOPS + 2
    finally:
        wakeup.stop()
