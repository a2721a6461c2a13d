"""Entry log metadata for GC: upstream's DefaultEntryLogTest scenarios and the #4607 fix.

The garbage collector deletes a log whose metadata says it holds no live ledger, so this is
where a wrong answer loses data. The ledgers map is trusted only when it is exactly right;
anything else (old header, never sealed, count 0, garbage) falls back to a scan.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from bookiesim.entrylog.format import LogHeader
from bookiesim.entrylog.metadata import (
    EntryLogMetadata,
    extract_by_scanning,
    extract_from_ledgers_map,
    extract_metadata,
)
from bookiesim.entrylog.writer import EntryLogWriter

from .entries import make_entry, upstream_entry, write_file

if TYPE_CHECKING:
    from pathlib import Path

FOUR_ENTRIES = [(1, 1), (3, 1), (2, 1), (1, 2)]


def write_log(directory: Path, entries: list[tuple[int, int]], *, seal: bool) -> Path:
    with EntryLogWriter(directory, 0) as w:
        for lid, eid in entries:
            w.append(upstream_entry(lid, eid))
        if seal:
            w.append_ledgers_map()
    return w.path


def patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def assert_four_entries(meta: EntryLogMetadata) -> None:
    # testRecoverFromLedgersMap & co: 26-byte entries count 30 bytes each.
    assert dict(meta.ledgers) == {1: 60, 2: 30, 3: 30}
    assert not meta.contains_ledger(4)
    assert meta.total_size == meta.remaining_size == 120
    meta._check()


def test_recover_from_ledgers_map(tmp_path: Path) -> None:
    path = write_log(tmp_path, FOUR_ENTRIES, seal=True)
    assert_four_entries(extract_from_ledgers_map(path))
    assert_four_entries(extract_metadata(path))
    assert_four_entries(extract_by_scanning(path))


def test_corrupt_entry_log(tmp_path: Path) -> None:
    # testCorruptEntryLog: the last 10 bytes of an unsealed log are gone; the scan keeps the
    # complete entries and drops the torn ledger 2.
    path = write_log(tmp_path, [(1, 1), (3, 1), (2, 1)], seal=False)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 10)
    meta = extract_metadata(path)
    assert dict(meta.ledgers) == {1: 30, 3: 30}
    assert (meta.total_size, meta.remaining_size) == (60, 60)
    assert repr(meta) == (
        "EntryLogMetadata(entry_log_id=0, total_size=60, remaining_size=60, ledgers={1: 30, 3: 30})"
    )


def test_unsealed_log_has_no_map(tmp_path: Path) -> None:
    path = write_log(tmp_path, FOUR_ENTRIES, seal=False)
    with pytest.raises(ValueError, match="offset 8: no ledgers map: offset 0"):
        extract_from_ledgers_map(path)
    assert_four_entries(extract_metadata(path))


def test_ledgers_map_is_empty(tmp_path: Path) -> None:
    # testLedgersMapIsEmpty: header patched to offset 40 / count 0.
    path = write_log(tmp_path, FOUR_ENTRIES, seal=True)
    patch(path, 8, struct.pack(">qi", 40, 0))
    with pytest.raises(ValueError, match="ledgers count 0") as info:
        extract_from_ledgers_map(path)
    assert str(info.value) == (
        f"{path}: offset 16: no ledgers map found in entry log 0 (ledgers count 0), "
        "do scan to double confirm"
    )
    assert_four_entries(extract_metadata(path))


def test_recover_from_ledgers_map_on_v0_entry_log(tmp_path: Path) -> None:
    # testRecoverFromLedgersMapOnV0EntryLog: version and offset zeroed.
    path = write_log(tmp_path, FOUR_ENTRIES, seal=True)
    patch(path, 4, bytes(12))
    with pytest.raises(ValueError, match="offset 4: header version 0 has no ledgers map"):
        extract_from_ledgers_map(path)
    assert_four_entries(extract_metadata(path))


@pytest.mark.parametrize(
    ("offset", "count", "match"),
    [
        # PR #4607: garbage in the header of a log that was never sealed. A garbage offset
        # with a zero count once produced an empty map, and GC deleted a live log.
        (1024 + 7, 0, "ledgers count 0"),
        (2**40, 0, "ledgers count 0"),
        # A garbage count: no map where the offset points, or a map of another size.
        (1024 + 7, 0x12345678, "ledger id|exceeds|truncated|not all ledgers"),
        (1024, 3, "record has ledger id 1"),
        (2**40, 3, "header says 3, found 0"),
        (100, 3, "points into the header"),
        (-5, 3, "points into the header"),
    ],
)
def test_garbage_header_falls_back_to_scan(
    tmp_path: Path, offset: int, count: int, match: str
) -> None:
    path = write_log(tmp_path, FOUR_ENTRIES, seal=False)
    patch(path, 8, struct.pack(">qi", offset, count))
    with pytest.raises(ValueError, match=match):
        extract_from_ledgers_map(path)
    meta = extract_metadata(path)
    assert_four_entries(meta)
    assert not meta.is_empty


def test_map_count_mismatch(tmp_path: Path) -> None:
    path = write_log(tmp_path, FOUR_ENTRIES, seal=True)
    patch(path, 16, struct.pack(">i", 4))
    with pytest.raises(ValueError, match="header says 4, found 3"):
        extract_from_ledgers_map(path)
    assert_four_entries(extract_metadata(path))


def test_map_followed_by_something_else(tmp_path: Path) -> None:
    # Reading stops at EOF or a size <= 0; anything else after the map is an error.
    path = write_log(tmp_path, FOUR_ENTRIES, seal=True)
    with open(path, "ab") as f:
        f.write(struct.pack(">i", 26) + upstream_entry(9, 9))
    with pytest.raises(ValueError, match="record has ledger id 9"):
        extract_from_ledgers_map(path)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 30)
        f.seek(0, 2)
        f.write(bytes(30))
    assert_four_entries(extract_from_ledgers_map(path))


def test_sealed_log_without_entries(tmp_path: Path) -> None:
    # Offset = end, count 0: "do scan to double confirm", and the scan finds nothing.
    path = write_log(tmp_path, [], seal=True)
    assert LogHeader.decode(path.read_bytes()) == LogHeader(ledgers_map_offset=1024)
    with pytest.raises(ValueError, match="ledgers count 0"):
        extract_from_ledgers_map(path)
    meta = extract_metadata(path)
    assert meta.is_empty
    assert (meta.total_size, meta.usage) == (0, 0.0)


def test_more_than_10000_ledgers(tmp_path: Path) -> None:
    with EntryLogWriter(tmp_path, 0) as w:
        for lid in range(25_000):
            w.append(make_entry(lid, 0))
        header = w.append_ledgers_map()
    assert header.ledgers_count == 25_000
    meta = extract_from_ledgers_map(w.path)
    assert meta.ledgers == dict.fromkeys(range(25_000), 20)
    assert meta.total_size == 25_000 * 20
    assert extract_by_scanning(w.path) == meta


def test_missing_file_is_not_scanned(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        extract_metadata(tmp_path / "7.log")


def test_short_file_is_an_error_even_after_fallback(tmp_path: Path) -> None:
    # A 0-byte (preallocated, never flushed) or header-torn log has no entries, but upstream
    # would call it empty and let GC delete it; here it is reported.
    path = tmp_path / "5.log"
    write_file(path, b"")
    with pytest.raises(ValueError, match="offset 0: file ends inside the 1024-byte"):
        extract_metadata(path)


def test_log_id_from_name_or_argument(tmp_path: Path) -> None:
    path = write_log(tmp_path, FOUR_ENTRIES, seal=True)
    renamed = path.rename(tmp_path / "1f.log")
    assert extract_metadata(renamed).entry_log_id == 31
    other = renamed.rename(tmp_path / "log.bin")
    assert extract_metadata(other, 7).entry_log_id == 7
    with pytest.raises(ValueError, match="pass its log id"):
        extract_metadata(other)


def test_usage_and_removal() -> None:
    meta = EntryLogMetadata.from_ledger_sizes(3, {1: 60, 2: 30, 3: 30})
    assert meta.usage == 1.0
    assert meta.remove_ledger(2) == 30
    assert meta.remove_ledger(2) == 0
    assert meta.usage == 0.75
    assert meta.remove_ledgers_if(lambda lid: lid != 3) == 60
    assert dict(meta.ledgers) == {3: 30}
    assert (meta.total_size, meta.remaining_size, meta.is_empty) == (120, 30, False)
    meta.remove_ledger(3)
    assert meta.is_empty
    assert meta.usage == 0.0
    meta._check()
    with pytest.raises(ValueError, match="not positive"):
        meta.add_ledger_size(1, 0)


class MetadataMachine(RuleBasedStateMachine):
    """Random adds and removals keep every invariant of ``EntryLogMetadata``."""

    def __init__(self) -> None:
        super().__init__()
        self.meta = EntryLogMetadata(0)
        self.model: dict[int, int] = {}
        self.total = 0

    @rule(ledger=st.integers(0, 5), size=st.integers(1, 10**6))
    def add(self, ledger: int, size: int) -> None:
        self.meta.add_ledger_size(ledger, size)
        self.model[ledger] = self.model.get(ledger, 0) + size
        self.total += size

    @rule(ledger=st.integers(0, 5))
    def remove(self, ledger: int) -> None:
        assert self.meta.remove_ledger(ledger) == self.model.pop(ledger, 0)

    @invariant()
    def consistent(self) -> None:
        self.meta._check()
        assert dict(self.meta.ledgers) == self.model
        assert self.meta.total_size == self.total
        assert self.meta.is_empty == (not self.model)


test_metadata_invariants = MetadataMachine.TestCase


@given(st.dictionaries(st.integers(0, 2**63 - 1), st.integers(1, 2**40), max_size=20))
def test_from_ledger_sizes(sizes: dict[int, int]) -> None:
    meta = EntryLogMetadata.from_ledger_sizes(9, sizes)
    meta._check()
    assert dict(meta.ledgers) == sizes
    assert meta.total_size == meta.remaining_size == sum(sizes.values())
    assert meta.usage == (1.0 if sizes else 0.0)
