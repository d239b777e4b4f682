"""SQLite's writers of one process take turns in arrival order (control_plane.db.FairWriterQueue)."""

from __future__ import annotations

import threading
import time

from control_plane.db import FairWriterQueue


def test_writers_get_their_turn_in_the_order_they_came() -> None:
    queue = FairWriterQueue()
    order: list[int] = []
    holder_in = threading.Event()
    release_holder = threading.Event()

    def holder() -> None:
        with queue.turn():
            holder_in.set()
            release_holder.wait(5)

    def writer(index: int) -> None:
        with queue.turn():
            order.append(index)

    first = threading.Thread(target=holder)
    first.start()
    assert holder_in.wait(5)
    waiting = []
    for index in range(8):
        thread = threading.Thread(target=writer, args=(index,))
        thread.start()
        waiting.append(thread)
        time.sleep(0.02)  # each takes its ticket before the next arrives
    release_holder.set()
    for thread in [first, *waiting]:
        thread.join(5)
    assert order == list(range(8))


def test_a_thread_inside_its_turn_enters_again() -> None:
    # A second turn that waited for the first would wait out the 5 s timeout: far above the
    # bound, which stays loose for a loaded CI machine.
    queue = FairWriterQueue(timeout_s=5)
    started = time.monotonic()
    with queue.turn(), queue.turn():
        pass
    assert time.monotonic() - started < 2.5
    with queue.turn():  # and the queue moved on
        pass


def test_a_writer_that_waited_too_long_goes_on_and_its_turn_is_skipped() -> None:
    queue = FairWriterQueue(timeout_s=0.2)
    release = threading.Event()
    went_on = threading.Event()
    after: list[str] = []

    def holder() -> None:
        with queue.turn():
            release.wait(5)

    def impatient() -> None:
        with queue.turn():
            went_on.set()  # without its turn: SQLite's busy handler decides for it

    first = threading.Thread(target=holder)
    first.start()
    time.sleep(0.05)
    second = threading.Thread(target=impatient)
    second.start()
    assert went_on.wait(2)
    release.set()
    first.join(5)
    second.join(5)

    def late() -> None:
        with queue.turn():
            after.append("in")

    third = threading.Thread(target=late)
    third.start()
    third.join(2)
    assert after == ["in"]  # the abandoned ticket did not block the queue
