"""Entry log managers: which log a ledger writes to, and when logs rotate (reference §3).

Upstream tests these in ``CreateNewLogTest`` and ``DefaultEntryLogTest`` through the
manager API; each test below names the scenario it re-enacts. The managers are driven
through :class:`EntryLogger`, which owns their files; ``create_new_log`` is upstream's
``createNewLog``. Time is a :class:`FakeClock`, so expiry is exact and instant.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bookiesim.entrylog.format import HEADER_SIZE, MAX_LOG_ID
from bookiesim.entrylog.logger import EntryLogger, RotationEvent, RotationReason
from bookiesim.entrylog.managers import (
    EntryLogManagerForEntryLogPerLedger,
    EntryLogManagerForSingleEntryLog,
)

from .entries import MAX_LONG, make_entry, scratch_dir, seeded_entry, upstream_entry

if TYPE_CHECKING:
    from pathlib import Path


class FakeClock:
    """A settable clock (seconds)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def dirs_of(tmp_path: Path, n: int = 3) -> list[Path]:
    return [tmp_path / f"ledgers{i}" for i in range(n)]


def dir_histogram(logger: EntryLogger) -> Counter[Path]:
    """Active logs per ledger dir."""
    return Counter(logger.log_path(log_id).parent for log_id in logger.active_logs().values())


# ------------------------------------------------------------------------- CreateNewLogTest


def test_entry_log_per_ledger_creation_with_preallocation(tmp_path: Path) -> None:
    # CreateNewLogTest.testEntryLogPerLedgerCreationWithPreAllocation.
    dirs = dirs_of(tmp_path)
    logger = EntryLogger(dirs, per_ledger=True, preallocation=True)
    assert logger.log_ids() == []  # nothing is created (or preallocated) before the first log
    for ledger in range(6):
        assert logger.create_new_log(ledger) == ledger  # new bookie: log id == ledger id
    assert logger.preallocated_log_id == 6
    assert (logger.active_log_count, logger.rotated_log_count) == (6, 0)
    # A stray 7.log appears; ledger 1 rolls onto the preallocated 6, the allocator skips 7.
    (logger.current_dirs[1] / "7.log").touch()
    assert logger.create_new_log(1) == 6
    assert logger.preallocated_log_id == 8
    assert logger.active_log_count == 6
    assert logger.rotated_log_ids() == [1]
    logger.checkpoint()
    # Log 1 is flushed but log 0 is still active: the pointer stays at 0.
    assert logger.rotated_log_ids() == []
    assert logger.least_unflushed_log_id == 0
    assert logger.create_new_log(0) == 8
    assert logger.rotated_log_ids() == [0]
    assert logger.least_unflushed_log_id == 0
    logger.checkpoint()
    assert logger.least_unflushed_log_id == 2  # 0 and 1 are flushed; 2 is active
    assert logger.preallocated_log_id == 9
    # Every log created so far has empty metadata. (Upstream also asks for the stray 7.log,
    # a 0-byte file its scan reads as empty; our scanner reports its missing header.)
    for log_id in [*range(7), 8, 9]:
        meta = logger.entry_log_metadata(log_id)
        assert meta.is_empty
        assert meta.total_size == 0
    logger._check()
    logger.close()


def test_create_new_log_never_overwrites(tmp_path: Path) -> None:
    # CreateNewLogTest.testCreateNewLog: a stray 1.log exists before start.
    dirs = dirs_of(tmp_path)
    (dirs[2] / "current").mkdir(parents=True)
    (dirs[2] / "current" / "1.log").write_bytes(b"not ours")
    logger = EntryLogger(dirs, per_ledger=False)
    assert logger.create_new_log(0) > 1
    assert (dirs[2] / "current" / "1.log").read_bytes() == b"not ours"
    logger.close()


def test_create_new_log_with_gaps(tmp_path: Path) -> None:
    # CreateNewLogTest.testCreateNewLogWithGaps: stray 1.log and 3.log appear between
    # creations; the ids handed out are 0, 2, 4.
    logger = EntryLogger(dirs_of(tmp_path), per_ledger=False, preallocation=False)
    assert logger.create_new_log(0) == 0
    (logger.current_dirs[0] / "1.log").touch()
    assert logger.create_new_log(0) == 2
    (logger.current_dirs[2] / "3.log").touch()
    assert logger.create_new_log(0) == 4
    assert logger.rotated_log_ids() == [0, 2]
    logger.close()


@pytest.mark.parametrize("preallocation", [False, True])
def test_ledger_dirs_uniformity_during_creation(tmp_path: Path, preallocation: bool) -> None:
    # CreateNewLogTest.testLedgerDirsUniformityDuringCreation (upstream: preallocation off;
    # ours keeps the spread with it on too, by moving the preallocated log when needed).
    n = 5
    logger = EntryLogger(dirs_of(tmp_path, n), per_ledger=True, preallocation=preallocation)
    for ledger in range(n):
        logger.create_new_log(ledger)
    assert max(dir_histogram(logger).values()) == 1
    logger.create_new_log(n)
    assert max(dir_histogram(logger).values()) == 2
    for ledger in range(n + 1, 2 * n):
        logger.create_new_log(ledger)
    assert set(dir_histogram(logger).values()) == {2}
    # Write-closes empty some dirs; new logs go there first.
    for ledger in (0, 1, 2):
        logger.rotate_ledger(ledger, RotationReason.WRITE_CLOSE)
    for ledger in range(100, 103):
        logger.create_new_log(ledger)
        logger._check()
    assert set(dir_histogram(logger).values()) == {2}
    for ledger in range(200, 237):
        logger.create_new_log(ledger)
        assert max(dir_histogram(logger).values()) == math.ceil(logger.active_log_count / n)
    logger.close()


def test_concurrent_entry_log_creations(tmp_path: Path) -> None:
    # CreateNewLogTest.testConcurrentEntryLogCreations: 10 ledgers x 10 createNewLog each
    # (upstream from 100 threads; we are single-threaded by design, so in sequence).
    logger = EntryLogger(dirs_of(tmp_path), per_ledger=True, preallocation=True)
    for ledger in range(10):
        for _ in range(10):
            logger.create_new_log(ledger)
    assert logger.active_log_count == 10
    assert logger.rotated_log_count == 90
    assert logger.preallocated_log_id == 100  # previous allocated id: 100 with preallocation
    logger._check()
    logger.close()


@pytest.mark.parametrize(("preallocation", "last_id"), [(False, 9), (True, 10)])
def test_concurrent_create_new_log_single(
    tmp_path: Path, preallocation: bool, last_id: int
) -> None:
    # CreateNewLogTest.testConcurrentCreateNewLogWithEntryLogFilePreAllocation{En,Dis}abled.
    logger = EntryLogger(dirs_of(tmp_path), per_ledger=False, preallocation=preallocation)
    assert logger.least_unflushed_log_id == 0
    for ledger in range(10):
        logger.create_new_log(ledger)
    assert logger._files.allocator.last_allocated_id == last_id
    assert logger.rotated_log_count == 9
    logger.close()


# -------------------------------------------------------------------- DefaultEntryLogTest


def test_entry_log_manager_expiry_removal(tmp_path: Path) -> None:
    # DefaultEntryLogTest.testEntryLogManagerExpiryRemoval: expiry 1 s.
    clock = FakeClock()
    logger = EntryLogger(dirs_of(tmp_path), expiry_seconds=1, clock=clock)
    logger.add_entry(7, upstream_entry(7, 0))
    first = logger.current_log_id(7)
    assert logger.next_expiry_deadline() == clock.now + 1
    clock.advance(1.1)
    events = logger.expire_idle()
    assert events == [RotationEvent(first or 0, 7, RotationReason.EXPIRY)]
    assert logger.current_log_id(7) is None
    assert (logger.active_log_count, logger.rotated_log_count) == (0, 1)
    assert logger.rotated_log_ids() == [first]
    assert logger.next_expiry_deadline() is None
    logger._check()
    logger.close()


def test_expiry_is_exact_at_the_deadline(tmp_path: Path) -> None:
    # "Idle >= expiry" rotates; a hair less does not.
    clock = FakeClock(0.0)
    logger = EntryLogger(dirs_of(tmp_path), expiry_seconds=300, clock=clock)
    logger.add_entry(1, upstream_entry(1, 0))
    clock.advance(100)
    logger.add_entry(2, upstream_entry(2, 0))
    assert logger.next_expiry_deadline() == 300
    clock.now = 299.5
    assert logger.expire_idle() == []
    clock.now = 300
    assert [e.ledger_id for e in logger.expire_idle()] == [1]
    assert logger.next_expiry_deadline() == 400
    clock.now = 1000
    assert [e.ledger_id for e in logger.expire_idle()] == [2]
    logger.close()


def test_timer_woken_at_the_deadline_always_finds_the_log_expired(tmp_path: Path) -> None:
    # Floating point: last_write + expiry may exceed now - last_write >= expiry by an ulp; a
    # timer that sleeps until next_expiry_deadline() must not wake to find nothing expired
    # (it would spin).
    clock = FakeClock(1e9 + 0.1)
    logger = EntryLogger(dirs_of(tmp_path), expiry_seconds=0.3, clock=clock)
    logger.add_entry(1, upstream_entry(1, 0))
    deadline = logger.next_expiry_deadline()
    assert deadline is not None
    assert deadline - clock.now < 0.3  # the case that would spin
    clock.now = deadline
    assert [e.ledger_id for e in logger.expire_idle()] == [1]
    logger.close()


def test_cache_maximum_size_eviction_policy(tmp_path: Path) -> None:
    # DefaultEntryLogTest.testCacheMaximumSizeEvictionPolicy: max 20 while creating 30.
    logger = EntryLogger(dirs_of(tmp_path), max_active_logs=20)
    for ledger in range(30):
        logger.add_entry(ledger, upstream_entry(ledger, 0))
        assert logger.active_log_count <= 20
    assert logger.active_log_count == 20
    assert logger.rotations == Counter({RotationReason.MAX_ACTIVE: 10})
    # The least recently written went first (upstream's Guava LRU only promises size <= max).
    assert sorted(logger.active_logs()) == list(range(10, 30))
    logger._check()
    logger.close()


def test_eviction_is_by_last_write_not_last_read(tmp_path: Path) -> None:
    logger = EntryLogger(dirs_of(tmp_path), max_active_logs=3)
    loc = {ledger: logger.add_entry(ledger, upstream_entry(ledger, 0)) for ledger in range(3)}
    for _ in range(3):
        logger.read_entry(0, 0, loc[0])  # reads do not refresh ledger 0
    logger.add_entry(3, upstream_entry(3, 0))
    assert sorted(logger.active_logs()) == [1, 2, 3]
    logger.add_entry(1, upstream_entry(1, 1))  # a write does refresh ledger 1
    logger.add_entry(4, upstream_entry(4, 0))
    assert sorted(logger.active_logs()) == [1, 3, 4]
    logger.close()


def test_expiry_not_refreshed_by_non_cache_methods(tmp_path: Path) -> None:
    # DefaultEntryLogTest.testExpiryRemovalByAccessingNonCacheRelatedMethods: reads, copies
    # of the current logs, the rotated list, getCurrentLogIfPresent, dir selection and
    # another ledger's writes leave ledger 0's access time alone.
    clock = FakeClock(0.0)
    logger = EntryLogger(dirs_of(tmp_path), expiry_seconds=10, clock=clock)
    loc = logger.add_entry(0, upstream_entry(0, 0))
    clock.advance(6)
    logger.read_entry(0, 0, loc)
    logger.active_logs()
    logger.rotated_log_ids()
    logger.current_log_id(0)
    logger.next_expiry_deadline()
    logger.create_new_log(99)  # picks a dir
    logger.add_entry(1, upstream_entry(1, 0))  # another ledger
    logger.checkpoint()
    logger.entry_log_metadata(logger.current_log_id(0) or 0)
    clock.advance(4)
    assert [e.ledger_id for e in logger.expire_idle()] == [0]
    assert sorted(logger.active_logs()) == [1, 99]
    logger.close()


def test_expiry_refreshed_by_a_write_within_the_window(tmp_path: Path) -> None:
    # DefaultEntryLogTest.testExpiryRemovalByAccessingOnAnotherThread: an add within the
    # window keeps the log active.
    clock = FakeClock(0.0)
    logger = EntryLogger(dirs_of(tmp_path), expiry_seconds=1, clock=clock)
    logger.add_entry(5, upstream_entry(5, 0))
    log_id = logger.current_log_id(5)
    clock.advance(0.9)
    logger.add_entry(5, upstream_entry(5, 1))
    clock.advance(0.9)
    assert logger.expire_idle() == []
    assert logger.current_log_id(5) == log_id
    logger.close()


def test_entry_log_manager_for_entry_log_per_ledger(tmp_path: Path) -> None:
    # DefaultEntryLogTest.testEntryLogManagerForEntryLogPerLedger: roll every ledger's log;
    # the new ones hold only the header in their buffers; a flush empties the rotated list
    # and moves leastUnflushedLogId to the number of ledgers.
    n = 8
    logger = EntryLogger(dirs_of(tmp_path), preallocation=False)
    for ledger in range(n):
        for entry in range(3):
            logger.add_entry(ledger, upstream_entry(ledger, entry))
    for ledger in range(n):
        logger.create_new_log(ledger)
    assert logger.rotated_log_count == n
    for log_id in logger.active_logs().values():
        writer = logger.open_writer(log_id)
        assert writer is not None
        assert writer.buffered_bytes == writer.position == HEADER_SIZE
    logger.checkpoint()
    assert logger.rotated_log_count == 0
    assert logger.least_unflushed_log_id == n
    for log_id in logger.active_logs().values():
        writer = logger.open_writer(log_id)
        assert writer is not None
        assert writer.unpersisted_bytes == 0
    logger.close()


def test_long_ledger_ids_with_entry_log_per_ledger(tmp_path: Path) -> None:
    # DefaultEntryLogTest.testLongLedgerIdsWithEntryLogPerLedger: ids near 2^63 - 1.
    logger = EntryLogger(dirs_of(tmp_path), max_active_logs=3)
    ledgers = [MAX_LONG - i for i in range(5)]
    locations = {}
    for ledger in ledgers:
        for entry in range(4):
            locations[ledger, entry] = logger.add_entry(ledger, upstream_entry(ledger, entry))
    logger.checkpoint()
    for (ledger, entry), loc in locations.items():
        assert logger.read_entry(ledger, entry, loc) == upstream_entry(ledger, entry)
    logger._check()
    logger.close()


def test_a_log_never_holds_two_ledgers(tmp_path: Path) -> None:
    logger = EntryLogger(dirs_of(tmp_path))
    logger.add_entry(1, upstream_entry(1, 0))
    with pytest.raises(ValueError, match="never hold two ledgers"):
        logger.add_entry(1, upstream_entry(2, 0))
    with pytest.raises(ValueError, match="no ledger id"):
        logger.add_entry(1, b"short")
    assert logger.active_logs() == {1: 0}
    logger._check()
    logger.close()


def test_upstream_behaviour_expires_only_lazily_on_writes(tmp_path: Path) -> None:
    # §3.5: Guava evicts expired entries only during cache writes; an idle upstream bookie
    # never rotates. expire_idle() does nothing; the next add sweeps every expired log,
    # and a ledger whose own log expired gets a new one.
    clock = FakeClock(0.0)
    logger = EntryLogger(dirs_of(tmp_path), expiry_seconds=10, clock=clock, upstream_behaviour=True)
    for ledger in range(3):
        logger.add_entry(ledger, upstream_entry(ledger, 0))
    before = logger.active_logs()
    clock.advance(3600)
    assert logger.expire_idle() == []
    assert logger.next_expiry_deadline() is None
    assert logger.active_logs() == before  # idle for an hour, still active
    logger.add_entry(0, upstream_entry(0, 1))
    assert logger.rotations == Counter({RotationReason.EXPIRY: 3})
    assert list(logger.active_logs()) == [0]
    assert logger.active_logs()[0] != before[0]
    logger.close()


def test_single_log_is_created_lazily_and_shared(tmp_path: Path) -> None:
    # DefaultEntryLogTest.testDeferCreateNewLog / testSingleEntryLogCreateNewLog.
    logger = EntryLogger(dirs_of(tmp_path), per_ledger=False, log_size_limit=HEADER_SIZE + 300)
    assert isinstance(logger.manager, EntryLogManagerForSingleEntryLog)
    assert logger.log_ids() == []
    assert logger.active_log_count == 0
    a = logger.add_entry(1, upstream_entry(1, 0))
    b = logger.add_entry(2, upstream_entry(2, 0))
    assert a >> 32 == b >> 32 == 0
    assert logger.active_logs() == {1: 0, 2: 0}
    assert logger.log_ids() == [0, 1]  # the active log and the preallocated one
    # BP-32's per-ledger rotations do not apply to the shared log.
    assert logger.rotate_ledger(1, RotationReason.WRITE_CLOSE) is False
    assert logger.expire_idle() == []
    assert logger.next_expiry_deadline() is None
    # 30 bytes per entry: the 10th entry would pass the limit and rolls onto log 1.
    for entry in range(1, 10):
        logger.add_entry(1, upstream_entry(1, entry))
    assert logger.current_log_id(1) == 1
    assert logger.rotations == Counter({RotationReason.SIZE: 1})
    logger.checkpoint()
    assert logger.least_unflushed_log_id == 1  # moves to the active log's id
    logger._check()
    logger.close()


def test_managers_are_chosen_by_config(tmp_path: Path) -> None:
    per_ledger = EntryLogger(dirs_of(tmp_path / "a"))
    single = EntryLogger(dirs_of(tmp_path / "b"), per_ledger=False)
    assert isinstance(per_ledger.manager, EntryLogManagerForEntryLogPerLedger)
    assert isinstance(single.manager, EntryLogManagerForSingleEntryLog)
    per_ledger.close()
    single.close()


def test_size_roll_and_rotation_reasons(tmp_path: Path) -> None:
    events: list[RotationEvent] = []
    logger = EntryLogger(
        dirs_of(tmp_path),
        log_size_limit=HEADER_SIZE + 100,
        max_active_logs=2,
        on_rotate=events.append,
    )
    for entry in range(4):
        logger.add_entry(1, upstream_entry(1, entry))  # 3 x 30 bytes fit, the 4th rolls
    assert [e.reason for e in events] == [RotationReason.SIZE]
    logger.add_entry(2, upstream_entry(2, 0))
    logger.add_entry(3, upstream_entry(3, 0))  # evicts ledger 1
    assert events[-1] == RotationEvent(events[-1].log_id, 1, RotationReason.MAX_ACTIVE)
    assert logger.rotate_ledger(2, RotationReason.FENCE)
    assert logger.rotate_ledger(3, RotationReason.REPLICATION)
    assert not logger.rotate_ledger(3, RotationReason.WRITE_CLOSE)  # no active log any more
    assert logger.rotations == Counter(e.reason for e in events)
    assert logger.active_log_count == 0
    logger._check()
    logger.close()


def test_bp32_rotations_ignored_with_upstream_behaviour(tmp_path: Path) -> None:
    logger = EntryLogger(dirs_of(tmp_path), upstream_behaviour=True)
    logger.add_entry(1, upstream_entry(1, 0))
    for reason in (RotationReason.WRITE_CLOSE, RotationReason.FENCE, RotationReason.REPLICATION):
        assert logger.rotate_ledger(1, reason) is False
    assert logger.rotate_ledger(1, RotationReason.SIZE) is True
    logger.close()


def test_preallocated_log_pins_least_unflushed(tmp_path: Path) -> None:
    # §2.7/§4: the preallocated log is registered as unflushed at creation, like upstream's.
    logger = EntryLogger(dirs_of(tmp_path))
    logger.add_entry(1, upstream_entry(1, 0))  # log 0 active, 1 preallocated
    logger.rotate_ledger(1, RotationReason.WRITE_CLOSE)
    logger.checkpoint()
    assert logger.least_unflushed_log_id == 1
    assert logger.preallocated_log_id == 1
    assert not logger.is_flushed_log_id(1)
    logger.close()
    # Closing drops the unused preallocated log; its id is never handed out again.
    assert logger.log_ids() == [0]
    again = EntryLogger(dirs_of(tmp_path))
    assert again.least_unflushed_log_id == 2
    assert again.create_new_log(5) == 2
    again.close()


def test_ids_wrap_around(tmp_path: Path) -> None:
    # §2.7: ids are Java ints and wrap to 0 after 2^31 - 1.
    d = dirs_of(tmp_path, 1)
    (d[0] / "current").mkdir(parents=True)
    (d[0] / "current" / "lastId").write_text(f"{MAX_LOG_ID - 1:x}\n")
    logger = EntryLogger(d, preallocation=False)
    assert logger.create_new_log(1) == MAX_LOG_ID
    assert logger.create_new_log(2) == 0
    assert (logger.current_dirs[0] / "lastId").read_text() == "0\n"
    logger.close()


def test_last_id_rewritten_in_place_in_every_dir(tmp_path: Path) -> None:
    # §2.7: lastId names the last allocated id in every ledger dir (the preallocated one);
    # written in place (allocator option last_id_in_place), so no temporary file is left.
    logger = EntryLogger(dirs_of(tmp_path))
    for ledger in range(20):
        logger.create_new_log(ledger)
    for d in logger.current_dirs:
        assert (d / "lastId").read_text() == "14\n"  # 0x14 = 20, the preallocated log
        assert not (d / "lastId.tmp").exists()
    logger.close()


def test_add_entry_hot_path_touches_only_its_ledger(tmp_path: Path) -> None:
    # Adds to a ledger with room neither create, rotate nor allocate.
    logger = EntryLogger(dirs_of(tmp_path))
    logger.add_entry(1, make_entry(1, 0, b"x" * 100))
    files_before = logger.log_ids()
    for entry in range(1, 200):
        logger.add_entry(1, make_entry(1, entry, b"x" * 100))
    assert logger.log_ids() == files_before
    assert sum(logger.rotations.values()) == 0
    logger.close()


def test_preallocated_log_moves_to_the_least_loaded_dir(tmp_path: Path) -> None:
    # Two dirs. After ledgers 1 (log 0, dir 0) and 2 (log 1, dir 1) the preallocated log 2
    # sits in dir 0; rotating ledger 2 empties dir 1, so log 2 must move there. A stray
    # 2.log in dir 1 makes the move give up id 2 for a fresh one.
    logger = EntryLogger(dirs_of(tmp_path, 2))
    logger.create_new_log(1)
    logger.create_new_log(2)
    assert logger.preallocated_log_id == 2
    assert logger.log_path(2).parent == logger.current_dirs[0]
    logger.rotate_ledger(2, RotationReason.WRITE_CLOSE)
    (logger.current_dirs[1] / "2.log").write_bytes(b"stray")
    assert logger.create_new_log(3) == 3
    assert logger.log_path(3).parent == logger.current_dirs[1]
    assert (logger.current_dirs[1] / "2.log").read_bytes() == b"stray"
    assert not (logger.current_dirs[0] / "2.log").exists()
    logger._check()
    # Without a stray file the preallocated log keeps its id when it moves.
    logger.rotate_ledger(3, RotationReason.WRITE_CLOSE)  # empties dir 1 again
    pre = logger.preallocated_log_id
    assert pre == 4
    assert logger.log_path(pre).parent == logger.current_dirs[0]
    assert logger.create_new_log(4) == pre
    assert logger.log_path(pre).parent == logger.current_dirs[1]
    assert not (logger.current_dirs[0] / "4.log").exists()
    logger._check()
    logger.close()


def test_flush_entrylog_bytes_fsyncs_before_a_roll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # §3.3: with flushEntrylogBytes > 0 the current log is fsynced before a size roll.
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    for per_ledger in (True, False):
        synced.clear()
        logger = EntryLogger(
            dirs_of(tmp_path / str(per_ledger)),
            per_ledger=per_ledger,
            log_size_limit=HEADER_SIZE + 100,
            flush_entrylog_bytes=1 << 20,
        )
        for entry in range(3):
            logger.add_entry(1, upstream_entry(1, entry))
        assert synced == []
        logger.add_entry(1, upstream_entry(1, 3))  # rolls
        assert len(synced) == 1
        logger.close()


def test_closed_logger_refuses_work(tmp_path: Path) -> None:
    with EntryLogger(dirs_of(tmp_path)) as logger:
        loc = logger.add_entry(1, upstream_entry(1, 0))
    assert logger.closed
    with pytest.raises(ValueError, match="closed"):
        logger.add_entry(2, upstream_entry(2, 0))
    with pytest.raises(ValueError, match="closed"):
        logger.read_entry(1, 0, loc)
    logger.close()  # idempotent


# ------------------------------------------------------------------------- runs (add_entries)


def log_files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path, with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@settings(max_examples=60, deadline=None)
@given(
    per_ledger=st.booleans(),
    upstream_behaviour=st.booleans(),
    room=st.one_of(st.integers(0, 8000), st.sampled_from([0, 40, 100, 200, 1000, 3000])),
    max_active_logs=st.integers(1, 3),
    runs=st.lists(
        st.tuples(
            st.integers(0, 4),
            st.lists(st.one_of(st.integers(16, 2500), st.sampled_from([16, 46, 96])), max_size=12),
            st.sampled_from([0, 0, 4, 11]),
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_add_entries_is_add_entry_of_each_body(
    per_ledger: bool,
    upstream_behaviour: bool,
    room: int,
    max_active_logs: int,
    runs: list[tuple[int, list[int], float]],
) -> None:
    # The sorted storage's flush writes a ledger's run with add_entries: it must leave the
    # logs, the locations and the rotations (size rolls, evictions, expiry) exactly as an
    # add_entry per body would. Small limits make runs span several logs; records of 20, 50
    # and 100 bytes make them fill logs exactly.
    clock = FakeClock()
    with scratch_dir() as d:
        events: dict[str, list[RotationEvent]] = {"one": [], "run": []}
        one, run = (
            EntryLogger(
                dirs_of(d / name, 2),
                per_ledger=per_ledger,
                upstream_behaviour=upstream_behaviour,
                log_size_limit=HEADER_SIZE + room,
                max_active_logs=max_active_logs,
                expiry_seconds=10,
                write_buffer_size=4096,
                clock=clock,
                on_rotate=events[name].append,
            )
            for name in ("one", "run")
        )
        next_entry: Counter[int] = Counter()
        written: list[tuple[int, int, int, bytes]] = []
        for ledger, sizes, idle in runs:
            clock.advance(idle)
            assert one.expire_idle() == run.expire_idle()
            first = next_entry[ledger]
            next_entry[ledger] += len(sizes)
            bodies = [seeded_entry(ledger, first + i, n, seed=i) for i, n in enumerate(sizes)]
            locations = run.add_entries(ledger, bodies)
            assert locations == [one.add_entry(ledger, body) for body in bodies]
            assert events["run"] == events["one"]
            assert run.active_logs() == one.active_logs()
            assert run.log_ids() == one.log_ids()
            written += [
                (ledger, first + i, loc, b)
                for i, (loc, b) in enumerate(zip(locations, bodies, strict=True))
            ]
            run._check()
        for ledger, entry, location, body in written:
            assert run.read_entry(ledger, entry, location) == body
        one.close()
        run.close()
        assert log_files(d / "run") == log_files(d / "one")


@pytest.mark.parametrize("per_ledger", [True, False])
def test_add_entries_rolls_and_evicts_like_add_entry(tmp_path: Path, per_ledger: bool) -> None:
    # A run of 7 entries of 30 bytes with room for exactly 3 per log: logs of 3, 3 and 1.
    events: list[RotationEvent] = []
    logger = EntryLogger(
        dirs_of(tmp_path),
        per_ledger=per_ledger,
        log_size_limit=HEADER_SIZE + 90,
        max_active_logs=1,
        on_rotate=events.append,
    )
    locations = logger.add_entries(1, [upstream_entry(1, e) for e in range(7)])
    logs = [loc >> 32 for loc in locations]
    assert logs == [logs[0]] * 3 + [logs[3]] * 3 + [logs[6]]
    assert [loc & 0xFFFFFFFF for loc in locations] == [1028, 1058, 1088] * 2 + [1028]
    assert [e.reason for e in events] == [RotationReason.SIZE] * 2
    logger.add_entries(2, [upstream_entry(2, 0)])
    if per_ledger:  # ledger 1's log makes room for ledger 2's
        assert events[-1] == RotationEvent(logs[6], 1, RotationReason.MAX_ACTIVE)
    else:  # the shared log has room for the entry: no rotation
        assert len(events) == 2
    assert logger.add_entries(3, []) == []
    with pytest.raises(ValueError, match="entry of ledger 2 in a run of ledger 1"):
        logger.add_entries(1, [upstream_entry(1, 7), upstream_entry(2, 1)])
    logger._check()
    logger.close()
