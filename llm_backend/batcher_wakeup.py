"""Works around a missed wake-up in Triton's dynamic batcher (r24.03 and later).

With priority levels or queue policies, Triton turns payload prefetching off, so its batcher thread
may only hand a request over while the instance is idle. A request queued while ``execute()`` runs
is handed over when something wakes the batcher's condition variable: a new ``Enqueue`` that finds
the instance idle, or a 500 ms timeout. Nothing wakes it when the instance becomes idle again, so
without help such a request waits ~500 ms (see README, "Design notes").

After each ``execute()`` that handled real work, this thread sends one tiny request to our own
model through BLS, ~1 ms later, when the instance is idle again: its ``Enqueue`` wakes the batcher,
which then hands over the highest-priority waiting request. A no-op that itself waited behind
queued work pokes once more, so a queue never idles with requests in it; one that found the queue
empty does not, so an idle model sends nothing. The no-op itself sits at the lowest
priority level (BLS requests cannot carry a priority, so they take the default, which must be the
lowest), so it never overtakes real work, and is answered at once without touching the engine.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# Set only on the backend's own no-op requests.
WAKEUP_PARAMETER = "llm_backend_wakeup"

# Long enough for execute() to have returned and the instance to be idle again.
WAKEUP_DELAY_S = 0.001


class BatcherWakeup:
    """Sends one no-op request after each ``execute()`` that may leave work queued behind it."""

    def __init__(self, send_noop: Callable[[int], None], delay_s: float = WAKEUP_DELAY_S) -> None:
        self._send_noop = send_noop
        self._delay_s = delay_s
        self._lock = threading.Condition()
        self._due = 0
        self._chained = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="batcher-wakeup", daemon=True)
        self.sent = 0

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        """Called at the end of an ``execute()`` that handled a client's request."""
        with self._lock:
            self._chained = 0
            self._due += 1
            self._lock.notify()

    def poke_after_noop(self) -> None:
        """Called by a no-op that waited behind queued work. Bounded, so a machine too busy to
        answer a no-op within the threshold cannot keep an idle model sending them."""
        with self._lock:
            if self._chained >= MAX_CHAINED_NOOPS:
                return
            self._chained += 1
            self._due += 1
            self._lock.notify()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._lock.notify()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._due and not self._stopped:
                    self._lock.wait()
                if self._stopped:
                    return
                self._due -= 1
            time.sleep(self._delay_s)
            try:
                # The send time travels with the no-op, so its execute() can tell whether it
                # waited behind queued work (then it pokes again) or found the queue empty.
                self._send_noop(time.monotonic_ns())
                self.sent += 1
            except Exception:  # noqa: BLE001 - a lost wake-up costs latency, never correctness
                log.warning("batcher wake-up request failed", exc_info=True)


# A no-op that waited longer than this in Triton's queue had real requests ahead of it, so more
# may be behind it: its own execute() pokes again. One answered at once means an idle queue, which
# ends the chain.
QUEUED_BEHIND_WORK_NS = 3_000_000
# No-ops one client request may set off in a row.
MAX_CHAINED_NOOPS = 4


def waited_behind_work(sent_at_ns: int) -> bool:
    return time.monotonic_ns() - sent_at_ns > QUEUED_BEHIND_WORK_NS


def is_wakeup(parameters: dict[str, Any]) -> bool:
    """True for the backend's own no-op requests, which get an empty answer."""
    return parameters.get(WAKEUP_PARAMETER) is True
