"""Noticing that Triton no longer serves this model version although it has not finalized it.

Triton calls ``finalize`` only when the last reference to a model version is gone. In r24.10 the
gRPC frontend keeps one for as long as a client keeps its stream open: the first request of every
``ModelStreamInfer`` stream stays referenced by the state that Triton also registers for the
stream's end notification (server ``src/grpc/stream_infer_handler.cc``, ``Finish``: "the
completion event should take care of finally releasing the state object"), and that request holds
its model. So after a swap (a load of another version under the same name) or an unload, the old
version's engine would run on until such a client closes its stream: no request reaches it, the
repository index no longer lists it, and its memory is counted nowhere. The backend watches its
own readiness instead and drains and stops its engine once Triton stops serving it.
"""

from __future__ import annotations

from collections.abc import Callable

# A readiness check is one round trip to the Triton process; once a second is plenty next to a
# drain of tens of seconds.
CHECK_INTERVAL_S = 1.0
# Not-ready this many checks in a row: one failed or odd answer does not stop a serving engine.
NOT_READY_CHECKS = 2
# Once Triton no longer serves the version it may still hand over requests it routed here just
# before (queued while the stub was busy): they are served, and the engine stops only once none
# has come for this long and none runs or waits.
QUIET_S = 2.0


class ServingWatch:
    """Asks ``is_ready`` (Triton's readiness of this name and version) at most every
    ``interval_s``; ``left()`` is true once the version was ready and then, ``checks`` times in a
    row, was not."""

    def __init__(self, is_ready: Callable[[], bool], clock: Callable[[], float],
                 interval_s: float = CHECK_INTERVAL_S, checks: int = NOT_READY_CHECKS) -> None:
        if checks < 1:
            raise ValueError(f"checks must be at least 1, not {checks}")
        self._is_ready = is_ready
        self._clock = clock
        self._interval_s = interval_s
        self._checks = checks
        self._next_at = clock()
        # Still loading until Triton first says ready: initialize() has not returned yet then.
        self._seen_ready = False
        self._not_ready = 0

    def left(self) -> bool:
        """Whether Triton has stopped serving this version (asks only when a check is due);
        once true, it stays true."""
        now = self._clock()
        if self._not_ready >= self._checks or now < self._next_at:
            return self._not_ready >= self._checks
        self._next_at = now + self._interval_s
        try:
            ready = self._is_ready()
        except Exception:  # noqa: BLE001 - whatever the stub's call raises, the answer is unknown
            # Unknown is not "not ready": the next check asks again.
            return False
        if ready:
            self._seen_ready = True
            self._not_ready = 0
        elif self._seen_ready:
            self._not_ready += 1
        return self._not_ready >= self._checks


def may_stop(left_for_s: float, idle: bool, quiet_for_s: float, drain_timeout_s: float,
             quiet_s: float = QUIET_S) -> bool:
    """Whether a version Triton stopped serving ``left_for_s`` ago may stop taking requests now:
    nothing runs or waits (``idle``) and none came for ``quiet_s``, or the drain time is up."""
    return (idle and quiet_for_s >= quiet_s) or left_for_s >= drain_timeout_s
