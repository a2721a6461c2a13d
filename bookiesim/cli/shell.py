"""``bookiesim shell``: look inside a bookie's files (upstream's ``bookkeeper shell``).

Why this module exists: when a bookie refuses to start or a ledger reads back wrong, the
first question is what is actually on disk. These commands answer it for our files and for
upstream's (the formats are the same), streaming so that a 2 GB entry log or journal is never
held in memory and ``| head`` shows rows at once.

Every byte rule lives in the format modules; this module only chooses what to print. A file
that is not what it claims ends the command with one line on stderr, ``bookiesim shell CMD:
FILE: offset N: what is wrong``, and exit code 2 (rows already printed stay printed).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import struct
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.markup import escape

from bookiesim.bookie.journal import JournalScan, journal_file_name, read_journal
from bookiesim.bookie.journal_format import (
    METAENTRY_ID_FENCE_KEY,
    METAENTRY_ID_LEDGER_EXPLICITLAC,
    METAENTRY_ID_LEDGER_KEY,
    DataRecord,
    ExplicitLacRecord,
    FenceRecord,
    JournalFormatError,
    JournalRecord,
    MasterKeyRecord,
)
from bookiesim.bookie.ledger_index import (
    HEADER_SIZE as INDEX_HEADER_SIZE,
)
from bookiesim.bookie.ledger_index import (
    IndexFile,
    IndexFormatError,
    parse_index_file_name,
)
from bookiesim.bookie.log_mark import (
    LAST_MARK_FILE,
    LAST_MARK_SIZE,
    LastMarkFormatError,
    read_last_mark,
)
from bookiesim.console import (
    Column,
    LineWriter,
    StreamTable,
    make_console,
    quiet_broken_pipe,
)
from bookiesim.entrylog.format import (
    MAX_LOG_ID,
    EntryLogFormatError,
    parse_log_file_name,
    split_location,
)
from bookiesim.entrylog.metadata import (
    EntryLogMetadata,
    extract_by_scanning,
    extract_from_ledgers_map,
)
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.scanner import scan_entry_log

__all__ = ["register"]

EXIT_BAD_FILE = 2
_LONG = struct.Struct(">q")
_LAC_IN_BODY = 16
"""An entry body is ledgerId, entryId, lastAddConfirmed, ...: the LAC is bytes 16..24."""
_LAC_IN_BLOB = 8
"""An explicit LAC blob is ledgerId, lac, digest: the LAC is bytes 8..16."""
_BODY_PREVIEW = 48
_LAST_MARK_NAME = re.compile(re.escape(LAST_MARK_FILE) + r"(?:\.(\d+))?")

Command = Callable[[argparse.Namespace, "_Out"], int]


class ShellError(Exception):
    """A problem with the file the user named: one line on stderr, exit 2."""

    def __init__(
        self, path: str | os.PathLike[str], reason: str, offset: int | None = None
    ) -> None:
        where = os.fspath(path) + ("" if offset is None else f": offset {offset}")
        super().__init__(f"{where}: {reason}")


class _Out:
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


# ---------------------------------------------------------------------------- arguments

_COMMON_JSON = """\
--json prints one JSON object per line; every object has a "type" key and the last one is
the summary ({"type": "summary", ...}).
"""

_READLOG_KEYS = """\
JSON keys, entries ({"type": "entry"}):
  ledgerId, entryId        the first 16 bytes of the body (entryId -1: body under 16 bytes)
  location                 upstream's (logId << 32) | offset, what the index stores
  logId                    from the file name, or --log-id
  offset                   file offset of the body (its 4-byte size field precedes it)
  size                     body size in bytes (the record takes size + 4)
  lastAddConfirmed         bytes 16..24 of the body; null if the body is shorter
  body                     with --print-body: the whole body, base64
summary: logId, fileSize, headerVersion, ledgersMapOffset, ledgersCount, entries,
  entryBytes, shown, skipped, skippedBytes, paddingBytes, torn, tornOffset, tornBytes

With --ledgers-map ({"type": "ledger"}): ledgerId, size (bytes of the ledger's records,
size fields included); summary: source ("ledgersMap" or "scan"), ledgers, totalSize,
ledgersMapOffset. If the header points at no usable map, a note on stderr says why and the
map is derived by scanning the log.
"""

_READJOURNAL_KEYS = """\
JSON keys, records ({"type": "data" | "masterKey" | "fence" | "explicitLac" | "unknownMeta"}):
  offset                   file offset of the record's 4-byte length field
  ledgerId, entryId        entryId of meta records is upstream's id for them
                           (masterKey -4096, fence -8192, explicitLac -32768)
  size                     the record's length field (bytes after it)
  lastAddConfirmed         data: bytes 16..24 of the entry; null if shorter
  masterKey                masterKey: the key, hex
  explicitLac, lacBlob     explicitLac: the LAC in the blob (null if under 16 bytes), blob hex
summary: version, records, endOffset (where the valid records end), torn, tornOffset
"""

_READINDEX_KEYS = """\
JSON keys: first {"type": "header"}: ledgerId (from the file name; null if it is not
<hex>.idx), version, masterKey (hex), fenced, stateBits, explicitLac (the LAC in the blob,
or null), explicitLacBlob (hex or null);
then {"type": "entry"}: ledgerId, entryId, location, logId, offset (location's low 32 bits);
summary: entries, lastEntryId.
"""

_GC_KEYS = """\
Give the bookie as --url http://HOST:PORT or --port PORT [--host HOST] (its httpServerPort).
Without options both compactions may run, as the bookie's configuration allows; --major or
--minor allows one of them for this pass, --no-compaction neither.

JSON keys: first {"type": "gc"} (unless --details): triggered, and the pass's report:
forced, ledgersDeleted, logsExtracted, logsDeleted, reclaimedByDeletion, compaction
("major", "minor" or null), logsCompacted, reclaimedByCompaction, bytesCopied, seconds;
then {"type": "entryLog"} per tracked log: logId, logIdHex, totalSize, remainingSize, usage,
ledgers; summary: logs, totalSize, remainingSize, and the GC status (majorCompactionCounter,
minorCompactionCounter, isMajorGcSuspended, isMinorGcSuspended, gcRuns, ...).
With --suspend/--resume: {"type": "summary", "isMajorGcSuspended", "isMinorGcSuspended"}.
"""

_LASTMARK_KEYS = """\
DIR is a ledger directory or its current/ subdirectory. Every lastMark file there is shown
(lastMark, and lastMark.<i> for journal directory i when a bookie has several).

JSON keys ({"type": "lastMark"}): file, journalIndex (null for lastMark), fileId,
fileIdHex, offset, journalFile (the <hex>.txn in the journal's current/ that replay
starts in).
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    shell = subparsers.add_parser(
        "shell",
        help="inspect entry logs, journals, index files and lastMark",
        description="Inspect a bookie's files (ours or upstream's: the formats are the same). "
        "Exit code 2 and one line on stderr when a file is missing or not what it claims.",
    )
    commands = shell.add_subparsers(dest="shell_command", metavar="COMMAND", required=True)

    def add(name: str, help_text: str, epilog: str, run: Command) -> argparse.ArgumentParser:
        parser = commands.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=epilog + "\n" + _COMMON_JSON,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.add_argument("--json", action="store_true", help="one JSON object per line")
        parser.set_defaults(func=_runner(name, run))
        return parser

    readlog = add(
        "readlog", "print the entries of an entry log (<hex id>.log)", _READLOG_KEYS, _readlog
    )
    readlog.add_argument("file", metavar="FILE")
    readlog.add_argument("--ledgers-map", action="store_true", help="print the ledgers map")
    readlog.add_argument("--ledger", type=int, metavar="L", help="only entries of ledger L")
    readlog.add_argument("--entry", type=int, metavar="E", help="only entries with id E")
    readlog.add_argument("--print-body", action="store_true", help="print entry bodies too")
    readlog.add_argument(
        "--log-id",
        type=_log_id,
        metavar="ID",
        help="the log id, for a file not named <hex id>.log (decimal, or hex with 0x)",
    )

    readjournal = add(
        "readjournal",
        "print the records of a journal file (<hex id>.txn)",
        _READJOURNAL_KEYS,
        _readjournal,
    )
    readjournal.add_argument("file", metavar="FILE")

    readindex = add(
        "readindex", "print a ledger index file (<hex ledger id>.idx)", _READINDEX_KEYS, _readindex
    )
    readindex.add_argument("file", metavar="FILE")

    lastmark = add(
        "lastmark",
        "print the journal position a ledger directory was checkpointed at",
        _LASTMARK_KEYS,
        _lastmark,
    )
    lastmark.add_argument("dir", metavar="DIR")

    # In its own module: it reads the metadata store and needs the codecs, which the
    # file commands above do not load.
    from bookiesim.cli.mlinfo_command import register_mlinfo

    register_mlinfo(commands)

    # Also its own module: it opens the metadata store and writes cookies.
    from bookiesim.cli.cookie_command import register_cookie_commands

    register_cookie_commands(commands)

    gc = commands.add_parser(
        "gc",
        help="force a garbage collection on a running bookie and show its entry logs' usage",
        description="Force a GC pass on a running bookie through its admin HTTP API (PUT "
        "/api/v1/bookie/gc), wait for it, and list the usage of every entry log GC tracks "
        "(GET /api/v1/bookie/gc_details). Exit code 2 when the bookie cannot be reached or "
        "refuses the request.",
        epilog=_GC_KEYS + "\n" + _COMMON_JSON,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gc.add_argument("--json", action="store_true", help="one JSON object per line")
    where = gc.add_mutually_exclusive_group()
    where.add_argument("--url", help="the bookie's admin base URL, e.g. http://127.0.0.1:8080")
    where.add_argument("--host", default="127.0.0.1", help="admin host (default 127.0.0.1)")
    gc.add_argument("--port", type=int, help="admin port (httpServerPort)")
    what = gc.add_mutually_exclusive_group()
    what.add_argument("--major", action="store_true", help="allow only major compaction")
    what.add_argument("--minor", action="store_true", help="allow only minor compaction")
    what.add_argument(
        "--no-compaction", action="store_true", help="collect garbage, compact nothing"
    )
    what.add_argument("--details", action="store_true", help="only show usage, trigger nothing")
    what.add_argument(
        "--suspend",
        choices=("major", "minor", "both"),
        help="suspend scheduled compaction",
    )
    what.add_argument(
        "--resume", choices=("major", "minor", "both"), help="resume suspended compaction"
    )
    gc.add_argument(
        "--no-wait", action="store_true", help="return once triggered, before the pass ends"
    )
    gc.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for the bookie (600)"
    )
    gc.set_defaults(func=_gc_command)


def _log_id(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= MAX_LOG_ID:
        raise argparse.ArgumentTypeError(f"{value} is not a log id (0..{MAX_LOG_ID})")
    return value


def _runner(name: str, run: Command) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        target = getattr(args, "file", None) or args.dir
        out = _Out(args.json)
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
            print(f"bookiesim shell {name}: {_error_line(e, target)}", file=sys.stderr)
            return EXIT_BAD_FILE
        return code

    return command


def _error_line(e: Exception, target: str) -> str:
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


# ---------------------------------------------------------------------------- readlog


def _readlog(args: argparse.Namespace, out: _Out) -> int:
    path = Path(args.file)
    log_id = args.log_id if args.log_id is not None else parse_log_file_name(path.name)
    if log_id is None:
        raise ShellError(path, "not named <hex id>.log; pass its id with --log-id")
    if args.ledgers_map:
        return _readlog_map(args, out, path, log_id)

    wanted_ledger: int | None = args.ledger
    wanted_entry: int | None = args.entry
    with EntryLogReader(path, log_id) as reader:
        scan = scan_entry_log(
            reader, accept=None if wanted_ledger is None else wanted_ledger.__eq__
        )
        header = scan.header
        if not out.json_lines:
            sealed = (
                f"ledgers map at offset {header.ledgers_map_offset} "
                f"({_count(header.ledgers_count, 'ledger')})"
                if header.ledgers_map_offset
                else "no ledgers map (not sealed)"
            )
            out.note(
                f"[bold]{escape(str(path))}[/]: log {log_id:#x} ({log_id}), "
                f"header V{header.version}, {sealed}"
            )
        columns = [
            Column("ledgerId", 10),
            Column("entryId", 10),
            Column("location", 14),
            Column("offset", len(str(scan.summary.file_size))),
            Column("size", 8),
            Column("lastAddConfirmed", 16),
        ]
        if args.print_body:
            columns.append(Column("body", 0, "left"))
        table = out.table(*columns)
        shown = 0
        for rec in scan:
            if wanted_entry is not None and rec.entry_id != wanted_entry:
                continue
            shown += 1
            body = rec.body
            assert body is not None  # the scan reads bodies by default
            lac = _LONG.unpack_from(body, _LAC_IN_BODY)[0] if len(body) >= 24 else None
            location = (log_id << 32) | rec.pos
            if table is None:
                obj: dict[str, Any] = {
                    "type": "entry",
                    "ledgerId": rec.ledger_id,
                    "entryId": rec.entry_id,
                    "location": location,
                    "logId": log_id,
                    "offset": rec.pos,
                    "size": rec.size,
                    "lastAddConfirmed": lac,
                }
                if args.print_body:
                    obj["body"] = base64.b64encode(body).decode("ascii")
                out.lines.json(obj)
            else:
                cells: list[object] = [rec.ledger_id, rec.entry_id, location, rec.pos, rec.size]
                cells.append(lac)
                if args.print_body:
                    cells.append(_preview(body))
                table.row(*cells)
        out.finish(table)

    s = scan.summary
    if out.json_lines:
        out.lines.json(
            {
                "type": "summary",
                "logId": log_id,
                "fileSize": s.file_size,
                "headerVersion": header.version,
                "ledgersMapOffset": header.ledgers_map_offset,
                "ledgersCount": header.ledgers_count,
                "entries": s.entries,
                "entryBytes": s.entry_bytes,
                "shown": shown,
                "skipped": s.skipped,
                "skippedBytes": s.skipped_bytes,
                "paddingBytes": s.padding_bytes,
                "torn": s.torn,
                "tornOffset": s.torn_offset,
                "tornBytes": s.torn_bytes,
            }
        )
    else:
        filtered = "" if wanted_entry is None else f", {shown} shown"
        tail = (
            f"[bold red]torn tail: {s.torn_bytes} bytes at offset {s.torn_offset}[/]"
            if s.torn
            else "no torn tail"
        )
        out.note(
            f"{_count(s.entries, 'entry', 'entries')} ({s.entry_bytes} bytes){filtered}; "
            f"{_count(s.skipped, 'record')} skipped ({s.skipped_bytes} bytes: ledgers map"
            f"{'' if wanted_ledger is None else ', other ledgers'}); "
            f"{s.padding_bytes} padding bytes; {tail}"
        )
    return 0


def _count(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def _preview(body: bytes) -> str:
    """The start of a body, escaped like a Python bytes literal (the JSON has it all)."""
    text = repr(body[:_BODY_PREVIEW])[2:-1]
    return text + ("…" if len(body) > _BODY_PREVIEW else "")


def _readlog_map(args: argparse.Namespace, out: _Out, path: Path, log_id: int) -> int:
    try:
        meta: EntryLogMetadata = extract_from_ledgers_map(path, log_id)
        source, why = "ledgersMap", None
    except FileNotFoundError:
        raise
    except (EntryLogFormatError, OSError) as e:
        # The map is missing (never sealed) or cannot be trusted: scan instead, as upstream's
        # getEntryLogMetadata does. A scan that fails too is the error the user sees.
        meta = extract_by_scanning(path, log_id)
        source, why = "scan", _error_line(e, str(path))
    if why is not None:
        print(
            f"bookiesim shell readlog: note: no usable ledgers map ({why}); "
            "listing ledgers found by scanning the log",
            file=sys.stderr,
        )
    with EntryLogReader(path, log_id) as reader:
        map_offset = reader.read_header().ledgers_map_offset
    table = out.table(Column("ledgerId", 20), Column("size", 14))
    shown = 0
    total = 0
    for ledger_id in sorted(meta.ledgers):
        if args.ledger is not None and ledger_id != args.ledger:
            continue
        size = meta.ledgers[ledger_id]
        shown += 1
        total += size
        if table is None:
            out.lines.json({"type": "ledger", "ledgerId": ledger_id, "size": size})
        else:
            table.row(ledger_id, size)
    out.finish(table)
    if out.json_lines:
        out.lines.json(
            {
                "type": "summary",
                "source": source,
                "ledgers": shown,
                "totalSize": total,
                "ledgersMapOffset": map_offset,
            }
        )
    else:
        where = (
            f"the ledgers map at offset {map_offset}"
            if source == "ledgersMap"
            else "a scan of the log"
        )
        out.note(f"{_count(shown, 'ledger')}, {total} bytes, from {where}")
    return 0


# ---------------------------------------------------------------------------- readjournal


def _describe(rec: JournalRecord) -> tuple[str, int, dict[str, Any], str]:
    """(type, entryId, JSON extras, table detail) of one journal record."""
    if isinstance(rec, DataRecord):
        body = rec.body
        lac = _LONG.unpack_from(body, _LAC_IN_BODY)[0] if len(body) >= 24 else None
        return "data", rec.entry_id, {"lastAddConfirmed": lac}, f"lac={lac}"
    if isinstance(rec, MasterKeyRecord):
        key = rec.master_key.hex()
        return "masterKey", METAENTRY_ID_LEDGER_KEY, {"masterKey": key}, f"key={key}"
    if isinstance(rec, FenceRecord):
        return "fence", METAENTRY_ID_FENCE_KEY, {}, ""
    if isinstance(rec, ExplicitLacRecord):
        blob = rec.lac_blob
        lac = _LONG.unpack_from(blob, _LAC_IN_BLOB)[0] if len(blob) >= 16 else None
        extras = {"explicitLac": lac, "lacBlob": blob.hex()}
        return "explicitLac", METAENTRY_ID_LEDGER_EXPLICITLAC, extras, f"lac={lac}"
    return "unknownMeta", rec.entry_id, {}, ""


def _readjournal(args: argparse.Namespace, out: _Out) -> int:
    scan: JournalScan = read_journal(args.file)
    table = out.table(
        Column("offset", 10),
        Column("type", 11, "left"),
        Column("ledgerId", 10),
        Column("entryId", 10),
        Column("size", 8),
        Column("detail", 0, "left"),
    )
    records = 0
    try:
        for offset, rec in scan:
            records += 1
            kind, entry_id, extras, detail = _describe(rec)
            if table is None:
                out.lines.json(
                    {
                        "type": kind,
                        "offset": offset,
                        "ledgerId": rec.ledger_id,
                        "entryId": entry_id,
                        "size": scan.record_size,
                        **extras,
                    }
                )
            else:
                table.row(offset, kind, rec.ledger_id, entry_id, scan.record_size, detail)
        out.finish(table)
    finally:
        scan.close()
    torn_offset = scan.end_offset if scan.torn else None
    if out.json_lines:
        out.lines.json(
            {
                "type": "summary",
                "version": scan.version,
                "records": records,
                "endOffset": scan.end_offset,
                "torn": scan.torn,
                "tornOffset": torn_offset,
            }
        )
    else:
        tail = (
            f"[bold red]torn tail at offset {torn_offset}[/]"
            if scan.torn
            else f"ends cleanly at offset {scan.end_offset}"
        )
        out.note(f"journal V{scan.version}: {_count(records, 'record')}; {tail}")
    return 0


# ---------------------------------------------------------------------------- readindex


def _readindex(args: argparse.Namespace, out: _Out) -> int:
    path = Path(args.file)
    ledger_id = parse_index_file_name(path.name)
    # The ledger id only labels messages inside IndexFile; -1 marks "unknown".
    index_file = IndexFile.open(path, -1 if ledger_id is None else ledger_id, read_only=True)
    try:
        header = index_file.header
        blob = header.explicit_lac
        lac = _LONG.unpack_from(blob, _LAC_IN_BLOB)[0] if blob and len(blob) >= 16 else None
        if out.json_lines:
            out.lines.json(
                {
                    "type": "header",
                    "ledgerId": ledger_id,
                    "version": header.version,
                    "masterKey": header.master_key.hex(),
                    "fenced": header.fenced,
                    "stateBits": header.state_bits,
                    "explicitLac": lac,
                    "explicitLacBlob": None if blob is None else blob.hex(),
                }
            )
        else:
            name = "unknown" if ledger_id is None else f"{ledger_id} ({ledger_id:#x})"
            out.note(f"[bold]{escape(str(path))}[/]: ledger {name}, index header V{header.version}")
            out.note(f"  master key    {header.master_key.hex() or '(empty)'}")
            fenced = "yes" if header.fenced else "no"
            out.note(f"  fenced        {fenced} (state bits {header.state_bits:#x})")
            explicit = "none" if blob is None else f"{lac} (blob {blob.hex()})"
            out.note(f"  explicit LAC  {explicit}")
        table = out.table(
            Column("entryId", 10),
            Column("location", 20),
            Column("logId", 10),
            Column("offset", 10),
            Column("logFile", 0, "left"),
        )
        count = 0
        last = -1
        for entry_id, location in index_file.entries():
            try:
                log_id, pos = split_location(location)
            except ValueError:
                raise ShellError(
                    path,
                    f"entry {entry_id} has location {location}, not a non-negative long",
                    INDEX_HEADER_SIZE + 8 * entry_id,
                ) from None
            count += 1
            last = entry_id
            if table is None:
                out.lines.json(
                    {
                        "type": "entry",
                        "ledgerId": ledger_id,
                        "entryId": entry_id,
                        "location": location,
                        "logId": log_id,
                        "offset": pos,
                    }
                )
            else:
                table.row(entry_id, location, log_id, pos, f"{log_id:x}.log")
        out.finish(table)
    finally:
        index_file.close()
    if out.json_lines:
        out.lines.json({"type": "summary", "entries": count, "lastEntryId": last})
    else:
        out.note(f"{_count(count, 'entry', 'entries')}, last entry id {last}")
    return 0


# ---------------------------------------------------------------------------- lastmark


def _lastmark(args: argparse.Namespace, out: _Out) -> int:
    given = Path(args.dir)
    if not given.is_dir():
        if given.exists():
            raise ShellError(given, "not a directory (give a ledger directory)")
        raise FileNotFoundError(2, "no such directory", str(given))
    # <dir> or <dir>/current: read_last_mark wants the ledger directory.
    in_current = given.name == "current" and not (given / "current").is_dir()
    ledger_dir = given.parent if in_current else given
    current = ledger_dir / "current"
    names = (
        sorted(
            (m for m in map(_LAST_MARK_NAME.fullmatch, os.listdir(current)) if m is not None),
            key=lambda m: -1 if m.group(1) is None else int(m.group(1)),
        )
        if current.is_dir()
        else []
    )
    if not names:
        raise ShellError(
            given, f"no {LAST_MARK_FILE} file in {current} (the bookie never checkpointed)"
        )
    table = out.table(
        Column("file", 12, "left"),
        Column("fileId", 14),
        Column("fileIdHex", 12),
        Column("offset", 12),
        Column("journalFile", 0, "left"),
    )
    for m in names:
        journal_index = None if m.group(1) is None else int(m.group(1))
        mark = read_last_mark([ledger_dir], journal_index)
        file_path = str(current / m.group(0))
        txn = journal_file_name(mark.file_id)
        file_id_hex = txn.removesuffix(".txn")  # Java's Long.toHexString, as the file name
        if table is None:
            out.lines.json(
                {
                    "type": "lastMark",
                    "file": file_path,
                    "journalIndex": journal_index,
                    "fileId": mark.file_id,
                    "fileIdHex": file_id_hex,
                    "offset": mark.offset,
                    "journalFile": txn,
                }
            )
        else:
            table.row(m.group(0), mark.file_id, file_id_hex, mark.offset, txn)
    out.finish(table)
    if not out.json_lines:
        out.note("replay starts at these positions, in <journalDir>/current/<journalFile>")
    return 0


# ---------------------------------------------------------------------------- gc


class _AdminError(Exception):
    """The bookie could not be reached, or answered with an error."""


def _admin_call(base: str, method: str, path: str, body: object, timeout: float) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error", exc.reason)
        except (ValueError, AttributeError):
            message = exc.reason
        raise _AdminError(f"{method} {base + path}: HTTP {exc.code}: {message}") from None
    except (OSError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise _AdminError(f"{method} {base + path}: {reason}") from None


def _admin_base(args: argparse.Namespace) -> str:
    if args.url:
        if args.port is not None:
            raise _AdminError("give --url or --port, not both")
        url: str = args.url
        if not url.startswith(("http://", "https://")):
            raise _AdminError(f"--url {url!r} is not an http:// URL")
        return url.rstrip("/")
    if args.port is None:
        raise _AdminError("say which bookie: --url http://HOST:PORT or --port PORT")
    if not 0 < args.port < 65536:
        raise _AdminError(f"--port {args.port} is not a TCP port")
    return f"http://{args.host}:{args.port}"


def _gc_command(args: argparse.Namespace) -> int:
    out = _Out(args.json)
    try:
        code = _gc(args, out)
        out.lines.flush()
    except BrokenPipeError:
        quiet_broken_pipe()
        return 0
    except KeyboardInterrupt:
        return 130
    except _AdminError as exc:
        try:
            out.lines.flush()
        except BrokenPipeError:
            quiet_broken_pipe()
        print(f"bookiesim shell gc: {exc}", file=sys.stderr)
        return EXIT_BAD_FILE
    return code


def _gc(args: argparse.Namespace, out: _Out) -> int:
    base = _admin_base(args)
    timeout = args.timeout
    if args.suspend or args.resume:
        verb, which = ("suspend", args.suspend) if args.suspend else ("resume", args.resume)
        body = {
            f"{verb}Major": which in ("major", "both"),
            f"{verb}Minor": which in ("minor", "both"),
        }
        flags = _admin_call(base, "PUT", f"/api/v1/bookie/gc/{verb}_compaction", body, timeout)
        if out.json_lines:
            out.lines.json({"type": "summary", **flags})
        else:
            out.note(
                f"major compaction suspended: {flags['isMajorGcSuspended']}, "
                f"minor compaction suspended: {flags['isMinorGcSuspended']}"
            )
        return 0
    if not args.details:
        body = {}
        if args.major or args.minor or args.no_compaction:
            body = {"forceMajor": bool(args.major), "forceMinor": bool(args.minor)}
        query = "" if args.no_wait else "?wait=true"
        answer = _admin_call(base, "PUT", "/api/v1/bookie/gc" + query, body, timeout)
        report = answer.get("report")
        if out.json_lines:
            out.lines.json({"type": "gc", "triggered": answer["triggered"], **(report or {})})
        elif report is None:
            out.note(answer["message"])
        else:
            compaction = report["compaction"] or "no"
            out.note(
                f"GC pass: {len(report['ledgersDeleted'])} ledgers deleted, "
                f"{len(report['logsDeleted'])} logs deleted "
                f"({report['reclaimedByDeletion']} bytes), {compaction} compaction: "
                f"{len(report['logsCompacted'])} logs compacted "
                f"({report['reclaimedByCompaction']} bytes reclaimed, "
                f"{report['bytesCopied']} copied), {report['seconds']:.3f} s"
            )
    (status,) = _admin_call(base, "GET", "/api/v1/bookie/gc_details", None, timeout)
    logs = status.pop("entryLogs")
    table = out.table(
        Column("logId", 10),
        Column("totalSize", 12),
        Column("remainingSize", 13),
        Column("usage", 6),
        Column("ledgers", 0, "left"),
    )
    for entry in logs:
        if table is None:
            out.lines.json({"type": "entryLog", **entry})
        else:
            ledgers = ",".join(map(str, entry["ledgers"][:8]))
            if len(entry["ledgers"]) > 8:
                ledgers += f",... ({len(entry['ledgers'])})"
            table.row(
                entry["logIdHex"],
                entry["totalSize"],
                entry["remainingSize"],
                f"{entry['usage']:.3f}",
                ledgers,
            )
    out.finish(table)
    total = sum(e["totalSize"] for e in logs)
    remaining = sum(e["remainingSize"] for e in logs)
    if out.json_lines:
        summary = {"logs": len(logs), "totalSize": total, "remainingSize": remaining}
        out.lines.json({"type": "summary", **summary, **status})
    else:
        out.note(
            f"{_count(len(logs), 'entry log')} tracked, {remaining} of {total} bytes live; "
            f"compactions: {status['majorCompactionCounter']} major, "
            f"{status['minorCompactionCounter']} minor; suspended: "
            f"major {status['isMajorGcSuspended']}, minor {status['isMinorGcSuspended']}"
        )
    return 0
