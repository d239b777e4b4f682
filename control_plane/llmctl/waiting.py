"""Waiting for server-side work (a promotion, an operation) by polling it until it finishes.

The work goes on whatever happens to the waiting llmctl: a timeout, Ctrl-C or a lost connection
ends only the wait, and each of them prints the command that follows the work from there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from control_plane.llmctl.errors import LlmctlError
from control_plane.llmctl.exit_codes import ExitCode
from control_plane.llmctl.output import Output, Progress

POLL_INTERVAL_S = 1.0
# A control plane that restarts (a deploy, a leader change) is back within seconds; polling
# through that keeps a CI job from failing on a promotion that goes on succeeding.
UNREACHABLE_GRACE_S = 30.0


@dataclass(frozen=True)
class Awaited:
    """What is waited for: ``fetch`` reads it, ``finished`` says when to stop, ``show`` puts
    its state on the progress display."""

    kind: str
    id: str
    fetch: Callable[[], dict[str, Any]]
    finished: Callable[[dict[str, Any]], bool]
    show: Callable[[dict[str, Any], Progress], None]
    follow_command: str

    @property
    def goes_on(self) -> str:
        return f"{self.kind} {self.id} goes on server-side; follow it with '{self.follow_command}'"


def wait_until_finished(out: Output, awaited: Awaited, timeout_s: float,
                        first: dict[str, Any] | None = None) -> dict[str, Any]:
    """The awaited thing once finished; LlmctlError (exit 4) once ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    unreachable_since: float | None = None
    current = first
    with out.waiting() as progress:
        try:
            while True:
                if current is not None:
                    awaited.show(current, progress)
                    if awaited.finished(current):
                        return current
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise LlmctlError(
                        ExitCode.TIMED_OUT, "TimedOut",
                        f"{awaited.kind} {awaited.id} did not finish within {timeout_s:g} s; "
                        f"{awaited.goes_on}",
                        {f"{awaited.kind}_id": awaited.id, awaited.kind: current})
                time.sleep(min(POLL_INTERVAL_S, remaining))
                try:
                    current = awaited.fetch()
                    unreachable_since = None
                except LlmctlError as exc:
                    if exc.exit_code is not ExitCode.UNREACHABLE:
                        raise
                    now = time.monotonic()
                    unreachable_since = unreachable_since or now
                    if now - unreachable_since > UNREACHABLE_GRACE_S:
                        raise LlmctlError(exc.exit_code, exc.error,
                                          f"{exc.detail}; {awaited.goes_on}",
                                          {**exc.context, f"{awaited.kind}_id": awaited.id}
                                          ) from None
                    out.note(f"{exc.detail}; retrying")
        except KeyboardInterrupt:
            out.note(f"stopped waiting; {awaited.goes_on}")
            raise
