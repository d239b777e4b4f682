"""Unit tests for llm_backend.inflight.InflightLimiter, with real threads."""

from __future__ import annotations

import threading
import time

import pytest

from llm_backend.inflight import InflightLimiter

SHORT = 0.2  # long enough to show a thread is blocked
LONG = 2.0  # upper bound for something that must happen


def _in_thread(fn, *args):
    """Run fn(*args) in a daemon thread; returns (thread, done-event, result list)."""
    done = threading.Event()
    result: list = []

    def target():
        result.append(fn(*args))
        done.set()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, done, result


def _nonzero(counts):
    return {p: c for p, c in counts.items() if c}


def _wait_for(predicate, timeout=LONG):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


@pytest.mark.parametrize("capacity", [0, -1])
def test_capacity_below_one_raises(capacity):
    with pytest.raises(ValueError, match=f"at least 1, got {capacity}"):
        InflightLimiter(capacity)


def test_initial_state():
    limiter = InflightLimiter(2)
    assert limiter.capacity == 2
    assert limiter.inflight == 0
    assert limiter.snapshot() == ({}, {})


@pytest.mark.timeout(10)
def test_third_acquire_blocks_until_release():
    limiter = InflightLimiter(2)
    assert limiter.acquire(1) is True
    assert limiter.acquire(2) is True
    assert limiter.inflight == 2

    thread, done, result = _in_thread(limiter.acquire, 3)
    assert not done.wait(SHORT), "third acquire must block while the limiter is full"
    assert _wait_for(lambda: limiter.snapshot()[1].get(3) == 1)
    assert limiter.inflight == 2

    limiter.release(1)
    assert done.wait(LONG), "release must wake the blocked acquire"
    thread.join(LONG)
    assert result == [True]
    assert limiter.inflight == 2
    inflight, waiting = limiter.snapshot()
    assert {p: c for p, c in inflight.items() if c} == {2: 1, 3: 1}
    assert not any(waiting.values())


@pytest.mark.timeout(10)
def test_capacity_respected_under_contention():
    capacity = 3
    limiter = InflightLimiter(capacity)
    lock = threading.Lock()
    current = 0
    peak = 0

    def worker(priority):
        nonlocal current, peak
        assert limiter.acquire(priority)
        with lock:
            current += 1
            peak = max(peak, current)
        time.sleep(0.01)
        with lock:
            current -= 1
        limiter.release(priority)

    threads = [threading.Thread(target=worker, args=(i % 3 + 1,), daemon=True) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(LONG)
    assert all(not thread.is_alive() for thread in threads)
    assert 1 <= peak <= capacity
    assert limiter.inflight == 0


def test_snapshot_counts_per_priority():
    limiter = InflightLimiter(5)
    for priority in (1, 1, 2, 3, 3):
        assert limiter.acquire(priority)
    inflight, waiting = limiter.snapshot()
    assert inflight == {1: 2, 2: 1, 3: 2}
    assert not any(waiting.values())
    assert limiter.inflight == 5

    limiter.release(1)
    limiter.release(3)
    inflight, _ = limiter.snapshot()
    assert inflight == {1: 1, 2: 1, 3: 1}
    assert limiter.inflight == 3


def test_snapshot_is_a_copy():
    limiter = InflightLimiter(2)
    limiter.acquire(1)
    inflight, _ = limiter.snapshot()
    inflight[1] = 99
    assert limiter.snapshot()[0] == {1: 1}


@pytest.mark.timeout(10)
def test_snapshot_counts_waiters_per_priority():
    limiter = InflightLimiter(1)
    assert limiter.acquire(1)
    waiters = [_in_thread(limiter.acquire, p) for p in (2, 2, 3)]
    # a priority that waited once keeps a zero entry (the gauge then reads 0)
    assert _wait_for(lambda: _nonzero(limiter.snapshot()[1]) == {2: 2, 3: 1})
    assert limiter.snapshot()[0] == {1: 1}
    limiter.close()
    for thread, done, result in waiters:
        assert done.wait(LONG)
        assert result == [False]
    assert not any(limiter.snapshot()[1].values())


@pytest.mark.timeout(10)
def test_close_wakes_waiters_and_refuses():
    limiter = InflightLimiter(1)
    assert limiter.acquire(1)
    thread, done, result = _in_thread(limiter.acquire, 2)
    assert not done.wait(SHORT)
    limiter.close()
    assert done.wait(LONG), "close must wake a blocked acquire"
    assert result == [False]
    # a closed limiter refuses even when a slot is free
    limiter.release(1)
    assert limiter.acquire(1) is False
    assert limiter.inflight == 0


def test_acquire_after_close_with_free_slots_is_false():
    limiter = InflightLimiter(4)
    limiter.close()
    assert limiter.acquire(1) is False
    assert limiter.inflight == 0


def test_release_still_works_after_close():
    limiter = InflightLimiter(2)
    assert limiter.acquire(2)
    limiter.close()
    limiter.release(2)
    assert limiter.inflight == 0


def test_release_without_acquire_raises():
    limiter = InflightLimiter(2)
    with pytest.raises(RuntimeError, match="release without acquire at priority 1"):
        limiter.release(1)
    limiter.acquire(1)
    with pytest.raises(RuntimeError, match="priority 2"):
        limiter.release(2)  # held at another priority
    limiter.release(1)
    with pytest.raises(RuntimeError):
        limiter.release(1)  # double release
    assert limiter.inflight == 0


def test_wait_idle_true_when_nothing_in_flight():
    limiter = InflightLimiter(1)
    start = time.monotonic()
    assert limiter.wait_idle(1.0) is True
    assert time.monotonic() - start < 0.5


def test_wait_idle_false_on_timeout():
    limiter = InflightLimiter(1)
    limiter.acquire(1)
    start = time.monotonic()
    assert limiter.wait_idle(0.15) is False
    elapsed = time.monotonic() - start
    assert 0.1 <= elapsed < 1.0


def test_wait_idle_zero_timeout():
    limiter = InflightLimiter(1)
    limiter.acquire(1)
    assert limiter.wait_idle(0) is False


@pytest.mark.timeout(10)
def test_wait_idle_returns_true_when_released():
    limiter = InflightLimiter(2)
    limiter.acquire(1)
    limiter.acquire(2)
    thread, done, result = _in_thread(limiter.wait_idle, LONG)
    assert not done.wait(SHORT / 2)
    limiter.release(1)
    assert not done.wait(SHORT / 2), "still one in flight"
    limiter.release(2)
    assert done.wait(LONG)
    assert result == [True]
