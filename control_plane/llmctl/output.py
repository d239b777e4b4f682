"""The one place that decides how llmctl speaks: JSON, Rich on a terminal, or plain lines.

- ``--json``: exactly one JSON document on stdout, the result or the error; progress and notes
  go to stderr as plain lines.
- a terminal, not in CI: Rich tables, and a live display while waiting (on stderr).
- otherwise (stdout is not a terminal, or ``CI`` is set to true): plain lines without control
  characters, so CI logs stay readable and greppable.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import Any, Protocol, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from control_plane.llmctl.errors import LlmctlError

# Anything but a newline or tab that a terminal could act on: ANSI escapes, carriage returns.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# 2026-12-01T10:00:00.123456Z: a table shows it to the second.
_TIMESTAMP = re.compile(
    r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.\d+)?(Z|[+-]\d{2}:?\d{2})?$")
_STEP_STYLES = {"succeeded": "green", "failed": "bold red", "running": "yellow",
                "skipped": "dim", "pending": "dim"}


class Mode(StrEnum):
    JSON = "json"
    RICH = "rich"
    PLAIN = "plain"


def in_ci(environ: Mapping[str, str]) -> bool:
    return environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def detect_mode(json_requested: bool, environ: Mapping[str, str] | None = None,
                stdout: TextIO | None = None) -> Mode:
    environ = os.environ if environ is None else environ
    stdout = sys.stdout if stdout is None else stdout
    if json_requested:
        return Mode.JSON
    if stdout.isatty() and not in_ci(environ):
        return Mode.RICH
    return Mode.PLAIN


def plain(text: object) -> str:
    """``text`` with control characters shown as escapes (a server value could carry any)."""
    return _CONTROL.sub(lambda found: repr(found.group())[1:-1], str(text))


def cell(value: Any) -> str:
    """One value as a human reads it in a table or a field."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False) if value else "-"
    return str(value)


def when(value: str | None) -> str:
    """A server timestamp, to the second (UTC is shown as Z)."""
    if value is None:
        return "-"
    found = _TIMESTAMP.match(value)
    if found is None:
        return value
    date, clock, zone = found.groups()
    return f"{date} {clock}{'Z' if zone in (None, 'Z', '+00:00', '+0000') else zone}"


def labels(value: dict[str, str]) -> str:
    return ",".join(f"{key}={text}" for key, text in sorted(value.items())) or "-"


class Progress(Protocol):
    def update(self, summary: str, steps: Sequence[tuple[str, str]] = ()) -> None:
        """Show where the awaited thing stands: one line, and its steps as (name, state)."""


class _PlainProgress:
    """A line on stderr whenever the summary or a step changes, so a CI log tells the story."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.started = time.monotonic()
        self.last_summary: str | None = None
        self.step_states: dict[str, str] = {}

    def update(self, summary: str, steps: Sequence[tuple[str, str]] = ()) -> None:
        elapsed = f"[{time.monotonic() - self.started:5.0f}s]"
        if summary != self.last_summary:
            print(f"{elapsed} {plain(summary)}", file=self.stream, flush=True)
            self.last_summary = summary
        for name, state in steps:
            if self.step_states.get(name) != state:
                if state != "pending":
                    print(f"{elapsed}   step {plain(name)}: {plain(state)}", file=self.stream,
                          flush=True)
                self.step_states[name] = state


class _RichProgress:
    """A spinner with the summary and the elapsed time, above a table of steps."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.spinner = Spinner("dots", text="")
        self.summary = ""
        self.steps: Sequence[tuple[str, str]] = ()

    def update(self, summary: str, steps: Sequence[tuple[str, str]] = ()) -> None:
        self.summary, self.steps = summary, steps

    def __rich__(self) -> RenderableType:
        self.spinner.update(text=Text(f"{self.summary}  ({time.monotonic() - self.started:.0f}s)"))
        if not self.steps:
            return self.spinner
        table = Table.grid(padding=(0, 2))
        for name, state in self.steps:
            table.add_row(Text(f"  {name}"), Text(state, style=_STEP_STYLES.get(state, "")))
        return Group(self.spinner, table)


class Output:
    def __init__(self, mode: Mode, stdout: TextIO | None = None, stderr: TextIO | None = None
                 ) -> None:
        self.mode = mode
        self.stdout = sys.stdout if stdout is None else stdout
        self.stderr = sys.stderr if stderr is None else stderr
        if mode is Mode.RICH:
            self._console = Console(file=self.stdout, highlight=False)
            self._error_console = Console(file=self.stderr, highlight=False)

    @property
    def json(self) -> bool:
        return self.mode is Mode.JSON

    def present(self, document: Any, human: Callable[[], None]) -> None:
        """The command's result: ``document`` as JSON, or ``human()`` to show it."""
        if self.json:
            self._write_json(document)
        else:
            human()

    def schema(self, schema: dict[str, Any]) -> None:
        """A JSON Schema: JSON in every mode, since it is read by programs."""
        self._write_json(schema)

    def _write_json(self, document: Any) -> None:
        self.stdout.write(json.dumps(document, indent=2) + "\n")
        self.stdout.flush()

    def line(self, text: str) -> None:
        """A line of the result, for humans (never printed with --json)."""
        if self.mode is Mode.RICH:
            self._console.print(Text(text))
        elif self.mode is Mode.PLAIN:
            print(plain(text), file=self.stdout)

    def note(self, text: str) -> None:
        """A diagnostic for whoever reads the log: stderr, in every mode."""
        if self.mode is Mode.RICH:
            self._error_console.print(Text(text, style="dim"))
        else:
            print(plain(text), file=self.stderr, flush=True)

    def table(self, columns: Sequence[str], rows: Sequence[Sequence[Any]],
              title: str | None = None) -> None:
        if self.mode is Mode.RICH:
            table = Table(title=title, title_justify="left")
            for column in columns:
                # Fold long unbroken values (ids, JSON) rather than cut them off with an ellipsis.
                table.add_column(column, overflow="fold")
            for row in rows:
                table.add_row(*(Text(cell(value)) for value in row))
            self._console.print(table)
        elif self.mode is Mode.PLAIN:
            texts = [[" ".join(plain(cell(value)).split()) for value in row] for row in rows]
            widths = [max([len(column)] + [len(row[i]) for row in texts])
                      for i, column in enumerate(columns)]
            for row in [list(columns), *texts]:
                print("  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)
                                ).rstrip(), file=self.stdout)

    def fields(self, pairs: Sequence[tuple[str, Any]], title: str | None = None) -> None:
        """One record as ``name: value`` lines."""
        if self.mode is Mode.RICH:
            grid = Table.grid(padding=(0, 2))
            grid.add_column(style="bold")
            grid.add_column(overflow="fold")
            for name, value in pairs:
                grid.add_row(Text(name), Text(cell(value)))
            if title:
                self._console.print(Text(title, style="bold underline"))
            self._console.print(grid)
        elif self.mode is Mode.PLAIN:
            if title:
                print(plain(title), file=self.stdout)
            width = max((len(name) for name, _ in pairs), default=0)
            for name, value in pairs:
                print(f"{name + ':':<{width + 1}} {plain(cell(value))}", file=self.stdout)

    def error(self, error: LlmctlError) -> None:
        if self.json:
            self._write_json(error.document())
        elif self.mode is Mode.RICH:
            self._error_console.print(Text("error: ", style="bold red") + Text(error.detail))
        else:
            print(f"error: {plain(error.detail)}", file=self.stderr, flush=True)

    @contextmanager
    def waiting(self) -> Iterator[Progress]:
        """A live display on a terminal; elsewhere (CI, --json) plain lines on stderr."""
        if self.mode is Mode.RICH:
            display = _RichProgress()
            with Live(display, console=self._error_console, transient=True,
                      refresh_per_second=8):
                yield display
        else:
            yield _PlainProgress(self.stderr)
