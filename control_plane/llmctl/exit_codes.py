"""The exit codes of llmctl: one per outcome a CI pipeline branches on, each documented."""

from __future__ import annotations

import textwrap
from enum import IntEnum


class ExitCode(IntEnum):
    SUCCESS = 0
    USAGE = 2
    PROMOTION_FAILED = 3
    TIMED_OUT = 4
    UNREACHABLE = 5
    CONFLICT = 6
    NOT_ALLOWED = 7

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS = {
    ExitCode.SUCCESS: "success",
    ExitCode.USAGE: "usage or validation error: a bad option or manifest, or something named "
                    "that does not exist (nothing was changed)",
    ExitCode.PROMOTION_FAILED: "the promotion or operation failed (a step or a gate); the "
                               "previous version still serves",
    ExitCode.TIMED_OUT: "timed out waiting; the operation goes on server-side and its id is "
                        "printed",
    ExitCode.UNREACHABLE: "the server is unreachable or answered with a 5xx error",
    ExitCode.CONFLICT: "conflict with the server's state, e.g. another promotion of the model "
                       "is running (its id is printed)",
    ExitCode.NOT_ALLOWED: "not authenticated (no or a bad token) or not allowed (the token's "
                          "scope is too small)",
}


def exit_code_table() -> str:
    """The codes as lines for ``llmctl --help``; ``\\b`` keeps Click from rewrapping them."""
    lines = [textwrap.fill(code.meaning, width=78, initial_indent=f"  {code.value}  ",
                           subsequent_indent="     ") for code in ExitCode]
    return "\b\nExit codes:\n" + "\n".join(lines)
