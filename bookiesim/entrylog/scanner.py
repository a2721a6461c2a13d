"""Streaming scan of an entry log (upstream ``DefaultEntryLogger.scanEntryLog``).

The scan walks records from offset 1024 with upstream's tolerance rules:

* it needs 12 bytes (``int size, long ledgerId``) at each position, or it stops;
* ``size <= 0`` is padding: advance ONE byte and look again (runs of zero bytes are skipped in
  one step, with exactly the result of advancing byte by byte);
* ledger id -1 (a ledgers-map record) or a ledger the filter rejects: skip ``size`` bytes;
* otherwise the record is an entry, reported with its offset (of the size field), ids, size
  and, unless disabled, its body;
* a record that runs past the end of the log ends the scan silently. Upstream says nothing
  about it; here the :class:`ScanSummary` reports where that torn tail starts, so tools can
  count it.

The file is read in chunks (1 MiB by default); an entry bigger than a chunk is read on its
own. Memory stays bounded by the larger of the chunk and the largest entry.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from bookiesim.entrylog.format import HEADER_SIZE, INVALID_LEDGER_ID, LogHeader
from bookiesim.entrylog.reader import LogSource, read_header

__all__ = ["DEFAULT_CHUNK_SIZE", "EntryLogScan", "ScanSummary", "ScannedRecord", "scan_entry_log"]

DEFAULT_CHUNK_SIZE = 1 << 20

_SIZE_LEDGER = struct.Struct(">iq")  # the 12 bytes the scan needs at each position
_ENTRY_ID = struct.Struct(">q")
_NEED = _SIZE_LEDGER.size
_NONZERO = re.compile(rb"[^\x00]")


class ScannedRecord(NamedTuple):
    """One entry found by a scan."""

    offset: int
    """File offset of the record's size field; the entry's ``pos`` is ``offset + 4``."""
    ledger_id: int
    entry_id: int
    """-1 for a (corrupt) record shorter than 16 bytes, which has no entry id."""
    size: int
    """Body size; the record occupies ``size + 4`` bytes."""
    body: bytes | None
    """None when the scan was asked not to read bodies."""

    @property
    def pos(self) -> int:
        """Offset of the body: the ``pos`` half of the entry's location."""
        return self.offset + 4


@dataclass(slots=True)
class ScanSummary:
    """What a scan went through; complete once the scan is exhausted.

    ``entry_bytes + skipped_bytes + padding_bytes + torn_bytes == file_size - 1024``.
    """

    file_size: int
    entries: int = 0
    """Records reported."""
    entry_bytes: int = 0
    """Their bytes, size fields included."""
    skipped: int = 0
    """Ledgers-map records and entries of ledgers the filter rejected."""
    skipped_bytes: int = 0
    padding_bytes: int = 0
    """Bytes stepped over one at a time because their ``size`` read as ``<= 0``."""
    torn_offset: int | None = None
    """Where an incomplete record at the end of the log starts; None if the log ends cleanly.

    A tail of fewer than 12 bytes that are all zero counts as padding, not as a torn record
    (a size field cut within its leading zero bytes is indistinguishable from padding).
    """
    end_offset: int = HEADER_SIZE
    """Where the scan stopped: ``file_size``, or ``torn_offset``."""

    @property
    def torn(self) -> bool:
        return self.torn_offset is not None

    @property
    def torn_bytes(self) -> int:
        return 0 if self.torn_offset is None else self.file_size - self.torn_offset


class EntryLogScan:
    """An iterator over a log's entries; :attr:`summary` fills in as it goes.

    The header is read and checked when the scan is created: a log shorter than 1024 bytes
    or without the ``BKLO`` magic raises :class:`EntryLogFormatError` naming the file and
    offset. V0 headers scan like V1.
    """

    def __init__(
        self,
        source: LogSource,
        *,
        accept: Callable[[int], bool] | None = None,
        read_bodies: bool = True,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> None:
        if chunk_size < _NEED + 8:
            raise ValueError(f"chunk size {chunk_size} is too small")
        self.header: LogHeader = read_header(source)
        self._source = source
        self._accept = accept
        self._read_bodies = read_bodies
        self._chunk_size = chunk_size
        self.summary = ScanSummary(file_size=source.size())
        self._records = self._run()

    def __iter__(self) -> Iterator[ScannedRecord]:
        return self

    def __next__(self) -> ScannedRecord:
        return next(self._records)

    def _run(self) -> Iterator[ScannedRecord]:
        src = self._source
        accept = self._accept
        read_bodies = self._read_bodies
        chunk_size = self._chunk_size
        summary = self.summary
        size = summary.file_size
        unpack_head = _SIZE_LEDGER.unpack_from
        unpack_entry_id = _ENTRY_ID.unpack_from
        find_nonzero = _NONZERO.search

        pos = HEADER_SIZE
        chunk = b""
        cstart = pos  # chunk holds the file's bytes [cstart, cstart + len(chunk))
        while pos < size:
            rel = pos - cstart
            if rel + _NEED > len(chunk):
                if pos + _NEED > size:
                    self._stop_short(pos)
                    return
                chunk = src.read_at(pos, min(chunk_size, size - pos))
                cstart, rel = pos, 0
                if len(chunk) < _NEED:  # the file shrank under us
                    summary.file_size = size = pos + len(chunk)
                    self._stop_short(pos)
                    return
            rec_size, ledger_id = unpack_head(chunk, rel)

            if rec_size <= 0:
                step = 1
                if rec_size == 0:
                    # All positions whose 4 bytes are zero would be stepped over one by one;
                    # land where the first non-zero byte enters the size field.
                    m = find_nonzero(chunk, rel)
                    nonzero_at = (m.start() if m is not None else len(chunk)) - rel
                    step = max(1, nonzero_at - 3)
                summary.padding_bytes += step
                pos += step
                continue

            end = pos + 4 + rec_size
            if ledger_id == INVALID_LEDGER_ID or (accept is not None and not accept(ledger_id)):
                if end > size:
                    self._stop_torn(pos)
                    return
                summary.skipped += 1
                summary.skipped_bytes += 4 + rec_size
                pos = end
                continue
            if end > size:
                self._stop_torn(pos)
                return

            rec_end = rel + 4 + rec_size
            if rec_end > len(chunk) and (read_bodies or rel + 20 > len(chunk)):
                # Refill so that the whole record (or at least its ids) is in the chunk.
                want = max(chunk_size, 4 + rec_size) if read_bodies else chunk_size
                chunk = src.read_at(pos, min(want, size - pos))
                cstart, rel = pos, 0
                rec_end = 4 + rec_size
                if len(chunk) < (rec_end if read_bodies else min(20, rec_end)):
                    summary.file_size = size = pos + len(chunk)
                    self._stop_torn(pos)
                    return
            entry_id = unpack_entry_id(chunk, rel + 12)[0] if rec_size >= 16 else -1
            body = chunk[rel + 4 : rec_end] if read_bodies else None
            summary.entries += 1
            summary.entry_bytes += 4 + rec_size
            offset, pos = pos, end
            yield ScannedRecord(offset, ledger_id, entry_id, rec_size, body)
        summary.end_offset = pos

    def _stop_short(self, pos: int) -> None:
        # Fewer than 12 bytes left: upstream's short read of the size/ledger fields.
        summary = self.summary
        tail = self._source.read_at(pos, summary.file_size - pos)
        if tail.count(0) == len(tail):
            summary.padding_bytes += len(tail)
            summary.end_offset = summary.file_size
        else:
            self._stop_torn(pos)

    def _stop_torn(self, pos: int) -> None:
        self.summary.torn_offset = pos
        self.summary.end_offset = pos


def scan_entry_log(
    source: LogSource,
    *,
    accept: Callable[[int], bool] | None = None,
    read_bodies: bool = True,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> EntryLogScan:
    """Scan ``source`` (see :class:`EntryLogScan`); ``accept`` filters by ledger id."""
    return EntryLogScan(source, accept=accept, read_bodies=read_bodies, chunk_size=chunk_size)
