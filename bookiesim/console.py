"""Streaming command-line output: tables and JSON lines that appear while a file is read.

Why not one ``rich.table.Table`` per command: a table is rendered only once all its rows
are known, so a command would have to hold every row of a multi-gigabyte log before printing
anything, and rich spends about 250 µs per row (measured here), i.e. minutes for a log of a
million entries. So the header and the summary go through rich (bold on a terminal, plain in
a pipe), and rows are plain fixed-width lines written as they are produced. Columns never
truncate: a value wider than its column pushes the rest of its row to the right.

Output is flushed at most every ``FLUSH_INTERVAL`` seconds and at the end: often enough that
``| head`` and ``| less`` see rows while a long scan runs, rarely enough that a flush per row
does not dominate. A reader that closes the pipe early surfaces as ``BrokenPipeError``, which
:func:`quiet_broken_pipe` turns into a quiet exit.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Literal, NamedTuple, TextIO

from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "FLUSH_INTERVAL",
    "Column",
    "LineWriter",
    "StreamTable",
    "make_console",
    "quiet_broken_pipe",
]

FLUSH_INTERVAL = 0.05


class _Console(Console):
    """A console that reports a closed pipe to its caller instead of exiting the process.

    rich's default calls ``SystemExit(1)`` from inside ``print``; the shell wants one place
    (:func:`quiet_broken_pipe`) to decide what a closed pipe means.
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def make_console(stream: TextIO) -> Console:
    """A rich console on ``stream`` (looked up at call time, so test capture works).

    ``soft_wrap`` keeps long lines whole: output that is piped into other tools must not
    be re-wrapped at an assumed width of 80 columns.
    """
    return _Console(file=stream, soft_wrap=True, highlight=False)


class LineWriter:
    """Writes lines to a text stream and flushes at most every ``interval`` seconds."""

    __slots__ = ("_clock", "_interval", "_last_flush", "_stream")

    def __init__(self, stream: TextIO, interval: float = FLUSH_INTERVAL) -> None:
        self._stream = stream
        self._interval = interval
        self._clock = time.monotonic
        self._last_flush = self._clock()

    def line(self, text: str) -> None:
        self._stream.write(text)
        self._stream.write("\n")
        now = self._clock()
        if now - self._last_flush >= self._interval:
            self._stream.flush()
            self._last_flush = now

    def json(self, obj: Mapping[str, object]) -> None:
        """One JSON object on one line."""
        self.line(json.dumps(obj))

    def flush(self) -> None:
        self._stream.flush()
        self._last_flush = self._clock()


class Column(NamedTuple):
    name: str
    width: int
    justify: Literal["left", "right"] = "right"


class StreamTable:
    """A table printed row by row: a bold header once, then one plain line per row.

    The header waits for the first row (or :meth:`finish`), so a command that fails before
    producing anything prints only its error, not an empty table.
    """

    __slots__ = ("_columns", "_console", "_format", "_out", "_started")

    def __init__(self, console: Console, out: LineWriter, columns: Sequence[Column]) -> None:
        self._console = console
        self._out = out
        self._columns = tuple(
            c._replace(width=max(c.width, len(c.name))) for c in columns
        )  # a header is never cut either
        self._started = False
        self._format = "  ".join(
            f"{{:{'>' if c.justify == 'right' else '<'}{c.width}}}" for c in self._columns
        )

    def _header(self) -> None:
        self._started = True
        names = self._format.format(*(c.name for c in self._columns))
        self._out.flush()  # keep rich's writes after the rows already written
        self._console.print(Text(names.rstrip(), style="bold"))
        self._console.print(Text("  ".join("-" * c.width for c in self._columns), style="dim"))

    def row(self, *values: object) -> None:
        """One row; None prints as ``-``."""
        if not self._started:
            self._header()
        cells = ("-" if v is None else v for v in values)
        self._out.line(self._format.format(*cells).rstrip())

    def finish(self) -> None:
        """End of rows: prints the header if no row did (an empty table is still shown)."""
        if not self._started:
            self._header()


def quiet_broken_pipe() -> None:
    """After ``BrokenPipeError`` on stdout: send the rest of stdout to /dev/null.

    Python flushes stdout once more at exit; without this that flush fails again and prints
    "Exception ignored ... BrokenPipeError" on stderr (the recipe of the ``signal`` module's
    documentation). Under test capture stdout has no descriptor and nothing needs doing.
    """
    with contextlib.suppress(AttributeError, ValueError, io.UnsupportedOperation, OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
