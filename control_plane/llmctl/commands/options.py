"""Options shared by several commands, and the checks that go with them."""

from __future__ import annotations

from typing import Annotated

import typer

from control_plane.llmctl.errors import usage_error

DEFAULT_TIMEOUT_S = 1800.0

Wait = Annotated[bool, typer.Option(
    "--wait", help="wait until the server-side work has finished, showing its progress")]
Timeout = Annotated[float | None, typer.Option(
    "--timeout", min=0.1, metavar="S",
    help=f"with --wait: give up waiting after S seconds (exit 4; the work goes on) "
         f"[default: {DEFAULT_TIMEOUT_S:g}]")]
Limit = Annotated[int, typer.Option(min=1, max=500, help="at most this many items")]
Offset = Annotated[int, typer.Option(min=0, help="skip this many items first")]
LabelOption = Annotated[list[str] | None, typer.Option(
    "--label", metavar="KEY=VALUE", help="a label; repeat for more")]


def wait_timeout(wait: bool, timeout: float | None) -> float:
    """The timeout to wait with; a --timeout without --wait would silently do nothing."""
    if timeout is not None and not wait:
        raise usage_error("--timeout only applies with --wait; add --wait or drop --timeout")
    return DEFAULT_TIMEOUT_S if timeout is None else timeout


def parse_labels(given: list[str] | None) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in given or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise usage_error(f"--label '{item}' is not KEY=VALUE; write e.g. --label team=search")
        found[key] = value
    return found
