"""Which ledgers an entry log holds, and how many bytes each (upstream ``EntryLogMetadata``).

The garbage collector needs, per log, ledger -> bytes: ``remaining / total`` is the log's
usage, and a log whose ledgers are all deleted can be removed. Two ways to get it, as
upstream's ``getEntryLogMetadata``:

1. from the ledgers map a sealed log carries (cheap: a few records at the end), checked
   strictly — any doubt is an error;
2. by scanning every record (always possible, costs a full read).

:func:`extract_metadata` tries 1 and falls back to 2 on any error but a missing file. Since
upstream PR #4607 a header count of 0 is such an error: a garbage header once made GC see an
"empty" log and delete live data, so an empty map is double-checked by a scan.
"""

from __future__ import annotations

import os
import struct
from types import MappingProxyType
from typing import TYPE_CHECKING

from bookiesim.entrylog.format import (
    HEADER_SIZE,
    HEADER_V1,
    HEADER_VERSION_POSITION,
    LEDGERS_MAP_MAX_RECORD_SIZE,
    LEDGERS_MAP_OFFSET_POSITION,
    EntryLogFormatError,
    decode_ledgers_map_batch,
    parse_log_file_name,
)
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.scanner import scan_entry_log

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "EntryLogMetadata",
    "extract_by_scanning",
    "extract_from_ledgers_map",
    "extract_metadata",
]

_INT = struct.Struct(">i")


class EntryLogMetadata:
    """Ledger -> bytes of one entry log, with total and remaining sizes.

    ``total_size`` is the sum of the byte counts ever added (upstream: the sum of the
    per-ledger ``size + 4`` values, so header, padding and the map itself are not counted);
    ``remaining_size`` drops as ledgers are removed.
    """

    __slots__ = ("_ledgers", "entry_log_id", "remaining_size", "total_size")

    def __init__(self, entry_log_id: int) -> None:
        self.entry_log_id = entry_log_id
        self.total_size = 0
        self.remaining_size = 0
        self._ledgers: dict[int, int] = {}

    @classmethod
    def from_ledger_sizes(cls, entry_log_id: int, sizes: Mapping[int, int]) -> EntryLogMetadata:
        """Metadata for a log whose per-ledger sizes are known (e.g. a writer's)."""
        meta = cls(entry_log_id)
        for ledger_id, size in sizes.items():
            meta.add_ledger_size(ledger_id, size)
        return meta

    @property
    def ledgers(self) -> Mapping[int, int]:
        """Ledger id -> bytes, read-only."""
        return MappingProxyType(self._ledgers)

    def add_ledger_size(self, ledger_id: int, size: int) -> None:
        if size <= 0:
            raise ValueError(f"ledger {ledger_id}: size {size} is not positive")
        self.total_size += size
        self.remaining_size += size
        self._ledgers[ledger_id] = self._ledgers.get(ledger_id, 0) + size

    def contains_ledger(self, ledger_id: int) -> bool:
        return ledger_id in self._ledgers

    def remove_ledger(self, ledger_id: int) -> int:
        """Forget a (deleted) ledger; return its bytes (0 if the log did not hold it)."""
        size = self._ledgers.pop(ledger_id, 0)
        self.remaining_size -= size
        return size

    def remove_ledgers_if(self, predicate: Callable[[int], bool]) -> int:
        """Remove every ledger for which ``predicate(ledger_id)`` holds; return bytes freed."""
        freed = 0
        for ledger_id in [lid for lid in self._ledgers if predicate(lid)]:
            freed += self.remove_ledger(ledger_id)
        return freed

    @property
    def usage(self) -> float:
        """``remaining_size / total_size``; 0.0 for a log that never held anything."""
        return 0.0 if self.total_size == 0 else self.remaining_size / self.total_size

    @property
    def is_empty(self) -> bool:
        """No ledger left: the whole log is garbage."""
        return not self._ledgers

    def _check(self) -> None:
        """Assert every invariant. Cost: O(number of ledgers)."""
        assert all(size > 0 for size in self._ledgers.values()), self._ledgers
        assert self.remaining_size == sum(self._ledgers.values()), self
        assert 0 <= self.remaining_size <= self.total_size, self
        assert 0.0 <= self.usage <= 1.0, self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EntryLogMetadata):
            return NotImplemented
        return (
            self.entry_log_id == other.entry_log_id
            and self.total_size == other.total_size
            and self.remaining_size == other.remaining_size
            and self._ledgers == other._ledgers
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"EntryLogMetadata(entry_log_id={self.entry_log_id}, total_size={self.total_size}, "
            f"remaining_size={self.remaining_size}, ledgers={self._ledgers})"
        )


def _log_id_for(path: str | os.PathLike[str], log_id: int | None) -> int:
    if log_id is not None:
        return log_id
    parsed = parse_log_file_name(os.path.basename(os.fspath(path)))
    if parsed is None:
        raise ValueError(f"{os.fspath(path)} is not named <hex id>.log; pass its log id")
    return parsed


def extract_from_ledgers_map(
    path: str | os.PathLike[str], log_id: int | None = None, *, trust_header: bool = False
) -> EntryLogMetadata:
    """Read the ledgers map of a sealed log (upstream ``extractEntryLogMetadataFromIndex``).

    Raises :class:`EntryLogFormatError` (naming file and offset) when the header has version
    < 1, a map offset of 0 (never sealed) or one inside the header, a ledgers count of 0; when
    a map record is not a well-formed -1/-2 batch; or when the number of ledgers found is not
    the header's count. Records are read one at a time from the map offset until the end of
    the file or a size ``<= 0``, so a garbage offset cannot make this read a whole log into
    memory. ``FileNotFoundError`` if there is no such file.

    ``trust_header=True`` re-creates the GC side of the data loss fixed by upstream PR #4607,
    for fault campaigns only: whatever the header says is believed — a count of 0 is
    accepted, the map is read from any offset but 0, a record that is not a map batch (or
    an offset at or past the end) ends the map instead of failing, and the ledgers found are
    not compared with the count. A never-sealed log whose header holds garbage then reads
    as holding no ledger at all.
    """
    entry_log_id = _log_id_for(path, log_id)
    with EntryLogReader(path, entry_log_id) as reader:
        where = str(reader.path)
        header = reader.read_header()
        if header.version < HEADER_V1:
            raise EntryLogFormatError(
                f"header version {header.version} has no ledgers map",
                offset=HEADER_VERSION_POSITION,
                path=where,
            )
        if header.ledgers_map_offset == 0:
            raise EntryLogFormatError(
                "no ledgers map: offset 0, the log was not sealed",
                offset=LEDGERS_MAP_OFFSET_POSITION,
                path=where,
            )
        if header.ledgers_count == 0 and not trust_header:
            raise EntryLogFormatError(
                f"no ledgers map found in entry log {entry_log_id} (ledgers count 0), "
                "do scan to double confirm",
                offset=LEDGERS_MAP_OFFSET_POSITION + 8,
                path=where,
            )
        offset = header.ledgers_map_offset
        if offset < (0 if trust_header else HEADER_SIZE):
            raise EntryLogFormatError(
                f"ledgers map offset {offset} points into the header",
                offset=LEDGERS_MAP_OFFSET_POSITION,
                path=where,
            )
        meta = EntryLogMetadata(entry_log_id)
        size = reader.size()
        try:
            while offset < size:
                head = reader.read_at(offset, 4)
                if len(head) < 4:
                    raise EntryLogFormatError(
                        "file ends inside a ledgers map record size field", offset=offset
                    )
                (rec_size,) = _INT.unpack(head)
                if rec_size <= 0:
                    break
                if rec_size > LEDGERS_MAP_MAX_RECORD_SIZE:
                    raise EntryLogFormatError(
                        f"ledgers map record of {rec_size} bytes exceeds the maximum batch "
                        f"({LEDGERS_MAP_MAX_RECORD_SIZE} bytes)",
                        offset=offset,
                    )
                record = reader.read_at(offset + 4, rec_size)
                if len(record) < rec_size:
                    raise EntryLogFormatError(
                        f"ledgers map record of {rec_size} bytes is truncated after {len(record)}",
                        offset=offset,
                    )
                for ledger_id, nbytes in decode_ledgers_map_batch(record, offset=offset):
                    meta.add_ledger_size(ledger_id, nbytes)
                offset += 4 + rec_size
        except EntryLogFormatError as e:
            if not trust_header:
                raise e.with_path(where) from None
            # Believed: the map simply ends where the records stop looking like one.
        found = len(meta.ledgers)
        if found != header.ledgers_count and not trust_header:
            raise EntryLogFormatError(
                f"not all ledgers were found in the ledgers map: header says "
                f"{header.ledgers_count}, found {found}",
                offset=LEDGERS_MAP_OFFSET_POSITION + 8,
                path=where,
            )
        return meta


def extract_by_scanning(
    path: str | os.PathLike[str], log_id: int | None = None
) -> EntryLogMetadata:
    """Scan every record (upstream ``extractEntryLogMetadataByScanning``).

    Counts ``size + 4`` per entry of every ledger id ``>= 0``; a torn tail is ignored.
    Raises :class:`EntryLogFormatError` for a file shorter than its header or with a wrong
    magic.
    """
    meta = EntryLogMetadata(_log_id_for(path, log_id))
    with EntryLogReader(path, meta.entry_log_id) as reader:
        for rec in scan_entry_log(reader, accept=_non_negative, read_bodies=False):
            meta.add_ledger_size(rec.ledger_id, rec.size + 4)
    return meta


def _non_negative(ledger_id: int) -> bool:
    return ledger_id >= 0


def extract_metadata(
    path: str | os.PathLike[str], log_id: int | None = None, *, trust_header: bool = False
) -> EntryLogMetadata:
    """The ledgers map if it can be trusted, else a scan (upstream ``getEntryLogMetadata``).

    A missing file raises ``FileNotFoundError``; errors of the scan itself (a log shorter
    than its header, a wrong magic) propagate as :class:`EntryLogFormatError`.
    ``trust_header``: see :func:`extract_from_ledgers_map` (a bug switch, never for real use).
    """
    try:
        return extract_from_ledgers_map(path, log_id, trust_header=trust_header)
    except FileNotFoundError:
        raise
    except (EntryLogFormatError, OSError):
        return extract_by_scanning(path, log_id)
