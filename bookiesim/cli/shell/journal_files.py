"""``bookiesim shell readjournal|readindex|lastmark``: a journal file, a ledger index file, and
the journal position a ledger directory was checkpointed at."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from bookiesim.bookie.index_file import IndexFile
from bookiesim.bookie.index_format import HEADER_SIZE as INDEX_HEADER_SIZE
from bookiesim.bookie.index_format import parse_index_file_name
from bookiesim.bookie.journal import (
    LAST_MARK_FILE,
    METAENTRY_ID_FENCE_KEY,
    METAENTRY_ID_LEDGER_EXPLICITLAC,
    METAENTRY_ID_LEDGER_KEY,
    DataRecord,
    ExplicitLacRecord,
    FenceRecord,
    JournalRecord,
    JournalScan,
    MasterKeyRecord,
    journal_file_name,
    read_journal,
    read_last_mark,
)
from bookiesim.bookie.journal.scan import is_tail_journal
from bookiesim.cli.shell.common import (
    LAST_MARK_NAME,
    Out,
    ShellError,
    counted,
)
from bookiesim.console import Column
from bookiesim.entrylog.format import split_location
from bookiesim.proto.entry_header import blob_lac, body_lac

if TYPE_CHECKING:
    import argparse

READJOURNAL_KEYS = """\
JSON keys, records ({"type": "data" | "masterKey" | "fence" | "explicitLac" | "unknownMeta"}):
  offset                   file offset of the record's 4-byte length field
  ledgerId, entryId        entryId of meta records is upstream's id for them
                           (masterKey -4096, fence -8192, explicitLac -32768)
  size                     the record's length field (bytes after it)
  lastAddConfirmed         data: bytes 16..24 of the entry; null if shorter
  masterKey                masterKey: the key, hex
  explicitLac, lacBlob     explicitLac: the LAC in the blob (null if under 16 bytes), blob hex
summary: version, records, endOffset (where the valid records end), torn, tornOffset,
  tornReason (why the tail is torn, or null), droppedRecords (records after tornOffset that
  replay leaves out: a record a power loss cut in the final write, and what follows it),
  tailChecked (the file is the last journal file holding records, so its final write was
  checked for such a record, as replay does)
"""

READINDEX_KEYS = """\
JSON keys: first {"type": "header"}: ledgerId (from the file name; null if it is not
<hex>.idx), version, masterKey (hex), fenced, stateBits, explicitLac (the LAC in the blob,
or null), explicitLacBlob (hex or null);
then {"type": "entry"}: ledgerId, entryId, location, logId, offset (location's low 32 bits);
summary: entries, lastEntryId.
"""

LASTMARK_KEYS = """\
DIR is a ledger directory or its current/ subdirectory. Every lastMark file there is shown
(lastMark, and lastMark.<i> for journal directory i when a bookie has several).

JSON keys ({"type": "lastMark"}): file, journalIndex (null for lastMark), fileId,
fileIdHex, offset, journalFile (the <hex>.txn in the journal's current/ that replay
starts in).
"""


def _describe(rec: JournalRecord) -> tuple[str, int, dict[str, Any], str]:
    """(type, entryId, JSON extras, table detail) of one journal record."""
    if isinstance(rec, DataRecord):
        body = rec.body
        lac = body_lac(body)
        return "data", rec.entry_id, {"lastAddConfirmed": lac}, f"lac={lac}"
    if isinstance(rec, MasterKeyRecord):
        key = rec.master_key.hex()
        return "masterKey", METAENTRY_ID_LEDGER_KEY, {"masterKey": key}, f"key={key}"
    if isinstance(rec, FenceRecord):
        return "fence", METAENTRY_ID_FENCE_KEY, {}, ""
    if isinstance(rec, ExplicitLacRecord):
        blob = rec.lac_blob
        lac = blob_lac(blob)
        extras = {"explicitLac": lac, "lacBlob": blob.hex()}
        return "explicitLac", METAENTRY_ID_LEDGER_EXPLICITLAC, extras, f"lac={lac}"
    return "unknownMeta", rec.entry_id, {}, ""


def readjournal(args: argparse.Namespace, out: Out) -> int:
    # As replay does: only the journal's last file holding records can end in a write that
    # a power loss cut (every earlier file was synced whole before the next was started).
    tail_checked = is_tail_journal(args.file)
    scan: JournalScan = read_journal(args.file, tail=tail_checked)
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
    dropped = 0 if scan.tear is None else scan.tear.dropped
    if out.json_lines:
        out.lines.json(
            {
                "type": "summary",
                "version": scan.version,
                "records": records,
                "endOffset": scan.end_offset,
                "torn": scan.torn,
                "tornOffset": torn_offset,
                "tornReason": scan.torn_reason,
                "droppedRecords": dropped,
                "tailChecked": tail_checked,
            }
        )
    else:
        left_out = f", {counted(dropped, 'record')} left out" if dropped else ""
        tail = (
            f"[bold red]torn tail at offset {torn_offset}: "
            f"{escape(scan.torn_reason or 'torn')}{left_out}[/]"
            if scan.torn
            else f"ends cleanly at offset {scan.end_offset}"
        )
        out.note(f"journal V{scan.version}: {counted(records, 'record')}; {tail}")
    return 0


def readindex(args: argparse.Namespace, out: Out) -> int:
    path = Path(args.file)
    ledger_id = parse_index_file_name(path.name)
    # The ledger id only labels messages inside IndexFile; -1 marks "unknown".
    index_file = IndexFile.open(path, -1 if ledger_id is None else ledger_id, read_only=True)
    try:
        header = index_file.header
        blob = header.explicit_lac
        lac = blob_lac(blob) if blob else None
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
        out.note(f"{counted(count, 'entry', 'entries')}, last entry id {last}")
    return 0


def lastmark(args: argparse.Namespace, out: Out) -> int:
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
            (m for m in map(LAST_MARK_NAME.fullmatch, os.listdir(current)) if m is not None),
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
