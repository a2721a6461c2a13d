"""Entry log file format (upstream ``DefaultEntryLogger``, header V1), without any I/O.

Theory of operation
-------------------
An entry log is a 1024-byte header followed by records. Every integer is big-endian and
signed (Java ``int`` = 4 bytes, ``long`` = 8 bytes)::

    header   "BKLO" | int version | long ledgersMapOffset | int ledgersCount | 1004 zero bytes
    record   int size | size bytes of body

An entry's body is exactly what the client sent (``AddRequest.body``), so it starts with
``long ledgerId, long entryId``; the bookie adds nothing but the size prefix. A *location*
``(logId << 32) | pos`` names an entry, where ``pos`` is the file offset of the body (just
after its size field), so a location is never 0 (the header occupies bytes 0..1023).

When a log is rotated ("sealed") its ledgers map is appended as one or more records in the
same record format, each holding at most 10,000 ledgers::

    int size = 20 + 16 n | long -1 | long -2 | int n | n x (long ledgerId, long bytes)

and the header's offset/count fields (bytes 8..20) are patched in place to point at the first
batch. "bytes" is the sum over the ledger's entries of ``size + 4``.

Everything here works on ``bytes``; the writer, reader and scanner modules do the I/O.
"""

from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bookiesim.entrylog.errors import EntryLogFormatError

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

__all__ = [
    "HEADER_CURRENT_VERSION",
    "HEADER_SIZE",
    "HEADER_V0",
    "HEADER_V1",
    "HEADER_VERSION_POSITION",
    "INVALID_LEDGER_ID",
    "LEDGERS_MAP_ENTRY_ID",
    "LEDGERS_MAP_ENTRY_SIZE",
    "LEDGERS_MAP_HEADER_SIZE",
    "LEDGERS_MAP_MAX_BATCH_SIZE",
    "LEDGERS_MAP_MAX_RECORD_SIZE",
    "LEDGERS_MAP_OFFSET_POSITION",
    "LOG_FILE_SUFFIX",
    "MAGIC",
    "MAX_LOG_ID",
    "MAX_LOG_SIZE",
    "MIN_SANE_ENTRY_SIZE",
    "EntryLogFormatError",
    "LogHeader",
    "decode_ledgers_map",
    "decode_ledgers_map_batch",
    "encode_ledgers_map",
    "encode_record",
    "iter_ledgers_map_batches",
    "log_file_name",
    "make_location",
    "parse_log_file_name",
    "split_location",
]

HEADER_SIZE = 1024
"""``LOGFILE_HEADER_SIZE``: records start at this offset."""
MAGIC = b"BKLO"
HEADER_V0 = 0
"""Old logs: no ledgers map."""
HEADER_V1 = 1
"""Current: the ledgers map offset and count live at bytes 8..20."""
HEADER_CURRENT_VERSION = HEADER_V1
HEADER_VERSION_POSITION = 4
LEDGERS_MAP_OFFSET_POSITION = 8
"""Where the 12 patched bytes (long offset, int count) start."""

INVALID_LEDGER_ID = -1
"""The ledger id of ledgers-map records (upstream ``INVALID_LID``)."""
LEDGERS_MAP_ENTRY_ID = -2
LEDGERS_MAP_MAX_BATCH_SIZE = 10_000
LEDGERS_MAP_HEADER_SIZE = 4 + 8 + 8 + 4
"""size, ledgerId, entryId, n: the bytes before a batch's (ledger, bytes) pairs."""
LEDGERS_MAP_ENTRY_SIZE = 8 + 8
LEDGERS_MAP_MAX_RECORD_SIZE = (
    LEDGERS_MAP_HEADER_SIZE - 4 + LEDGERS_MAP_ENTRY_SIZE * LEDGERS_MAP_MAX_BATCH_SIZE
)
"""The largest ``size`` field a ledgers-map batch may have (upstream's read buffer)."""

MIN_SANE_ENTRY_SIZE = 8 + 8
"""A body must at least hold its ledger and entry ids."""
MAX_LOG_ID = 2**31 - 1
"""Log ids are Java ints; the allocator wraps to 0 after this one."""
MAX_LOG_SIZE = 2**31 - 1
"""A log never grows past ``Integer.MAX_VALUE`` bytes, so every ``pos`` fits a location."""
LOG_FILE_SUFFIX = ".log"

_HEADER_FIELDS = struct.Struct(">4siqi")  # magic, version, ledgers map offset, ledgers count
_MAP_PATCH = struct.Struct(">qi")
_INT = struct.Struct(">i")
_MAP_BATCH_HEAD = struct.Struct(">iqqi")  # size, -1, -2, n
_MAP_BATCH_BODY_HEAD = struct.Struct(">qqi")  # the same without the size field
_ONE_LEDGER_MAP = struct.Struct(">iqqiqq")  # a batch of one ledger
_HEADER_PADDING = bytes(HEADER_SIZE - _HEADER_FIELDS.size)
_LOG_FILE_NAME = re.compile(r"([0-9a-fA-F]+)\.log")


@dataclass(frozen=True, slots=True)
class LogHeader:
    """The first 20 meaningful bytes of an entry log; the other 1004 are zero."""

    version: int = HEADER_CURRENT_VERSION
    ledgers_map_offset: int = 0
    """0 until the ledgers map is appended (an unsealed log, or a V0 log)."""
    ledgers_count: int = 0

    def encode(self) -> bytes:
        """The full 1024-byte header, zero-filled (upstream PR #4607: never garbage)."""
        return (
            _HEADER_FIELDS.pack(MAGIC, self.version, self.ledgers_map_offset, self.ledgers_count)
            + _HEADER_PADDING
        )

    def encode_map_patch(self) -> bytes:
        """The 12 bytes written at ``LEDGERS_MAP_OFFSET_POSITION`` when a log is sealed."""
        return _MAP_PATCH.pack(self.ledgers_map_offset, self.ledgers_count)

    @classmethod
    def decode(cls, data: bytes) -> LogHeader:
        """Parse a header from the first bytes of a log (at least ``HEADER_SIZE`` of them).

        The version is not checked (upstream only logs unknown versions); callers decide what
        a version means to them.
        """
        if len(data) < HEADER_SIZE:
            raise EntryLogFormatError(
                f"file ends inside the {HEADER_SIZE}-byte entry log header", offset=len(data)
            )
        magic, version, offset, count = _HEADER_FIELDS.unpack_from(data)
        if magic != MAGIC:
            raise EntryLogFormatError(
                f"bad magic {magic!r}, an entry log starts with {MAGIC!r}", offset=0
            )
        return cls(version=version, ledgers_map_offset=offset, ledgers_count=count)


def log_file_name(log_id: int) -> str:
    """``<lower-case hex id>.log``, no padding: ``0.log``, ``a.log``, ``446b.log``."""
    if not 0 <= log_id <= MAX_LOG_ID:
        raise ValueError(f"log id {log_id} outside 0..{MAX_LOG_ID}")
    return f"{log_id:x}{LOG_FILE_SUFFIX}"


@functools.lru_cache(maxsize=1 << 16)
def parse_log_file_name(name: str) -> int | None:
    """The log id of an entry log file name, or None if ``name`` is not one.

    Accepts upper-case hex as upstream does; ids beyond ``MAX_LOG_ID`` are not entry logs
    this code could have written and yield None. A pure function of the name, so cached:
    GC lists the ledger dirs every pass and used to parse the same names again each time.
    """
    m = _LOG_FILE_NAME.fullmatch(name)
    if m is None:
        return None
    log_id = int(m.group(1), 16)
    return log_id if log_id <= MAX_LOG_ID else None


def make_location(log_id: int, pos: int) -> int:
    """``(log_id << 32) | pos``; ``pos`` is the offset of the entry body, after its size."""
    if not 0 <= log_id <= MAX_LOG_ID:
        raise ValueError(f"log id {log_id} outside 0..{MAX_LOG_ID}")
    if not 0 <= pos <= 0xFFFFFFFF:
        raise ValueError(f"position {pos} does not fit 32 bits")
    return (log_id << 32) | pos


def split_location(location: int) -> tuple[int, int]:
    """``(log_id, pos)`` of a location."""
    if not 0 <= location < 2**63:
        raise ValueError(f"location {location} is not a non-negative long")
    return location >> 32, location & 0xFFFFFFFF


def encode_record(body: bytes) -> bytes:
    """``int size`` + body: one record as it appears in the log."""
    return _INT.pack(len(body)) + body


def _encode_batch(items: list[tuple[int, int]]) -> bytes:
    n = len(items)
    head = _MAP_BATCH_HEAD.pack(
        LEDGERS_MAP_HEADER_SIZE - 4 + LEDGERS_MAP_ENTRY_SIZE * n,
        INVALID_LEDGER_ID,
        LEDGERS_MAP_ENTRY_ID,
        n,
    )
    flat = [v for pair in items for v in pair]
    return head + struct.pack(f">{2 * n}q", *flat)


def iter_ledgers_map_batches(items: Mapping[int, int]) -> Iterator[bytes]:
    """The ledgers map as records of at most ``LEDGERS_MAP_MAX_BATCH_SIZE`` ledgers each.

    Ledgers appear in the mapping's iteration order (upstream uses hash order; readers do not
    care). An empty mapping yields nothing.
    """
    batch: list[tuple[int, int]] = []
    for pair in items.items():
        batch.append(pair)
        if len(batch) == LEDGERS_MAP_MAX_BATCH_SIZE:
            yield _encode_batch(batch)
            batch = []
    if batch:
        yield _encode_batch(batch)


def encode_ledgers_map(items: Mapping[int, int]) -> bytes:
    """All batches of the ledgers map, concatenated (empty bytes for an empty map)."""
    if len(items) == 1:
        # A log per ledger: one pair, one struct call (the per-ledger rotation path).
        ((ledger_id, size),) = items.items()
        return _ONE_LEDGER_MAP.pack(
            LEDGERS_MAP_HEADER_SIZE - 4 + LEDGERS_MAP_ENTRY_SIZE,
            INVALID_LEDGER_ID,
            LEDGERS_MAP_ENTRY_ID,
            1,
            ledger_id,
            size,
        )
    return b"".join(iter_ledgers_map_batches(items))


def decode_ledgers_map_batch(record: bytes, *, offset: int) -> list[tuple[int, int]]:
    """The (ledgerId, bytes) pairs of one ledgers-map record, given without its size field.

    ``offset`` is the file offset of the record's size field, for error messages. The record
    must carry the -1/-2 sentinel ids and exactly ``n`` pairs, with no bytes left over, and
    every ledger's byte count must be positive (a map with garbage counts must not be
    trusted; callers then scan the log instead).
    """
    size = len(record)
    if size < _MAP_BATCH_BODY_HEAD.size:
        raise EntryLogFormatError(
            f"ledgers map record of {size} bytes is shorter than its "
            f"{_MAP_BATCH_BODY_HEAD.size}-byte header",
            offset=offset,
        )
    ledger_id, entry_id, n = _MAP_BATCH_BODY_HEAD.unpack_from(record)
    if ledger_id != INVALID_LEDGER_ID:
        raise EntryLogFormatError(
            f"record has ledger id {ledger_id}, a ledgers map record has {INVALID_LEDGER_ID}",
            offset=offset + 4,
        )
    if entry_id != LEDGERS_MAP_ENTRY_ID:
        raise EntryLogFormatError(
            f"record has entry id {entry_id}, a ledgers map record has {LEDGERS_MAP_ENTRY_ID}",
            offset=offset + 12,
        )
    expected = _MAP_BATCH_BODY_HEAD.size + LEDGERS_MAP_ENTRY_SIZE * n
    if n < 0 or expected != size:
        raise EntryLogFormatError(
            f"ledgers map batch claims {n} ledgers ({expected} bytes) but its record has "
            f"{size} bytes",
            offset=offset + 20,
        )
    values = struct.unpack_from(f">{2 * n}q", record, _MAP_BATCH_BODY_HEAD.size)
    pairs = list(zip(values[::2], values[1::2], strict=True))
    for i, (lid, nbytes) in enumerate(pairs):
        if nbytes <= 0:
            raise EntryLogFormatError(
                f"ledger {lid} has {nbytes} bytes in the ledgers map",
                offset=offset + LEDGERS_MAP_HEADER_SIZE + LEDGERS_MAP_ENTRY_SIZE * i + 8,
            )
    return pairs


def decode_ledgers_map(data: bytes, *, base_offset: int = 0) -> dict[int, int]:
    """Decode ledgers-map records from ``data`` (which starts at file offset ``base_offset``).

    Reads records until the end of ``data`` or a size field ``<= 0`` (upstream's reading
    rule); a ledger appearing in several batches has its byte counts added. Checking the
    total against the header's count is the caller's business.
    """
    view = memoryview(data)
    ledgers: dict[int, int] = {}
    pos = 0
    while pos < len(view):
        if pos + 4 > len(view):
            raise EntryLogFormatError(
                "ledgers map ends inside a record size field", offset=base_offset + pos
            )
        (size,) = _INT.unpack_from(view, pos)
        if size <= 0:
            break
        if size > LEDGERS_MAP_MAX_RECORD_SIZE:
            raise EntryLogFormatError(
                f"ledgers map record of {size} bytes exceeds the maximum batch "
                f"({LEDGERS_MAP_MAX_RECORD_SIZE} bytes)",
                offset=base_offset + pos,
            )
        end = pos + 4 + size
        if end > len(view):
            raise EntryLogFormatError(
                f"ledgers map record of {size} bytes is truncated after {len(view) - pos - 4}",
                offset=base_offset + pos,
            )
        for lid, nbytes in decode_ledgers_map_batch(
            bytes(view[pos + 4 : end]), offset=base_offset + pos
        ):
            ledgers[lid] = ledgers.get(lid, 0) + nbytes
        pos = end
    return ledgers
