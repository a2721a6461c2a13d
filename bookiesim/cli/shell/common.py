"""What every ``bookiesim shell`` command shares: where it prints (:class:`Out`), how a file
that is not what it claims ends it (:class:`ShellError`, one line on stderr, exit 2), and
the help text common to their ``--json``."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable

from bookiesim.bookie.index_format import IndexFormatError
from bookiesim.bookie.journal import (
    LAST_MARK_FILE,
    LAST_MARK_SIZE,
    JournalFormatError,
    LastMarkFormatError,
)
from bookiesim.console import Column, LineWriter, StreamTable, make_console, quiet_broken_pipe
from bookiesim.entrylog.format import EntryLogFormatError

EXIT_BAD_FILE = 2
BODY_PREVIEW = 48
LAST_MARK_NAME = re.compile(re.escape(LAST_MARK_FILE) + r"(?:\.(\d+))?")

Command = Callable[[argparse.Namespace, "Out"], int]


class ShellError(Exception):
    """A problem with the file the user named: one line on stderr, exit 2."""

    def __init__(
        self, path: str | os.PathLike[str], reason: str, offset: int | None = None
    ) -> None:
        where = os.fspath(path) + ("" if offset is None else f": offset {offset}")
        super().__init__(f"{where}: {reason}")


class Out:
    """Where a command prints: rows and JSON through one writer, the rest through rich."""

    def __init__(self, json_lines: bool) -> None:
        self.json_lines = json_lines
        self.lines = LineWriter(sys.stdout)
        self.console = make_console(sys.stdout)

    def table(self, *columns: Column) -> StreamTable | None:
        """A table (its header appears with the first row), or None in JSON mode."""
        if self.json_lines:
            return None
        return StreamTable(self.console, self.lines, columns)

    @staticmethod
    def finish(table: StreamTable | None) -> None:
        if table is not None:
            table.finish()

    def note(self, text: str) -> None:
        """A summary or header line for people (not printed in JSON mode)."""
        self.lines.flush()
        self.console.print(text)


COMMON_JSON = """\
--json prints one JSON object per line; every object has a "type" key and the last one is
the summary ({"type": "summary", ...}).
"""


def runner(name: str, run: Command) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        target = getattr(args, "file", None) or args.dir
        out = Out(args.json)
        try:
            code = run(args, out)
            out.lines.flush()
        except BrokenPipeError:
            # The reader stopped reading (| head): nothing is wrong with the file.
            quiet_broken_pipe()
            return 0
        except KeyboardInterrupt:
            return 130  # the shell convention for SIGINT; a traceback would say nothing
        except (
            ShellError,
            EntryLogFormatError,
            JournalFormatError,
            IndexFormatError,
            LastMarkFormatError,
            OSError,
        ) as e:
            try:
                out.lines.flush()  # rows already produced go before the error
            except BrokenPipeError:
                quiet_broken_pipe()
            print(f"bookiesim shell {name}: {error_line(e, target)}", file=sys.stderr)
            return EXIT_BAD_FILE
        return code

    return command


def error_line(e: Exception, target: str) -> str:
    """One line naming the file and, for format errors, the byte offset."""
    if isinstance(e, EntryLogFormatError):
        return f"{e.path or target}: offset {e.offset}: {e.reason}"
    if isinstance(e, JournalFormatError):
        return f"{e.path or target}: offset {e.offset}: {e.message}"
    if isinstance(e, IndexFormatError):
        return f"{e.path}: offset {e.offset}: {e.reason}"
    if isinstance(e, LastMarkFormatError):
        try:
            size = os.path.getsize(e.path)
        except OSError:
            return str(e)
        return (
            f"{e.path}: offset {min(size, LAST_MARK_SIZE)}: a lastMark file is "
            f"{LAST_MARK_SIZE} bytes (long fileId, long offset), this one has {size}"
        )
    if isinstance(e, FileNotFoundError):
        return f"{e.filename or target}: no such file or directory"
    if isinstance(e, OSError):
        return f"{e.filename or target}: {e.strerror or e}"
    return str(e)


def counted(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else plural or singular + 's'}"
