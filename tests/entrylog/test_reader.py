"""Reading by location (reference §2.3): the checks and the errors a bookie reports.

``read_entry`` must refuse what upstream refuses (a size below 16, other ids at the location,
a log that ends too early) with errors that say what was found and where, and
``read_entry_by_location`` must return the bytes without the id check.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import pytest

from bookiesim.entrylog.format import EntryLogFormatError, LogHeader
from bookiesim.entrylog.reader import (
    EntryLogReader,
    InvalidEntryLengthError,
    ShortReadError,
    WrongEntryError,
    find_log_file,
    read_entry,
    read_entry_by_location,
)
from bookiesim.entrylog.writer import EntryLogWriter

from .entries import seeded_entry, upstream_entry, write_file

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def log_with_entries(tmp_path: Path) -> tuple[Path, list[int]]:
    with EntryLogWriter(tmp_path, 3) as w:
        locations = [w.append(upstream_entry(1, e)) for e in range(5)]
        locations.append(w.append(seeded_entry(2, 0, 10_000, seed=4)))
    return w.path, locations


def test_reads_entries_checked_and_unchecked(log_with_entries: tuple[Path, list[int]]) -> None:
    path, locations = log_with_entries
    with EntryLogReader(path) as r:
        assert r.log_id == 3
        for e in range(5):
            assert r.read_entry(1, e, locations[e]) == upstream_entry(1, e)
            assert r.read_entry_by_location(locations[e]) == upstream_entry(1, e)
        # A body larger than the first read takes a second read.
        assert read_entry(r, 2, 0, locations[5]) == seeded_entry(2, 0, 10_000, seed=4)


def test_wrong_entry_names_both(log_with_entries: tuple[Path, list[int]]) -> None:
    path, locations = log_with_entries
    with EntryLogReader(path) as r, pytest.raises(WrongEntryError) as info:
        r.read_entry(1, 3, locations[2])
    err = info.value
    assert (err.found, err.expected) == ((1, 2), (1, 3))
    assert err.offset == locations[2] & 0xFFFFFFFF
    assert err.path == str(path)
    assert "found entry 2 of ledger 1, expected entry 3 of ledger 1" in str(err)
    assert str(err).startswith(f"{path}: offset {err.offset}: ")
    with (
        EntryLogReader(path) as r,
        pytest.raises(WrongEntryError, match="expected entry 0 of ledger 9"),
    ):
        r.read_entry(9, 0, locations[0])


def test_location_in_the_middle_of_an_entry(log_with_entries: tuple[Path, list[int]]) -> None:
    # Upstream's "invalid entry length": whatever sits before pos reads as a size < 16.
    path, locations = log_with_entries
    with EntryLogReader(path) as r, pytest.raises(InvalidEntryLengthError, match="length 0"):
        r.read_entry_by_location(locations[0] + 4)


def test_invalid_length_record(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    write_file(path, LogHeader().encode() + struct.pack(">iqq", 8, 1, 0) + bytes(8))
    with EntryLogReader(path) as r, pytest.raises(InvalidEntryLengthError, match="length 8") as i:
        r.read_entry(1, 0, 1028)
    assert i.value.offset == 1028


def test_short_reads(log_with_entries: tuple[Path, list[int]]) -> None:
    path, locations = log_with_entries
    size = path.stat().st_size
    with EntryLogReader(path) as r:
        with pytest.raises(ShortReadError, match="ends"):
            r.read_entry_by_location((3 << 32) | size)
        with pytest.raises(ShortReadError, match="ends"):
            r.read_entry_by_location((3 << 32) | (size + 100))
    # Tear the last entry: its location now points at a record the log cannot hold.
    with open(path, "r+b") as f:
        f.truncate(size - 1)
    with EntryLogReader(path) as r, pytest.raises(ShortReadError, match="9999 of its 10000"):
        r.read_entry(2, 0, locations[5])


def test_location_of_another_log_or_into_the_header(tmp_path: Path) -> None:
    with EntryLogWriter(tmp_path, 3) as w:
        location = w.append(upstream_entry(1, 1))
        with pytest.raises(ValueError, match="in log 4, not in log 3"):
            read_entry(w, 1, 1, location + (1 << 32))
        with pytest.raises(ValueError, match="into the entry log header"):
            read_entry_by_location(w, 3 << 32)
        with pytest.raises(ValueError, match="into the entry log header"):
            read_entry_by_location(w, (3 << 32) | 1027)


def test_errors_are_format_errors(log_with_entries: tuple[Path, list[int]]) -> None:
    path, locations = log_with_entries
    with EntryLogReader(path) as r, pytest.raises(EntryLogFormatError):
        r.read_entry(5, 5, locations[0])


def test_reader_naming_and_lifecycle(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    with EntryLogWriter(dirs[1], 0x1F) as w:
        location = w.append(upstream_entry(1, 1))
    assert find_log_file(dirs, 0x1F) == dirs[1] / "1f.log"
    with pytest.raises(FileNotFoundError, match="no file for entry log 20"):
        find_log_file(dirs, 0x20)
    r = EntryLogReader.open_log(dirs, 0x1F)
    assert (r.log_id, r.path, r.size()) == (31, dirs[1] / "1f.log", 1054)
    assert r.read_header() == LogHeader()
    assert r.read_entry(1, 1, location) == upstream_entry(1, 1)
    assert r.fileno() >= 0
    r.close()
    r.close()
    assert r.closed
    with pytest.raises(ValueError, match="closed"):
        r.read_at(0, 4)
    # A file not named <hex>.log needs its id.
    other = tmp_path / "copy.bin"
    other.write_bytes((dirs[1] / "1f.log").read_bytes())
    with pytest.raises(ValueError, match="pass its log id"):
        EntryLogReader(other)
    with EntryLogReader(other, 31) as r2:
        assert r2.read_entry(1, 1, location) == upstream_entry(1, 1)


def test_bad_header_names_file(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    write_file(path, b"JUNK" + bytes(2000))
    with EntryLogReader(path) as r, pytest.raises(EntryLogFormatError) as info:
        r.read_header()
    assert (
        str(info.value) == f"{path}: offset 0: bad magic b'JUNK', an entry log starts with b'BKLO'"
    )
