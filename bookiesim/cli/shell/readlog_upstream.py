"""``bookiesim shell readlog --upstream-output``: an entry log's entries in the blocks upstream's
shell prints, for scripts written against it.

A line saying what is scanned (``Scan entry log 5 (5.log)``, with ``for LedgerId L`` or
``for PositionRange: A - B`` when narrowed), then per entry::

    --------- Lid=L, Eid=E, ByteOffset=P, EntrySize=S ---------
    Type:           DATA
    LastConfirmed:  N
    (blank)

``ByteOffset`` is the record's size field, ``EntrySize`` the body's bytes. With ``-m`` the
block goes on with ``Data:``, a blank line, the body past its 32-byte header (digest, then
payload, as upstream prints it) as UTF-8 text, and a blank line. Upstream's meta records
(master key, fence) print ``Type:           META`` and the key or ``Fenced``. ``-l`` keeps one
ledger (``-e`` one entry of it; without ``-l``, ``-e`` is ignored, as upstream ignores it);
``-sp``/``-ep`` keep the records that overlap that byte range. Nothing found prints upstream's
line saying so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bookiesim.cli.shell.common import ShellError
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.scanner import ScannedRecord, scan_entry_log
from bookiesim.proto.entry_header import body_lac

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from bookiesim.console import LineWriter

__all__ = ["readlog_upstream"]

META_LEDGER_KEY = -0x1000
"""Upstream's entry id of a master-key record."""
META_FENCE_KEY = -0x2000
"""Upstream's entry id of a fence record."""
HEADER_BYTES = 32
"""ledgerId, entryId, lastAddConfirmed and length: what upstream skips before the data."""


def _block(out: LineWriter, rec: ScannedRecord, msg: bool) -> None:
    body = rec.body or b""
    out.line(
        f"--------- Lid={rec.ledger_id}, Eid={rec.entry_id}, ByteOffset={rec.offset}, "
        f"EntrySize={rec.size} ---------"
    )
    if rec.entry_id == META_LEDGER_KEY:
        size = int.from_bytes(body[16:20], "big")
        out.line("Type:           META")
        out.line(f"MasterKey:      {body[20 : 20 + size].hex()}")
        out.line("")
        return
    if rec.entry_id == META_FENCE_KEY:
        out.line("Type:           META")
        out.line("Fenced")
        out.line("")
        return
    out.line("Type:           DATA")
    out.line(f"LastConfirmed:  {body_lac(body)}")
    if msg:
        out.line("Data:")
        out.line("")
        out.line(body[HEADER_BYTES:].decode("utf-8", errors="replace"))
    out.line("")


def readlog_upstream(args: argparse.Namespace, out: LineWriter, path: Path, log_id: int) -> int:
    ledger: int | None = args.ledger
    entry: int | None = args.entry
    start: int | None = args.startpos
    end: int | None = args.endpos
    name = f"{log_id} ({log_id:x}.log)"
    if start is not None and end is not None and end < start:
        raise ShellError(path, f"-sp {start} is after -ep {end}")
    if args.ledgers_map or args.json:
        raise ShellError(path, "--upstream-output prints entries only, as text")
    found = False

    def records(accept: Callable[[int], bool] | None = None) -> Iterator[ScannedRecord]:
        # A 0-byte log (created ahead of need, never written) has no header to read:
        # upstream's scan finds nothing in it, and so does this one.
        if path.stat().st_size == 0:
            return
        with EntryLogReader(path, log_id) as reader:
            yield from scan_entry_log(reader, accept=accept)

    if start is not None:
        upto = "-1" if end is None else str(end)
        out.line(f"Scan entry log {name} for PositionRange: {start} - {upto}")
        for rec in records():
            if end is not None and rec.offset > end:
                break
            if start <= rec.offset + rec.size + 4 - 1:
                _block(out, rec, args.print_body)
                found = True
        if not found:
            out.line(
                f"Entry log {name} doesn't has any entry in the range {start} - {upto}. "
                "Probably the position range, you have provided is lesser than the "
                "LOGFILE_HEADER_SIZE (1024) or greater than the current log filesize."
            )
    elif ledger is not None:
        which = "" if entry is None else f" for EntryId {entry}"
        out.line(f"Scan entry log {name} for LedgerId {ledger} {which}")
        for rec in records(ledger.__eq__):
            if entry is None or rec.entry_id == entry:
                _block(out, rec, args.print_body)
                found = True
        if not found:
            which = "" if entry is None else f" EntryId {entry}"
            out.line(f"LedgerId {ledger} {which} is not available in the entry log {name}")
    else:
        out.line(f"Scan entry log {name}")
        for rec in records():
            _block(out, rec, args.print_body)
    return 0
