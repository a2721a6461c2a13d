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

Two ways to consume a scan, over the same walk:

* :func:`scan_entry_log` yields one :class:`ScannedRecord` per entry;
* :func:`scan_entry_log_batches` yields lists of plain ``(offset, ledger_id, entry_id, size,
  body)`` tuples (the fields of :class:`ScannedRecord`, in its order), each list holding up
  to 128 KiB of records. It costs a good deal less per entry (no record object, no iterator
  step per entry); bulk consumers (compaction, metadata, benchmarks) should use it.

Both see the same entries, make the same ``accept`` calls in the same order and fill in the
same summary; an exception from ``accept`` or from a read reaches the consumer after every
entry found before it, as it would one record at a time.

The file is read in chunks (1 MiB by default); an entry bigger than a chunk is read on its
own. Memory stays bounded by the larger of the chunk and the largest entry, plus the bodies
of the batches in flight.

How it is fast: records that are whole inside the chunk and at least 16 bytes long (every
entry a bookie writes) go through a tight loop that unpacks ``size, ledgerId, entryId`` in
one call, slices the body out of the chunk (``bytes``, one copy) and appends a tuple;
everything else — padding, short records, records near the chunk's end, the end of the log —
goes one position at a time through the rules above, as before.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from functools import partial
from itertools import chain
from typing import TYPE_CHECKING, NamedTuple, TypeAlias, cast

from bookiesim.entrylog.format import HEADER_SIZE, INVALID_LEDGER_ID, LogHeader
from bookiesim.entrylog.reader import LogSource, read_header

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "EntryLogBatchScan",
    "EntryLogScan",
    "RawRecord",
    "ScanSummary",
    "ScannedRecord",
    "scan_entry_log",
    "scan_entry_log_batches",
]

DEFAULT_CHUNK_SIZE = 1 << 20

_SIZE_LEDGER = struct.Struct(">iq")  # the 12 bytes the scan needs at each position
_RECORD_HEAD = struct.Struct(">iqq")  # size, ledgerId, entryId: the fast path's one unpack
_ENTRY_ID = struct.Struct(">q")
_NEED = _SIZE_LEDGER.size
_HEAD = _RECORD_HEAD.size
_BATCH_BYTES = 1 << 17
"""Record bytes per batch, at most (one bigger record makes a batch of its own).

Small batches keep the bodies in flight few, which matters more than it seems: with a whole
chunk's bodies held while the next chunk is read, glibc's heap grows and is trimmed back on
every chunk, and the page faults of growing it again cost more than the scan itself.
"""
_NONZERO = re.compile(rb"[^\x00]")

RawRecord: TypeAlias = tuple[int, int, int, int, bytes | None]
"""``(offset, ledger_id, entry_id, size, body)``: a :class:`ScannedRecord` as a plain tuple."""


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


# A plain tuple becomes a ScannedRecord in C, without ScannedRecord.__new__'s Python frame.
_as_records = cast(
    "Callable[[list[RawRecord]], Iterator[ScannedRecord]]",
    partial(map, partial(tuple.__new__, ScannedRecord)),
)


@dataclass(slots=True)
class ScanSummary:
    """What a scan went through; complete once the scan is exhausted.

    It is brought up to date a batch at a time: while :func:`scan_entry_log` is being
    iterated it may already count entries of the current chunk not yet handed over.

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


class _Scan:
    """The walk itself, shared by both ways of consuming it."""

    def __init__(
        self,
        source: LogSource,
        *,
        accept: Callable[[int], bool] | None = None,
        read_bodies: bool = True,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        start: int = HEADER_SIZE,
        stop: int | None = None,
    ) -> None:
        if chunk_size < _NEED + 8:
            raise ValueError(f"chunk size {chunk_size} is too small")
        if start < HEADER_SIZE or (stop is not None and stop < start):
            raise ValueError(f"bad scan range {start}..{stop} (records start at {HEADER_SIZE})")
        self.header: LogHeader = read_header(source)
        self._source = source
        self._accept = accept
        self._read_bodies = read_bodies
        self._chunk_size = chunk_size
        self._start = start
        self._stop = stop
        self.summary = ScanSummary(file_size=source.size(), end_offset=start)

    def _batches(self) -> Iterator[list[RawRecord]]:
        """The walk: non-empty lists of entries, handed over when ``_BATCH_BYTES`` of records
        have been passed, before any read, and at the end (or before an ``accept`` error)."""
        src = self._source
        accept = self._accept
        read_bodies = self._read_bodies
        chunk_size = self._chunk_size
        summary = self.summary
        size = summary.file_size
        unpack_head = _SIZE_LEDGER.unpack_from
        unpack_record = _RECORD_HEAD.unpack_from
        unpack_entry_id = _ENTRY_ID.unpack_from
        find_nonzero = _NONZERO.search
        batch_bytes = _BATCH_BYTES
        invalid = INVALID_LEDGER_ID

        batch: list[RawRecord] = []
        append = batch.append
        failure: Exception | None = None
        pos = self._start
        # A range scan reports the records that *start* before ``stop``; the last one may
        # end after it.
        stop = size if self._stop is None else min(size, self._stop)
        chunk = b""
        cstart = pos  # chunk holds the file's bytes [cstart, cstart + len(chunk))
        clen = 0
        while True:
            if pos >= stop:
                summary.end_offset = pos
                break
            rel = pos - cstart

            # Fast path: records of at least 16 bytes that end at least 20 bytes before the
            # chunk does (so the next one can be unpacked without a bounds check). Every byte
            # it passes belongs to an entry or a skipped record, so the summary is updated
            # once per run, not per record.
            full = clen - _HEAD
            if stop - cstart < full:
                full = stop - cstart  # a record crossing ``stop`` goes the slow way
            limit = rel + batch_bytes if rel + batch_bytes < full else full
            if rel <= limit:
                first_rel = rel
                entries_before = len(batch)
                skipped = skipped_bytes = 0
                try:
                    if read_bodies:
                        while True:
                            rec_size, ledger_id, entry_id = unpack_record(chunk, rel)
                            start = rel + 4
                            end = start + rec_size
                            if rec_size < 16 or end > limit:
                                break
                            if ledger_id == invalid or (
                                accept is not None and not accept(ledger_id)
                            ):
                                skipped += 1
                                skipped_bytes += end - rel
                            else:
                                data = chunk[start:end]
                                append((cstart + rel, ledger_id, entry_id, rec_size, data))
                            rel = end
                    else:
                        while True:
                            rec_size, ledger_id, entry_id = unpack_record(chunk, rel)
                            end = rel + 4 + rec_size
                            if rec_size < 16 or end > limit:
                                break
                            if ledger_id == invalid or (
                                accept is not None and not accept(ledger_id)
                            ):
                                skipped += 1
                                skipped_bytes += end - rel
                            else:
                                append((cstart + rel, ledger_id, entry_id, rec_size, None))
                            rel = end
                except Exception as e:  # raised by ``accept``: hand over the entries before it
                    failure = e
                if rel != first_rel:
                    summary.entries += len(batch) - entries_before
                    summary.entry_bytes += rel - first_rel - skipped_bytes
                    summary.skipped += skipped
                    summary.skipped_bytes += skipped_bytes
                    pos = cstart + rel
                if failure is not None:
                    break
                if pos >= stop:
                    continue
                if limit != full and batch:  # a batch's worth
                    yield batch
                    batch = []
                    append = batch.append
                    continue

            # One position by the rules.
            if rel + _NEED > clen:
                if batch:  # hand over what we have before reading again
                    yield batch
                    batch = []
                    append = batch.append
                if pos + _NEED > size:
                    self._stop_short(pos)
                    break
                chunk = b""  # free the old chunk first: the new one can take its place
                chunk = src.read_at(pos, min(chunk_size, size - pos))
                cstart, rel = pos, 0
                clen = len(chunk)
                if clen < _NEED:  # the file shrank under us
                    summary.file_size = size = pos + clen
                    self._stop_short(pos)
                    break
            rec_size, ledger_id = unpack_head(chunk, rel)

            if rec_size <= 0:
                step = 1
                if rec_size == 0:
                    # All positions whose 4 bytes are zero would be stepped over one by one;
                    # land where the first non-zero byte enters the size field.
                    m = find_nonzero(chunk, rel)
                    nonzero_at = (m.start() if m is not None else clen) - rel
                    step = max(1, nonzero_at - 3)
                summary.padding_bytes += step
                pos += step
                continue

            end = pos + 4 + rec_size
            try:
                skip = ledger_id == invalid or (accept is not None and not accept(ledger_id))
            except Exception as e:
                failure = e
                break
            if skip:
                if end > size:
                    self._stop_torn(pos)
                    break
                summary.skipped += 1
                summary.skipped_bytes += 4 + rec_size
                pos = end
                continue
            if end > size:
                self._stop_torn(pos)
                break

            rec_end = rel + 4 + rec_size
            if rec_end > clen and (read_bodies or rel + 20 > clen):
                # Refill so that the whole record (or at least its ids) is in the chunk.
                if batch:
                    yield batch
                    batch = []
                    append = batch.append
                want = max(chunk_size, 4 + rec_size) if read_bodies else chunk_size
                chunk = b""
                chunk = src.read_at(pos, min(want, size - pos))
                cstart, rel = pos, 0
                clen = len(chunk)
                rec_end = 4 + rec_size
                if clen < (rec_end if read_bodies else min(20, rec_end)):
                    summary.file_size = size = pos + clen
                    self._stop_torn(pos)
                    break
            entry_id = unpack_entry_id(chunk, rel + 12)[0] if rec_size >= 16 else -1
            body = chunk[rel + 4 : rec_end] if read_bodies else None
            summary.entries += 1
            summary.entry_bytes += 4 + rec_size
            append((pos, ledger_id, entry_id, rec_size, body))
            pos = end
        if batch:
            yield batch
        if failure is not None:
            raise failure

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


class EntryLogScan(_Scan):
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
        start: int = HEADER_SIZE,
        stop: int | None = None,
    ) -> None:
        super().__init__(
            source,
            accept=accept,
            read_bodies=read_bodies,
            chunk_size=chunk_size,
            start=start,
            stop=stop,
        )
        self._records: Iterator[ScannedRecord] = chain.from_iterable(
            map(_as_records, self._batches())
        )

    def __iter__(self) -> Iterator[ScannedRecord]:
        # The records themselves (C iterators all the way down to a batch), so that a ``for``
        # loop does not go through a Python ``__next__`` per entry; ``next(scan)`` draws from
        # the same iterator.
        return self._records

    def __next__(self) -> ScannedRecord:
        return next(self._records)


class EntryLogBatchScan(_Scan):
    """An iterator over a log's entries in batches: non-empty lists of :data:`RawRecord`.

    Same walk, header check and :attr:`summary` as :class:`EntryLogScan`; a batch holds the
    entries found in about one chunk, in file order. The summary is up to date with every
    batch handed over.
    """

    def __init__(
        self,
        source: LogSource,
        *,
        accept: Callable[[int], bool] | None = None,
        read_bodies: bool = True,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        start: int = HEADER_SIZE,
        stop: int | None = None,
    ) -> None:
        super().__init__(
            source,
            accept=accept,
            read_bodies=read_bodies,
            chunk_size=chunk_size,
            start=start,
            stop=stop,
        )
        self._batch_iter = self._batches()

    def __iter__(self) -> Iterator[list[RawRecord]]:
        return self._batch_iter

    def __next__(self) -> list[RawRecord]:
        return next(self._batch_iter)


def scan_entry_log(
    source: LogSource,
    *,
    accept: Callable[[int], bool] | None = None,
    read_bodies: bool = True,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    start: int = HEADER_SIZE,
    stop: int | None = None,
) -> EntryLogScan:
    """Scan ``source`` (see :class:`EntryLogScan`); ``accept`` filters by ledger id.

    ``start`` and ``stop`` limit the scan to the records that start in ``[start, stop)``;
    ``start`` must be a position the whole scan visits (a record's offset, as a scan with
    ``read_bodies=False`` finds them), so that scans of adjacent ranges together see
    exactly what one scan of the file sees.
    """
    return EntryLogScan(
        source,
        accept=accept,
        read_bodies=read_bodies,
        chunk_size=chunk_size,
        start=start,
        stop=stop,
    )


def scan_entry_log_batches(
    source: LogSource,
    *,
    accept: Callable[[int], bool] | None = None,
    read_bodies: bool = True,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    start: int = HEADER_SIZE,
    stop: int | None = None,
) -> EntryLogBatchScan:
    """Scan ``source`` a batch at a time (see :class:`EntryLogBatchScan`); cheaper per entry.
    ``start`` and ``stop`` as for :func:`scan_entry_log`.

    ::

        for batch in scan_entry_log_batches(reader):
            for offset, ledger_id, entry_id, size, body in batch:
                ...
    """
    return EntryLogBatchScan(
        source,
        accept=accept,
        read_bodies=read_bodies,
        chunk_size=chunk_size,
        start=start,
        stop=stop,
    )
