"""Entry log ids: ``lastId``, recovery after restarts, gaps and wrap-around (reference §2.7).

A reused id overwrites (or is refused for) a live log, so ids must keep increasing across
restarts whatever state ``lastId`` is in, and must wrap from 2^31-1 to 0 without colliding.
Scenarios are upstream's CreateNewLogTest and DefaultEntryLogTest.testMissingLogId.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.entrylog.allocator import (
    EntryLogIdAllocator,
    find_largest_gap,
    last_log_id_in_dir,
    list_log_ids,
    read_last_id,
    recover_last_log_id,
)
from bookiesim.entrylog.format import MAX_LOG_ID, log_file_name
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.writer import EntryLogWriter

from .entries import scratch_dir, upstream_entry

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def ledger_dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / f"ledgers{i}" for i in range(3)]


def touch(current_dir: Path, log_id: int) -> None:
    current_dir.mkdir(parents=True, exist_ok=True)
    (current_dir / log_file_name(log_id)).touch()


def test_empty_bookie_starts_at_zero(ledger_dirs: list[Path]) -> None:
    alloc = EntryLogIdAllocator(ledger_dirs)
    assert alloc.current_dirs == tuple(d / "current" for d in ledger_dirs)
    assert all(d.is_dir() for d in alloc.current_dirs)
    assert (alloc.recovered_last_id, alloc.last_allocated_id) == (-1, -1)
    assert [alloc.next_id() for _ in range(3)] == [0, 1, 2]
    assert alloc.last_allocated_id == 2


def test_last_id_written_in_every_dir(ledger_dirs: list[Path]) -> None:
    alloc = EntryLogIdAllocator(ledger_dirs)
    for _ in range(32):
        log_id = alloc.next_id()
        for d in alloc.current_dirs:
            assert (d / "lastId").read_bytes() == f"{log_id:x}\n".encode()
    assert (alloc.current_dirs[0] / "lastId").read_bytes() == b"1f\n"
    assert sorted(p.name for p in alloc.current_dirs[0].iterdir()) == ["lastId"]


def test_create_new_log_with_stray_log(ledger_dirs: list[Path]) -> None:
    # CreateNewLogTest.testCreateNewLog: 1.log exists in one dir before start; the new log
    # must get an id > 1, whichever dir it goes to.
    touch(ledger_dirs[1] / "current", 1)
    alloc = EntryLogIdAllocator(ledger_dirs)
    assert alloc.recovered_last_id == 1
    log_id = alloc.next_id()
    assert log_id > 1
    for d in alloc.current_dirs:
        EntryLogWriter(d, alloc.next_id()).close()  # no collision in any dir


def test_create_new_log_with_gaps(ledger_dirs: list[Path]) -> None:
    # CreateNewLogTest.testCreateNewLogWithGaps: 1.log and 3.log appear behind the
    # allocator's back; they are skipped: 0, 2, 4.
    alloc = EntryLogIdAllocator(ledger_dirs)
    assert alloc.next_id() == 0
    touch(alloc.current_dirs[2], 1)
    assert alloc.next_id() == 2
    touch(alloc.current_dirs[0], 3)
    assert alloc.next_id() == 4


def test_last_id_compatible_stale_last_id(ledger_dirs: list[Path]) -> None:
    # CreateNewLogTest.testLastIdCompatibleBetweenDefaultAndDirectEntryLogger: after logs
    # 0..9, lastId says 3 in half, then all, of the dirs; the directory listing wins.
    alloc = EntryLogIdAllocator(ledger_dirs)
    for i in range(10):
        log_id = alloc.next_id()
        EntryLogWriter(alloc.current_dirs[i % 3], log_id).close()
    assert alloc.last_allocated_id == 9
    (alloc.current_dirs[0] / "lastId").write_text("3\n")
    assert EntryLogIdAllocator(ledger_dirs).recovered_last_id == 9
    for d in alloc.current_dirs:
        (d / "lastId").write_text("3\n")
    restarted = EntryLogIdAllocator(ledger_dirs)
    assert restarted.recovered_last_id == 9
    assert restarted.next_id() == 10


def test_missing_log_id(tmp_path: Path) -> None:
    # DefaultEntryLogTest.testMissingLogId: three runs write a log each, lastId is deleted,
    # three more runs; no id collides and every entry reads back by location. Each run also
    # "preallocates" its next log, as upstream does by default.
    dirs = [tmp_path / "ledgers"]
    positions: dict[int, list[int]] = {}
    run = 0
    for phase in range(2):
        for _ in range(3):
            alloc = EntryLogIdAllocator(dirs)
            current = alloc.current_dirs[0]
            with EntryLogWriter(current, alloc.next_id()) as w:
                positions[run] = [w.append(upstream_entry(run, e)) for e in range(10)]
            EntryLogWriter(current, alloc.next_id()).close()  # preallocated, never used
            run += 1
        if phase == 0:
            (current / "lastId").unlink()
    ids = [loc >> 32 for locs in positions.values() for loc in locs]
    assert len(set(ids)) == 6
    assert list_log_ids(alloc.current_dirs) == set(range(12))
    for ledger, locations in positions.items():
        for entry, location in enumerate(locations):
            with EntryLogReader.open_log(alloc.current_dirs, location >> 32) as r:
                assert r.read_entry(ledger, entry, location) == upstream_entry(ledger, entry)


def test_wrap_around(tmp_path: Path) -> None:
    current = tmp_path / "d" / "current"
    current.mkdir(parents=True)
    (current / "lastId").write_text(f"{MAX_LOG_ID - 1:x}\n")
    touch(current, 0)
    alloc = EntryLogIdAllocator([tmp_path / "d"])
    assert alloc.recovered_last_id == MAX_LOG_ID - 1
    assert alloc.next_id() == MAX_LOG_ID
    assert (current / "lastId").read_text() == "7fffffff\n"
    assert alloc.next_id() == 1  # 0 wraps around but 0.log exists
    assert alloc.next_id() == 2


def test_restart_after_wrap_around(tmp_path: Path) -> None:
    # Logs 7ffffffd..7fffffff and 0..2 exist; the newest is 2 whether or not lastId says so.
    current = tmp_path / "d" / "current"
    for log_id in [MAX_LOG_ID - 2, MAX_LOG_ID - 1, MAX_LOG_ID, 0, 1, 2]:
        touch(current, log_id)
    assert last_log_id_in_dir(current) == 2
    (current / "lastId").write_text("2\n")
    assert EntryLogIdAllocator([tmp_path / "d"]).next_id() == 3
    (current / "lastId").unlink()
    # Without lastId the largest *.log (7fffffff) wins, and skipping existing ids gets to 3.
    alloc = EntryLogIdAllocator([tmp_path / "d"])
    assert alloc.recovered_last_id == MAX_LOG_ID
    assert alloc.next_id() == 3


@pytest.mark.parametrize(
    ("content", "value"),
    [
        (b"1f\n", 31),
        (b"1F\n", 31),
        (b"1f", 31),
        (b"1f\r\n", 31),
        (b"0\n", 0),
        (b"-5\n", -5),
        (b"", -1),
        (b" 1f\n", -1),
        (b"0x1f\n", -1),
        (b"zz\n", -1),
        (b"\xff\xfe\n", -1),
        (b"8000000000000000\n", -1),  # beyond a Java long
    ],
)
def test_read_last_id(tmp_path: Path, content: bytes, value: int) -> None:
    (tmp_path / "lastId").write_bytes(content)
    assert read_last_id(tmp_path) == value


def test_unusable_last_id_falls_back_to_largest_log(tmp_path: Path) -> None:
    current = tmp_path / "d" / "current"
    for log_id in (4, 9, 6):
        touch(current, log_id)
    for content in ("0\n", "-3\n", "garbage"):
        (current / "lastId").write_text(content)
        assert EntryLogIdAllocator([tmp_path / "d"]).recovered_last_id == 9


def test_compacted_logs_count_and_other_files_do_not(tmp_path: Path) -> None:
    current = tmp_path / "d" / "current"
    touch(current, 3)
    (current / "1f.log.3.compacted").touch()  # the compacted log's new id is 0x1f
    (current / "40.log.compacting").touch()
    (current / "notes.log").touch()
    (current / "lastMark").touch()
    assert last_log_id_in_dir(current) == 31
    assert recover_last_log_id([current]) == 31
    assert list_log_ids([current]) == {3}


@pytest.mark.parametrize(
    ("ids", "gap"),
    [
        ([], (0, MAX_LOG_ID)),
        ([0], (1, MAX_LOG_ID)),
        ([5], (6, MAX_LOG_ID)),
        ([0, 1, 2, 9], (10, MAX_LOG_ID)),
        ([MAX_LOG_ID - 10], (0, MAX_LOG_ID - 10)),
        ([0, 1, MAX_LOG_ID - 1, MAX_LOG_ID], (2, MAX_LOG_ID - 1)),
        ([MAX_LOG_ID], (0, MAX_LOG_ID)),
    ],
)
def test_find_largest_gap(ids: list[int], gap: tuple[int, int]) -> None:
    assert find_largest_gap(ids) == gap


@given(
    start=st.integers(0, MAX_LOG_ID),
    count=st.integers(1, 40),
    last_id=st.sampled_from(["exact", "missing", "stale"]),
    dirs=st.integers(1, 3),
)
def test_next_id_follows_the_newest_log(start: int, count: int, last_id: str, dirs: int) -> None:
    # A run of consecutive ids, possibly wrapped past 2^31-1, spread over the ledger dirs:
    # with lastId exact or missing the next id is newest + 1 (mod 2^31); with a stale
    # lastId, at least no existing id is reused.
    ids = [(start + i) % (MAX_LOG_ID + 1) for i in range(count)]
    newest = ids[-1]
    with scratch_dir() as root:
        ledger_dirs = [root / f"l{i}" for i in range(dirs)]
        for i, log_id in enumerate(ids):
            touch(ledger_dirs[i % dirs] / "current", log_id)
        for d in ledger_dirs:
            (d / "current").mkdir(parents=True, exist_ok=True)
            if last_id == "exact":
                (d / "current" / "lastId").write_text(f"{newest:x}\n")
            elif last_id == "stale":
                (d / "current" / "lastId").write_text(f"{ids[0]:x}\n")
        alloc = EntryLogIdAllocator(ledger_dirs)
        next_id = alloc.next_id()
    assert next_id not in ids
    if last_id != "stale":
        assert next_id == (newest + 1) % (MAX_LOG_ID + 1)
