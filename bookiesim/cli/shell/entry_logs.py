"""``bookiesim shell readlog``: the entries of an entry log, or its ledgers map."""

from __future__ import annotations

import argparse
import base64
import sys
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from bookiesim.cli.shell.common import (
    BODY_PREVIEW,
    Out,
    ShellError,
    counted,
    error_line,
)
from bookiesim.cli.shell.disk_files import locate_entry_log
from bookiesim.cli.shell.readlog_upstream import readlog_upstream
from bookiesim.console import Column
from bookiesim.entrylog.format import MAX_LOG_ID, EntryLogFormatError, parse_log_file_name
from bookiesim.entrylog.metadata import (
    EntryLogMetadata,
    extract_by_scanning,
    extract_from_ledgers_map,
)
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.scanner import scan_entry_log
from bookiesim.proto.entry_header import body_lac

if TYPE_CHECKING:
    from pathlib import Path

READLOG_KEYS = """\
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

A 0-byte log (created ahead of need by the bookie's preallocation pool, never written) is
not an error: no rows, exit code 0, and the summary has "empty": true (headerVersion null;
with --ledgers-map, source "empty").
"""


def log_id(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= MAX_LOG_ID:
        raise argparse.ArgumentTypeError(f"{value} is not a log id (0..{MAX_LOG_ID})")
    return value


def readlog(args: argparse.Namespace, out: Out) -> int:
    path, known_id = locate_entry_log(args)
    log_id = known_id if known_id is not None else parse_log_file_name(path.name)
    if log_id is None:
        raise ShellError(path, "not named <hex id>.log; pass its id with --log-id")
    if args.upstream_output:
        return readlog_upstream(args, out.lines, path, log_id)
    if args.startpos is not None or args.endpos is not None:
        raise ShellError(path, "-sp/-ep select a byte range for --upstream-output")
    if path.stat().st_size == 0:
        return _empty_log(out, path, log_id, args.ledgers_map)
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
                f"({counted(header.ledgers_count, 'ledger')})"
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
            lac = body_lac(body)
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
            f"{counted(s.entries, 'entry', 'entries')} ({s.entry_bytes} bytes){filtered}; "
            f"{counted(s.skipped, 'record')} skipped ({s.skipped_bytes} bytes: ledgers map"
            f"{'' if wanted_ledger is None else ', other ledgers'}); "
            f"{s.padding_bytes} padding bytes; {tail}"
        )
    return 0


def _empty_log(out: Out, path: Path, log_id: int, ledgers_map: bool) -> int:
    """A 0-byte log: one the bookie created ahead of need (its preallocation pool,
    ``entryLogPreallocationPoolSize``) and never wrote, not a torn one; as upstream's shell,
    which scans from the header's end and finds nothing, it lists nothing and succeeds."""
    if out.json_lines:
        summary: dict[str, Any] = (
            {"source": "empty", "ledgers": 0, "totalSize": 0, "ledgersMapOffset": 0}
            if ledgers_map
            else {
                "logId": log_id,
                "fileSize": 0,
                "headerVersion": None,
                "ledgersMapOffset": 0,
                "ledgersCount": 0,
                "entries": 0,
                "entryBytes": 0,
                "shown": 0,
                "skipped": 0,
                "skippedBytes": 0,
                "paddingBytes": 0,
                "torn": False,
                "tornOffset": None,
                "tornBytes": 0,
            }
        )
        out.lines.json({"type": "summary", **summary, "empty": True})
    else:
        out.note(
            f"[bold]{escape(str(path))}[/]: log {log_id:#x} ({log_id}) is empty (0 bytes): "
            "created ahead of need and never written, no entries"
        )
    return 0


def _preview(body: bytes) -> str:
    """The start of a body, escaped like a Python bytes literal (the JSON has it all)."""
    text = repr(body[:BODY_PREVIEW])[2:-1]
    return text + ("…" if len(body) > BODY_PREVIEW else "")


def _readlog_map(args: argparse.Namespace, out: Out, path: Path, log_id: int) -> int:
    try:
        meta: EntryLogMetadata = extract_from_ledgers_map(path, log_id)
        source, why = "ledgersMap", None
    except FileNotFoundError:
        raise
    except (EntryLogFormatError, OSError) as e:
        # The map is missing (never sealed) or cannot be trusted: scan instead, as upstream's
        # getEntryLogMetadata does. A scan that fails too is the error the user sees.
        meta = extract_by_scanning(path, log_id)
        source, why = "scan", error_line(e, str(path))
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
        out.note(f"{counted(shown, 'ledger')}, {total} bytes, from {where}")
    return 0
