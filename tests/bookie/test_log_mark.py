"""``LogMark`` and the ``lastMark`` checkpoint file.

Why: the mark decides where replay starts and which journals may be deleted. It must be
upstream's 16 bytes, the max over ledger dirs on read, and it must never move backwards on
disk (upstream #4105: an older mark pointing at a deleted journal stops the bookie).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.bookie.journal import (
    LastMarkFormatError,
    LogMark,
    last_mark_name,
    read_last_mark,
    write_last_mark,
)


def ledger_dirs(root: Path, n: int) -> list[Path]:
    dirs = [root / f"ledgers{i}" for i in range(n)]
    for d in dirs:
        (d / "current").mkdir(parents=True)
    return dirs


def mark_file(d: Path, index: int | None = None) -> Path:
    return d / "current" / last_mark_name(index)


def test_encoding_is_two_big_endian_longs() -> None:
    mark = LogMark(0x18F2A3B4C5D, 0x2200)
    assert mark.encode() == bytes.fromhex("0000018f2a3b4c5d0000000000002200")
    assert LogMark.decode(mark.encode()) == mark
    with pytest.raises(ValueError, match="16 bytes"):
        LogMark.decode(b"\x00" * 15)


def test_order_is_file_then_offset() -> None:
    assert LogMark(1, 900) < LogMark(2, 0) < LogMark(2, 1)
    assert max(LogMark(3, 5), LogMark(3, 7), LogMark(1, 99)) == LogMark(3, 7)


def test_missing_files_read_as_zero(tmp_path: Path) -> None:
    assert read_last_mark(ledger_dirs(tmp_path, 2)) == LogMark(0, 0)
    assert read_last_mark([tmp_path / "nowhere"]) == LogMark(0, 0)
    assert read_last_mark([]) == LogMark(0, 0)


def test_written_to_every_dir_and_read_as_max(tmp_path: Path) -> None:
    dirs = ledger_dirs(tmp_path, 3)
    written = write_last_mark(dirs, LogMark(10, 512))
    assert written == [str(mark_file(d)) for d in dirs]
    for d in dirs:
        assert mark_file(d).read_bytes() == LogMark(10, 512).encode()
        assert os.listdir(d / "current") == ["lastMark"]  # no temporary file left
    # Dirs can disagree (one was full, or added later): the newest wins on read.
    mark_file(dirs[1]).write_bytes(LogMark(11, 0).encode())
    mark_file(dirs[2]).unlink()
    assert read_last_mark(dirs) == LogMark(11, 0)


def test_never_moves_backwards(tmp_path: Path) -> None:
    dirs = ledger_dirs(tmp_path, 2)
    write_last_mark(dirs, LogMark(5, 4096))
    assert write_last_mark(dirs, LogMark(5, 1024)) == []  # an older, late checkpoint
    assert write_last_mark(dirs, LogMark(5, 4096)) == []  # equal: nothing to do
    assert read_last_mark(dirs) == LogMark(5, 4096)
    # Only the dir that is behind gets the newer mark; the other keeps its newer one.
    mark_file(dirs[0]).write_bytes(LogMark(9, 0).encode())
    assert write_last_mark(dirs, LogMark(6, 0)) == [str(mark_file(dirs[1]))]
    assert [LogMark.decode(mark_file(d).read_bytes()) for d in dirs] == [
        LogMark(9, 0),
        LogMark(6, 0),
    ]


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10_000)), max_size=20))
def test_read_after_writes_is_the_max_written(marks: list[tuple[int, int]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        dirs = ledger_dirs(Path(root), 2)
        for f, o in marks:
            write_last_mark(dirs, LogMark(f, o))
        want = max([LogMark(f, o) for f, o in marks], default=LogMark(0, 0))
        assert read_last_mark(dirs) == want


def test_malformed_file_is_an_error_naming_it(tmp_path: Path) -> None:
    dirs = ledger_dirs(tmp_path, 2)
    write_last_mark(dirs, LogMark(3, 3))
    bad = mark_file(dirs[1])
    bad.write_bytes(b"\x00" * 17)
    with pytest.raises(LastMarkFormatError, match="found 17") as info:
        read_last_mark(dirs)
    assert info.value.path == str(bad)
    assert str(bad) in str(info.value)
    bad.write_bytes(b"")
    with pytest.raises(LastMarkFormatError, match="found 0"):
        read_last_mark(dirs)
    # A checkpoint repairs it with a true mark.
    write_last_mark(dirs, LogMark(4, 0))
    assert read_last_mark(dirs) == LogMark(4, 0)


def test_one_file_per_journal_dir(tmp_path: Path) -> None:
    dirs = ledger_dirs(tmp_path, 1)
    write_last_mark(dirs, LogMark(7, 1), journal_index=0)
    write_last_mark(dirs, LogMark(8, 1), journal_index=1)
    assert sorted(os.listdir(dirs[0] / "current")) == ["lastMark.0", "lastMark.1"]
    assert read_last_mark(dirs, journal_index=0) == LogMark(7, 1)
    assert read_last_mark(dirs, journal_index=1) == LogMark(8, 1)
    assert read_last_mark(dirs) == LogMark(0, 0)


def test_creates_current_dir(tmp_path: Path) -> None:
    write_last_mark([tmp_path / "fresh"], LogMark(1, 2))
    assert read_last_mark([tmp_path / "fresh"]) == LogMark(1, 2)
