"""The entry logger facade: reads, checkpoints, leastUnflushedLogId, restarts, faults, fds.

What the bookie relies on beyond "which log": entries read back from any log in any state
(buffered, rotated, closed, from an earlier run, in the other mode); checkpoints that make
everything durable while adds continue and that move leastUnflushedLogId exactly as
reference §4; BP-32's write-close and timer expiry; write errors that rotate before they
surface; and bounded file descriptors. Scenarios from upstream's ``DefaultEntryLogTest`` and
``LedgerStorageCheckpointTest`` are named where they are re-enacted.
"""

from __future__ import annotations

import errno
import os
import random
from collections import Counter
from typing import TYPE_CHECKING

import pytest
import trio
import trio.lowlevel
import trio.testing

from bookiesim.bookie.config import BookieConfig
from bookiesim.entrylog import writeback
from bookiesim.entrylog.format import HEADER_SIZE, LogHeader
from bookiesim.entrylog.logger import CheckpointPlan, EntryLogger, RotationEvent, RotationReason
from bookiesim.entrylog.metadata import extract_by_scanning, extract_from_ledgers_map
from bookiesim.entrylog.reader import EntryReadError, WrongEntryError
from bookiesim.sim.disk import SimDisk

from .entries import make_entry, seeded_entry, upstream_entry
from .test_managers import FakeClock, dirs_of

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

Written = dict[tuple[int, int], tuple[int, bytes]]


def add(logger: EntryLogger, written: Written, ledger: int, entry: int, size: int = 100) -> int:
    body = seeded_entry(ledger, entry, size, seed=ledger * 1000 + entry)
    location = logger.add_entry(ledger, body)
    written[ledger, entry] = (location, body)
    return location


def assert_all_readable(logger: EntryLogger, written: Written) -> None:
    for (ledger, entry), (location, body) in written.items():
        assert logger.read_entry(ledger, entry, location) == body


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


# ---------------------------------------------------------------------------- reads


def test_read_add_calls_of_multiple_entry_logs(tmp_path: Path) -> None:
    # DefaultEntryLogTest.testReadAddCallsOfMultipleEntryLogs: ledger i gets log i; reads
    # are right before and after rolling and flushing.
    logger = EntryLogger(dirs_of(tmp_path), preallocation=False)
    written: Written = {}
    for entry in range(5):
        for ledger in range(6):
            add(logger, written, ledger, entry)
    assert logger.active_logs() == {ledger: ledger for ledger in range(6)}
    assert_all_readable(logger, written)  # from the write buffers
    for ledger in range(6):
        logger.create_new_log(ledger)
    assert_all_readable(logger, written)  # rotated: closed, read through readers
    logger.checkpoint()
    assert_all_readable(logger, written)
    for ledger in range(6):
        add(logger, written, ledger, 5)
    assert_all_readable(logger, written)
    logger._check()
    logger.close()


def test_read_checks_ids_and_does_not_refresh(tmp_path: Path) -> None:
    logger = EntryLogger(dirs_of(tmp_path))
    loc = logger.add_entry(1, upstream_entry(1, 0))
    with pytest.raises(WrongEntryError):
        logger.read_entry(1, 1, loc)
    with pytest.raises(FileNotFoundError):
        logger.read_entry(1, 0, (77 << 32) | 1028)
    with pytest.raises(EntryReadError):
        logger.read_entry(1, 0, loc + 10_000)
    logger.close()


def test_read_handles_are_capped(tmp_path: Path) -> None:
    logger = EntryLogger(dirs_of(tmp_path), max_open_read_files=3, preallocation=False)
    written: Written = {}
    for ledger in range(10):
        add(logger, written, ledger, 0)
        logger.rotate_ledger(ledger, RotationReason.WRITE_CLOSE)
    logger.checkpoint()
    baseline = fd_count()
    for _ in range(3):
        assert_all_readable(logger, written)
        assert logger.open_read_files == 3
        assert fd_count() == baseline + 3
    logger._check()
    logger.close()
    assert fd_count() == baseline


# ---------------------------------------------------------------------------- checkpoints


def test_checkpoint_flushes_all_logs(tmp_path: Path) -> None:
    # LedgerStorageCheckpointTest.testIfEntryLogPerLedgerEnabledCheckpointFlushesAllLogs:
    # after a checkpoint no rotated logs remain and every active log has 0 unpersisted bytes.
    logger = EntryLogger(dirs_of(tmp_path), log_size_limit=HEADER_SIZE + 1000)
    written: Written = {}
    for entry in range(30):
        for ledger in range(5):
            add(logger, written, ledger, entry, size=120)
    assert logger.rotated_log_count > 0
    logger.checkpoint()
    assert logger.rotated_log_count == 0
    for log_id in logger.active_logs().values():
        writer = logger.open_writer(log_id)
        assert writer is not None
        assert writer.unpersisted_bytes == 0
    assert_all_readable(logger, written)
    logger.close()


def test_a_checkpoint_of_many_logs_syncs_the_file_system_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Churn: 100 ledgers through 10 active logs, so nearly every add evicts a log. The
    # checkpoint's 100+ logs take one syncfs, and a power loss right after loses nothing.
    disk = SimDisk()
    disk.add_root(tmp_path)
    written: Written = {}
    with disk.installed():
        syncfs_calls: list[int] = []
        sim_syncfs = writeback._syncfs

        def spy(fd: int) -> None:
            syncfs_calls.append(fd)
            sim_syncfs(fd)

        monkeypatch.setattr(writeback, "_syncfs", spy)
        fsyncs_before = disk.syncs
        logger = EntryLogger(dirs_of(tmp_path), max_active_logs=10, preallocation=False)
        for entry in range(2):
            for ledger in range(100):
                add(logger, written, ledger, entry)
        open_logs = list(logger.active_logs().values())
        plan = logger.prepare_checkpoint()
        assert len(plan.paths) >= writeback.SYNCFS_MIN_FILES
        plan.sync()
        logger.complete_checkpoint(plan)
        assert len(syncfs_calls) == 1
        assert disk.syncs - fsyncs_before >= len(plan.paths)  # the model synced every file
        assert logger.rotated_log_count == 0
        assert logger.least_unflushed_log_id == min(open_logs)
        for log_id in open_logs:  # positions recorded as after a per-file fsync
            writer = logger.open_writer(log_id)
            assert writer is not None
            assert writer.unpersisted_bytes == 0
        logger.close()
        disk.crash(tmp_path)
        reopened = EntryLogger(dirs_of(tmp_path), preallocation=False)
        assert_all_readable(reopened, written)
        reopened.close()


def test_checkpoint_skips_logs_with_nothing_new(tmp_path: Path) -> None:
    logger = EntryLogger(dirs_of(tmp_path))
    written: Written = {}
    for ledger in range(4):
        add(logger, written, ledger, 0)
    plan = logger.prepare_checkpoint()
    assert len(plan.paths) == 4  # the preallocated log is never synced
    plan.sync()
    logger.complete_checkpoint(plan)
    plan = logger.prepare_checkpoint()
    assert plan.paths == []
    add(logger, written, 2, 1)
    plan = logger.prepare_checkpoint()
    assert plan.paths == [logger.log_path(logger.current_log_id(2) or 0)]
    with pytest.raises(RuntimeError, match="sync"):
        logger.complete_checkpoint(plan)
    plan.sync()
    with pytest.raises(RuntimeError, match="already"):
        plan.sync()
    logger.complete_checkpoint(plan)
    logger.close()


def test_write_close_moves_least_unflushed_at_next_checkpoint(tmp_path: Path) -> None:
    # BP-32: a write-close rotates at once; the next checkpoint flushes the log, and
    # leastUnflushedLogId moves past every leading flushed id (§4).
    events: list[RotationEvent] = []
    logger = EntryLogger(dirs_of(tmp_path), on_rotate=events.append)
    written: Written = {}
    for ledger in (10, 11, 12):
        add(logger, written, ledger, 0)  # logs 0, 1, 2; 3 preallocated
    assert logger.rotate_ledger(11, RotationReason.WRITE_CLOSE)
    assert events == [RotationEvent(1, 11, RotationReason.WRITE_CLOSE)]
    assert logger.rotated_log_ids() == [1]
    logger.checkpoint()
    assert logger.least_unflushed_log_id == 0  # log 0 (ledger 10) still active
    assert logger.is_flushed_log_id(1)
    assert not logger.is_flushed_log_id(0)
    logger.rotate_ledger(10, RotationReason.WRITE_CLOSE)
    assert logger.least_unflushed_log_id == 0  # not before the checkpoint
    logger.checkpoint()
    assert logger.least_unflushed_log_id == 2
    assert logger.flushed_log_ids() == [0, 1]
    logger.rotate_ledger(12, RotationReason.FENCE)
    logger.checkpoint()
    assert logger.least_unflushed_log_id == 3  # the preallocated log pins it
    assert_all_readable(logger, written)
    # Sealed at rotation: each rotated log carries its ledgers map.
    for log_id, ledger in ((0, 10), (1, 11), (2, 12)):
        meta = extract_from_ledgers_map(logger.log_path(log_id))
        assert dict(meta.ledgers) == {ledger: 104}
    logger.close()


def test_append_ledgers_map_on_cache_removal(tmp_path: Path) -> None:
    # DefaultEntryLogTest.testAppendLedgersMapOnCacheRemoval: a checkpoint does not seal an
    # active log; an eviction does: one ledger, usage 1.0, bytes 4 x (200 + 4).
    logger = EntryLogger(dirs_of(tmp_path), max_active_logs=1)
    for entry in range(4):
        logger.add_entry(0, make_entry(0, entry, bytes(184)))  # 200-byte bodies
    log_id = logger.current_log_id(0)
    assert log_id is not None
    logger.checkpoint()
    with pytest.raises(ValueError, match="not sealed"):
        extract_from_ledgers_map(logger.log_path(log_id))
    logger.add_entry(1, make_entry(1, 0, bytes(184)))  # evicts ledger 0's log
    meta = extract_from_ledgers_map(logger.log_path(log_id))
    assert dict(meta.ledgers) == {0: 4 * (200 + 4)}
    assert meta.usage == 1.0
    logger.close()


def test_idle_logger_rotates_expired_logs_on_timer(tmp_path: Path) -> None:
    # DESIGN.md: expiry is enforced by a timer even on an idle bookie (upstream: never).
    for upstream in (False, True):
        clock = FakeClock(0.0)
        logger = EntryLogger(
            dirs_of(tmp_path / str(upstream)),
            expiry_seconds=300,
            clock=clock,
            upstream_behaviour=upstream,
        )
        for ledger in range(3):
            logger.add_entry(ledger, upstream_entry(ledger, 0))
        clock.advance(301)
        events = logger.expire_idle()
        logger.checkpoint()
        if upstream:
            assert events == []
            assert logger.active_log_count == 3
            assert logger.least_unflushed_log_id == 0
            assert logger.flushed_log_ids() == []
        else:
            assert [e.ledger_id for e in events] == [0, 1, 2]
            assert {e.reason for e in events} == {RotationReason.EXPIRY}
            assert logger.active_log_count == 0
            assert logger.least_unflushed_log_id == 3  # the preallocated log 3 pins it
            assert logger.flushed_log_ids() == [0, 1, 2]
        logger.close()


def test_flushed_log_ids_and_issue_2728(tmp_path: Path) -> None:
    # §4: a slowly written ledger keeps log 0 active. GC (≥ 4.16) still sees every flushed
    # newer log; with upstream_behaviour (≤ 4.14) it sees none of them (issue #2728).
    for upstream in (False, True):
        clock = FakeClock(0.0)
        logger = EntryLogger(
            dirs_of(tmp_path / str(upstream)),
            clock=clock,
            preallocation=False,
            upstream_behaviour=upstream,
        )
        logger.add_entry(0, upstream_entry(0, 0))
        for ledger in range(1, 6):
            logger.add_entry(ledger, upstream_entry(ledger, 0))
            logger.rotate_ledger(ledger, RotationReason.SIZE)
            clock.advance(100)
            logger.add_entry(0, upstream_entry(0, ledger))  # keeps log 0 fresh
        logger.checkpoint()
        assert logger.least_unflushed_log_id == 0
        assert logger.log_ids() == [0, 1, 2, 3, 4, 5]
        assert logger.flushed_log_ids() == ([] if upstream else [1, 2, 3, 4, 5])
        logger.close()


async def test_split_checkpoint_with_sync_in_a_thread(tmp_path: Path) -> None:
    # The bookie runs plan.sync in a worker thread while adds (and rotations, which close
    # descriptors) continue on the trio thread.
    logger = EntryLogger(dirs_of(tmp_path), max_active_logs=4, log_size_limit=HEADER_SIZE + 2000)
    written: Written = {}
    rng = random.Random(3)
    next_entry: Counter[int] = Counter()

    def add_some(n: int) -> None:
        for _ in range(n):
            ledger = rng.randrange(8)
            add(logger, written, ledger, next_entry[ledger], size=rng.randrange(16, 400))
            next_entry[ledger] += 1

    add_some(50)
    pointers = [logger.least_unflushed_log_id]
    for _ in range(15):
        plan = logger.prepare_checkpoint()
        done = trio.Event()

        async def sync(plan_: CheckpointPlan = plan, done_: trio.Event = done) -> None:
            await trio.to_thread.run_sync(plan_.sync)
            done_.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sync)
            # Adds run while the fsync does, but boundedly: a slow disk must not turn this
            # into an ever-growing workload.
            for _ in range(8):
                if done.is_set():
                    break
                add_some(5)
                logger._check()
                await trio.lowlevel.checkpoint()
            await done.wait()
        logger.complete_checkpoint(plan)
        logger._check()
        pointers.append(logger.least_unflushed_log_id)
    assert pointers == sorted(pointers)
    assert pointers[-1] > 0
    assert_all_readable(logger, written)
    logger.close()


def test_log_rotated_during_sync_is_retired_by_the_next_checkpoint(tmp_path: Path) -> None:
    logger = EntryLogger(dirs_of(tmp_path), preallocation=False)
    written: Written = {}
    add(logger, written, 1, 0)
    add(logger, written, 2, 0)
    plan = logger.prepare_checkpoint()
    logger.rotate_ledger(1, RotationReason.WRITE_CLOSE)  # closes log 0's descriptor
    plan.sync()  # fsyncs log 0 by path
    logger.complete_checkpoint(plan)
    assert logger.rotated_log_ids() == [0]
    assert logger.least_unflushed_log_id == 0
    logger.checkpoint()
    assert logger.least_unflushed_log_id == 1
    assert_all_readable(logger, written)
    logger.close()


def test_flush_interval_in_bytes(tmp_path: Path) -> None:
    # DefaultEntryLogTest.testFlushIntervalInBytes: flushEntrylogBytes = N fsyncs the
    # active log every N unpersisted bytes; the data is readable by a fresh single-mode
    # logger.
    n = 5000
    logger = EntryLogger(dirs_of(tmp_path), flush_entrylog_bytes=n)
    written: Written = {}
    writer = logger.open_writer(logger.create_new_log(0))
    assert writer is not None
    assert writer.unpersisted_bytes == HEADER_SIZE  # the header, still in the buffer
    add(logger, written, 0, 0, size=16)
    assert writer.unpersisted_bytes == HEADER_SIZE + 20
    entry = 1
    while writer.position < n - 200:
        add(logger, written, 0, entry, size=180)
        entry += 1
        assert writer.unpersisted_bytes == writer.position
    add(logger, written, 0, entry, size=500)
    assert writer.unpersisted_bytes == 0
    logger.close()
    single = EntryLogger(dirs_of(tmp_path), per_ledger=False)
    assert_all_readable(single, written)
    single.close()


# ---------------------------------------------------------------------------- restarts


@pytest.mark.parametrize(("first", "second"), [(True, False), (False, True)])
def test_swapping_entry_log_manager(tmp_path: Path, first: bool, second: bool) -> None:
    # DefaultEntryLogTest.testSwappingEntryLogManagerFromEntryLogPerLedgerToSingle and
    # ...FromSingleToEntryLogPerLedger: same file format, readable across the swap.
    written: Written = {}
    logger = EntryLogger(dirs_of(tmp_path), per_ledger=first, log_size_limit=HEADER_SIZE + 800)
    for entry in range(10):
        for ledger in range(4):
            add(logger, written, ledger, entry)
    logger.checkpoint()
    last = logger.log_ids()[-1]
    logger.close()
    other = EntryLogger(dirs_of(tmp_path), per_ledger=second)
    assert_all_readable(other, written)
    for ledger in range(4):
        add(other, written, ledger, 10)
    assert min(loc >> 32 for loc, _ in (written[lid, 10] for lid in range(4))) > last
    assert_all_readable(other, written)
    other._check()
    other.close()


def test_restart_never_reuses_ids_and_scans_unsealed_logs(tmp_path: Path) -> None:
    written: Written = {}
    logger = EntryLogger(dirs_of(tmp_path))
    for ledger in range(3):
        add(logger, written, ledger, 0)
    logger.rotate_ledger(0, RotationReason.WRITE_CLOSE)
    logger.close()  # no checkpoint, no ledgers maps for the active logs 1 and 2
    header = LogHeader.decode(logger.log_path(1).read_bytes()[:HEADER_SIZE])
    assert header.ledgers_map_offset == 0
    assert dict(extract_by_scanning(logger.log_path(1)).ledgers) == {1: 104}
    again = EntryLogger(dirs_of(tmp_path))
    assert again.least_unflushed_log_id == 4  # 0..2 used, 3 was preallocated
    assert again.flushed_log_ids() == [0, 1, 2]
    assert_all_readable(again, written)
    add(again, written, 1, 1)
    assert again.current_log_id(1) == 4
    assert dict(again.entry_log_metadata(1).ledgers) == {1: 104}
    again._check()
    again.close()


def test_from_config(tmp_path: Path) -> None:
    cfg = BookieConfig(
        ledger_directories=(tmp_path / "a", tmp_path / "b"),
        maximum_number_of_active_entry_logs=2,
        entry_log_file_preallocation_enabled=False,
    )
    logger = EntryLogger.from_config(cfg)
    assert logger.per_ledger
    assert logger.current_dirs == (tmp_path / "a" / "current", tmp_path / "b" / "current")
    for ledger in range(3):
        logger.add_entry(ledger, upstream_entry(ledger, 0))
    assert logger.active_log_count == 2
    assert logger.preallocated_log_id is None
    logger.close()
    single = EntryLogger.from_config(cfg.replace(entry_log_per_ledger_enabled=False))
    assert not single.per_ledger
    single.close()


def test_remove_entry_log(tmp_path: Path) -> None:
    logger = EntryLogger(dirs_of(tmp_path))
    written: Written = {}
    for ledger in range(3):
        add(logger, written, ledger, 0)
    logger.rotate_ledger(0, RotationReason.WRITE_CLOSE)
    with pytest.raises(ValueError, match="not flushed"):
        logger.remove_entry_log(0)  # rotated, not yet checkpointed
    with pytest.raises(ValueError, match="not flushed"):
        logger.remove_entry_log(1)  # active
    logger.checkpoint()
    logger.read_entry(0, 0, written[0, 0][0])
    assert logger.open_read_files == 1
    assert logger.remove_entry_log(0)
    assert logger.open_read_files == 0
    assert not logger.remove_entry_log(0)
    assert logger.log_ids() == [1, 2, 3]
    with pytest.raises(FileNotFoundError):
        logger.read_entry(0, 0, written[0, 0][0])
    logger._check()
    logger.close()


# ---------------------------------------------------------------------------- faults


class FailingWrites:
    """``os.pwrite`` (the entry-log writer's only write) that fails with ENOSPC ``failures``
    times (-1: until undone)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.real_pwrite: Callable[[int, bytes, int], int] = os.pwrite

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if self.failures != 0:
            self.failures -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.real_pwrite(fd, data, offset)


def _three_entries_buffered(
    tmp_path: Path, per_ledger: bool
) -> tuple[EntryLogger, list[RotationEvent], Written, int | None]:
    """A logger with a 2 KiB write buffer holding ledger 1's entries 0-2, the rotations it
    reports, what was written, and the id of the log they are in (the one to fail)."""
    events: list[RotationEvent] = []
    logger = EntryLogger(
        dirs_of(tmp_path), per_ledger=per_ledger, write_buffer_size=2048, on_rotate=events.append
    )
    written: Written = {}
    for entry in range(3):
        add(logger, written, 1, entry)  # stays in the 2 KiB buffer
    failing = logger.current_log_id(1)
    return logger, events, written, failing


@pytest.mark.parametrize("per_ledger", [True, False])
def test_write_error_rotates_before_it_surfaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_ledger: bool
) -> None:
    # BP-32: a write failure for a ledger rotates its log before the error is returned;
    # nothing added before is lost, and the next add goes to a fresh log.
    logger, events, written, failing = _three_entries_buffered(tmp_path, per_ledger)
    monkeypatch.setattr(os, "pwrite", FailingWrites(1).pwrite)
    with pytest.raises(OSError, match="No space"):
        add(logger, written, 1, 3, size=3000)  # fills the buffer: the write fails
    monkeypatch.undo()
    assert events == [
        RotationEvent(failing or 0, 1 if per_ledger else None, RotationReason.WRITE_ERROR)
    ]
    assert logger.current_log_id(1) is None
    assert logger.open_write_files == 1  # only the preallocated log: the failed one closed
    assert_all_readable(logger, written)
    add(logger, written, 1, 4)
    assert logger.current_log_id(1) != failing
    logger.checkpoint()
    assert logger.is_flushed_log_id(failing or 0)
    assert_all_readable(logger, written)
    logger._check()
    logger.close()
    again = EntryLogger(dirs_of(tmp_path))
    assert_all_readable(again, written)
    # The failed log has no ledgers map and a torn tail; a scan finds the three entries.
    assert dict(extract_by_scanning(again.log_path(failing or 0)).ledgers) == {1: 3 * 104}
    again.close()


@pytest.mark.parametrize("per_ledger", [True, False])
def test_write_error_in_a_run_rotates_before_it_surfaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_ledger: bool
) -> None:
    # add_entries (a sorted storage's flush) fails as add_entry does: the log is rotated
    # before the error surfaces, what was added before stays readable, and the run can be
    # written again whole to a fresh log.
    logger, events, written, failing = _three_entries_buffered(tmp_path, per_ledger)
    bodies = [seeded_entry(1, e, 1000, seed=e) for e in range(3, 6)]
    monkeypatch.setattr(os, "pwrite", FailingWrites(1).pwrite)
    with pytest.raises(OSError, match="No space"):
        logger.add_entries(1, bodies)  # fills the buffer: the write fails
    monkeypatch.undo()
    assert events == [
        RotationEvent(failing or 0, 1 if per_ledger else None, RotationReason.WRITE_ERROR)
    ]
    assert logger.current_log_id(1) is None
    assert_all_readable(logger, written)
    locations = logger.add_entries(1, bodies)
    assert {loc >> 32 for loc in locations} == {logger.current_log_id(1)}
    assert logger.current_log_id(1) != failing
    written.update(
        {(1, e): (loc, b) for e, loc, b in zip(range(3, 6), locations, bodies, strict=True)}
    )
    logger.checkpoint()
    assert_all_readable(logger, written)
    logger._check()
    logger.close()


def test_persistent_write_error_keeps_the_log_open_until_a_checkpoint_can_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A disk that stays full: the failed log's buffer cannot reach the OS, so it keeps its
    # descriptor (closing would drop acknowledged entries) and checkpoints fail — the
    # journal must keep those entries — until the disk has room again.
    logger = EntryLogger(dirs_of(tmp_path), write_buffer_size=2048)
    written: Written = {}
    for entry in range(3):
        add(logger, written, 1, entry)
    failing = logger.current_log_id(1) or 0
    monkeypatch.setattr(os, "pwrite", FailingWrites(-1).pwrite)
    with pytest.raises(OSError, match="No space"):
        add(logger, written, 1, 3, size=3000)
    assert logger.rotated_log_ids() == [failing]
    assert logger.open_writer(failing) is not None  # still open, bytes only in memory
    assert_all_readable(logger, written)
    add(logger, written, 2, 0)  # another ledger, buffered in its new log
    with pytest.raises(OSError, match="No space"):
        logger.prepare_checkpoint()
    logger._check()
    monkeypatch.undo()
    logger.checkpoint()
    assert logger.rotated_log_ids() == []
    assert logger.open_writer(failing) is None
    assert logger.is_flushed_log_id(failing)
    assert_all_readable(logger, written)
    logger._check()
    logger.close()


# ---------------------------------------------------------------------------- time


async def test_expiry_timer_under_mock_clock(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # The bookie's timer sleeps until next_expiry_deadline() on trio's clock; in virtual
    # time an idle bookie rotates each log exactly when it expires.
    rotated_at: list[tuple[float, int | None]] = []
    logger = EntryLogger(
        dirs_of(tmp_path),
        expiry_seconds=300,
        clock=trio.current_time,
        on_rotate=lambda e: rotated_at.append((trio.current_time(), e.ledger_id)),
    )
    start = trio.current_time()

    async def expiry_timer() -> None:
        while True:
            deadline = logger.next_expiry_deadline()
            if deadline is None:
                return
            await trio.sleep_until(deadline)
            logger.expire_idle()

    logger.add_entry(1, upstream_entry(1, 0))
    await trio.sleep(100)
    logger.add_entry(2, upstream_entry(2, 0))
    await trio.sleep(150)
    logger.add_entry(1, upstream_entry(1, 1))  # refreshed at +250
    await expiry_timer()
    assert rotated_at == [(start + 400, 2), (start + 550, 1)]
    logger.close()


# ---------------------------------------------------------------------------- descriptors


def test_open_files_stay_bounded(tmp_path: Path) -> None:
    # 2,000 ledgers, at most 50 active logs and 20 read handles, random reads, periodic
    # checkpoints. Bound: baseline + 50 active + 20 read + the rotated logs still holding a
    # descriptor (only after a write error: 0 here; rotated logs are closed at rotation) +
    # 1, the constant: the preallocated log.
    rng = random.Random(2728)
    logger = EntryLogger(dirs_of(tmp_path, 2), max_active_logs=50, max_open_read_files=20)
    baseline = fd_count() - logger.open_write_files
    written: Written = {}
    next_entry: Counter[int] = Counter()
    keys: list[tuple[int, int]] = []
    max_rotated = 0
    # Every ledger once (shuffled), then 2,000 adds to random ledgers.
    order = rng.sample(range(2000), 2000) + [rng.randrange(2000) for _ in range(2000)]
    for step, ledger in enumerate(order):
        add(logger, written, ledger, next_entry[ledger], size=rng.randrange(16, 600))
        keys.append((ledger, next_entry[ledger]))
        next_entry[ledger] += 1
        if step % 2 == 0:
            key = rng.choice(keys)
            location, body = written[key]
            assert logger.read_entry(*key, location) == body
        max_rotated = max(max_rotated, logger.rotated_log_count)
        if step % 500 == 499:
            logger.checkpoint()
        if step % 10 == 0:
            held = sum(1 for r in logger._files.rotated_logs() if r.writer is not None)
            assert logger.open_write_files <= 50 + held + 1
            assert logger.open_read_files <= 20
            assert fd_count() <= baseline + 50 + held + 20 + 1
    assert logger.rotations[RotationReason.MAX_ACTIVE] > 3800
    assert max_rotated >= 400  # what upstream would hold open as write descriptors
    logger._check()
    logger.close()
    assert fd_count() == baseline
