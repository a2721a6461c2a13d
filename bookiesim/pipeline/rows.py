"""One split of an entry log as Arrow record batches: the rows of the ``entrylog`` source.

Columns (``SCHEMA``):

================  ======  =============================================================
bookie            string  the log's bookie (option, or from the path: :mod:`.inputs`)
logId             long    the log's id (its file name)
ledgerId          long
entryId           long
location          long    ``(logId << 32) | pos``, pos = offset of the body (after size)
size              int     body bytes; the record takes ``size + 4`` (what ledgers maps sum)
lastAddConfirmed  long    the LAC the writer put in the entry's header
publishTime       long    Pulsar entries only (reference/pulsar.md §7): MessageMetadata
brokerTimestamp   long    Pulsar entries with broker entry metadata
index             long    idem
status            string  ``entry``; with the ``problems`` option also ``torn`` (the
                          incomplete record at a log's end: location = its offset, size =
                          its bytes) and ``unreadable`` (a file skipped with
                          skip-bad-files: ``error`` says why)
error             string  for ``unreadable`` rows
================  ======  =============================================================

Where the payload starts depends on the ledger's digest type (32 header bytes, then 4, 8,
20 or 0 digest bytes); it is found once per ledger and split by verifying the first entry's
CRC32C, then CRC32 digest, then looking for Pulsar's magic after the HMAC and DUMMY
lengths. Rows are built a few scanner batches at a time, so memory
stays bounded whatever the file size (Arrow batches of up to 16,384 rows, no bodies kept).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from itertools import repeat
from operator import getitem
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from bookiesim.client.digest import DigestManager, DigestMismatchError, DigestType
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.scanner import RawRecord, scan_entry_log_batches
from bookiesim.proto.entry_header import HEADER_LENGTH, LAC_OFFSET, LENGTH_OFFSET
from bookiesim.proto.pulsar_entry import parse_pulsar_entry

if TYPE_CHECKING:
    from bookiesim.pipeline.inputs import Split

__all__ = ["COLUMNS", "SCHEMA", "Columns", "read_split", "scan_split"]

SCHEMA = pa.schema(
    [
        ("bookie", pa.string()),
        ("logId", pa.int64()),
        ("ledgerId", pa.int64()),
        ("entryId", pa.int64()),
        ("location", pa.int64()),
        ("size", pa.int32()),
        ("lastAddConfirmed", pa.int64()),
        ("publishTime", pa.int64()),
        ("brokerTimestamp", pa.int64()),
        ("index", pa.int64()),
        ("status", pa.string()),
        ("error", pa.string()),
    ]
)
COLUMNS = tuple(SCHEMA.names)

_LAC = struct.Struct(">q")  # the long at LAC_OFFSET of a packaged entry
ROWS_PER_BATCH = 16_384
"""Rows per Arrow batch handed to Spark."""
_PULSAR_MAGICS = (b"\x0e\x01", b"\x0e\x02")
_PULSAR_FIRST_BYTES = frozenset(magic[0] for magic in _PULSAR_MAGICS)
PulsarFields = tuple[int | None, int | None, int | None]
PulsarParser = Callable[[bytes], PulsarFields | None]


def payload_offset(ledger_id: int, body: bytes) -> int | None:
    """Where the payload of this ledger's entries starts in a body, or None if unknown."""
    for digest in (DigestType.CRC32C, DigestType.CRC32):
        try:
            DigestManager(ledger_id, b"", digest).verify(body)
        except DigestMismatchError:
            continue
        return HEADER_LENGTH + digest.digest_length
    for digest in (DigestType.HMAC, DigestType.DUMMY):
        at = HEADER_LENGTH + digest.digest_length
        if body[at : at + 2] in _PULSAR_MAGICS:
            return at
    return None


def _problem_batch(split: Split, status: str, location: int, size: int, error: str | None) -> Any:
    row: dict[str, list[object]] = {name: [None] for name in COLUMNS}
    row.update(
        bookie=[split.bookie],
        logId=[split.log_id],
        location=[location],
        size=[size],
        status=[status],
        error=[error],
    )
    return pa.RecordBatch.from_pydict(row, schema=SCHEMA)


class Columns:
    """The columns of the rows to come, filled a scanner batch at a time. Only what a row
    needs is kept (never the bodies), so a batch is bounded by its row count whatever the
    entry size. ``lacs=False`` leaves the LAC column out (the blocks rows have none)."""

    __slots__ = (
        "_keep_lacs",
        "broker",
        "entry_ids",
        "index",
        "lacs",
        "ledger_ids",
        "offsets",
        "publish",
        "sizes",
    )

    def __init__(self, *, lacs: bool = True) -> None:
        self.offsets: list[int] = []
        self.ledger_ids: list[int] = []
        self.entry_ids: list[int] = []
        self.sizes: list[int] = []
        self.lacs: list[int | None] = []
        self.publish: list[int | None] = []
        self.broker: list[int | None] = []
        self.index: list[int | None] = []
        self._keep_lacs = lacs

    def __len__(self) -> int:
        return len(self.offsets)

    def add(
        self,
        batch: list[RawRecord],
        parse: PulsarParser | None,
        payload_at: dict[int, int | None],
    ) -> None:
        # One transposition in C instead of a comprehension per column: at 1 KiB entries
        # the per-entry Python work here costs as much as the scan itself.
        offsets, ledger_ids, entry_ids, sizes, maybe_bodies = zip(*batch, strict=True)
        bodies = cast("tuple[bytes, ...]", maybe_bodies)  # the scan reads bodies
        self.offsets += offsets
        self.ledger_ids += ledger_ids
        self.entry_ids += entry_ids
        self.sizes += sizes
        if self._keep_lacs:
            unpack_lac = _LAC.unpack_from
            self.lacs += [
                unpack_lac(body, LAC_OFFSET)[0] if len(body) >= LENGTH_OFFSET else None
                for body in bodies
            ]
        n = len(batch)
        fields = (
            None if parse is None else _pulsar_fields(ledger_ids, sizes, bodies, parse, payload_at)
        )
        if fields is None:
            nulls: list[int | None] = [None] * n
            self.publish += nulls
            self.broker += nulls
            self.index += nulls
        else:
            self.publish += fields[0]
            self.broker += fields[1]
            self.index += fields[2]

    def to_arrow(self, split: Split) -> pa.RecordBatch:
        n = len(self)
        high = split.log_id << 32
        columns = [
            pa.array([split.bookie] * n, pa.string()),
            pa.array([split.log_id] * n, pa.int64()),
            pa.array(self.ledger_ids, pa.int64()),
            pa.array(self.entry_ids, pa.int64()),
            pa.array([high | (offset + 4) for offset in self.offsets], pa.int64()),
            pa.array(self.sizes, pa.int32()),
            pa.array(self.lacs, pa.int64()),
            pa.array(self.publish, pa.int64()),
            pa.array(self.broker, pa.int64()),
            pa.array(self.index, pa.int64()),
            pa.array(["entry"] * n, pa.string()),
            pa.nulls(n, pa.string()),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def _pulsar_fields(
    ledger_ids: tuple[int, ...],
    sizes: tuple[int, ...],
    bodies: tuple[bytes, ...],
    parse: PulsarParser,
    payload_at: dict[int, int | None],
) -> tuple[list[int | None], list[int | None], list[int | None]] | None:
    """publishTime, brokerTimestamp and index of each entry of a batch (None where it is no
    Pulsar entry), or None when none of them is one."""
    for ledger_id in set(ledger_ids) - payload_at.keys():
        payload_at[ledger_id] = payload_offset(ledger_id, bodies[ledger_ids.index(ledger_id)])
    ats = list(map(payload_at.__getitem__, ledger_ids))
    # Most logs hold no Pulsar entry and one digest type. Then one C-level pass over the
    # byte where the magic would start settles it (a body too short for it goes the long
    # way).
    if len(common := set(ats)) == 1:
        (at,) = common
        if at is None:
            return None
        if min(sizes) > at and _PULSAR_FIRST_BYTES.isdisjoint(map(getitem, bodies, repeat(at))):
            return None
    n = len(bodies)
    publish: list[int | None] = [None] * n
    broker: list[int | None] = [None] * n
    index: list[int | None] = [None] * n
    for i, (at, body) in enumerate(zip(ats, bodies, strict=True)):
        if at is None or not body.startswith(_PULSAR_MAGICS, at):
            continue
        fields = parse(body[at:])
        if fields is not None:
            publish[i], broker[i], index[i] = fields
    return publish, broker, index


def read_split(
    split: Split, *, problems: bool = False, pulsar: bool = True
) -> Iterator[pa.RecordBatch]:
    """The rows of ``split`` as Arrow batches (see ``ROWS_PER_BATCH``)."""
    for item in scan_split(split, problems=problems, pulsar=pulsar, rows=ROWS_PER_BATCH):
        yield item.to_arrow(split) if isinstance(item, Columns) else item


def scan_split(
    split: Split, *, problems: bool, pulsar: bool, rows: int, lacs: bool = True
) -> Iterator[Columns | pa.RecordBatch]:
    """The entries of ``split``, ``rows`` at a time (the last batch may hold fewer), then,
    with ``problems``, its torn tail or why it is unreadable as a one-row Arrow batch."""
    if split.error is not None:
        if problems:
            yield _problem_batch(split, "unreadable", 0, 0, split.error)
        return
    parse: PulsarParser | None = parse_pulsar_entry if pulsar else None
    offsets: dict[int, int | None] = {}
    with EntryLogReader(split.path, split.log_id) as reader:
        scan = scan_entry_log_batches(reader, start=split.start, stop=split.stop)
        # The scanner hands over ~128 KiB at a time; Spark pays per Arrow batch, so rows are
        # gathered into larger batches first.
        columns = Columns(lacs=lacs)
        for records in scan:
            columns.add(records, parse, offsets)
            if len(columns) >= rows:
                yield columns
                columns = Columns(lacs=lacs)
        if len(columns):
            yield columns
        summary = scan.summary
        if problems and summary.torn_offset is not None:
            yield _problem_batch(split, "torn", summary.torn_offset, summary.torn_bytes, None)
