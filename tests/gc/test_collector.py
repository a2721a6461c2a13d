"""Upstream's GarbageCollectorThreadTest and CompactionTest scenarios, on our storage.

One ledger storage in a temp dir, written directly; the metadata store is a set of ledger
ids (:class:`~tests.gc.helpers.FakeLedgers`); the collector is the bookie's own over the
bookie's storage adapter.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.bookie.errors import StorageFailedError
from bookiesim.bookie.gc_storage import BookieGcStorage
from bookiesim.entrylog.format import log_file_name
from bookiesim.entrylog.logger import RotationReason
from bookiesim.gc.policy import CompactionKind, CompactionSettings
from bookiesim.sim.disk import SimDisk

from .helpers import (
    FORCE_BOTH,
    FakeLedgers,
    assert_readable,
    collector,
    config,
    crash,
    open_storage,
    write,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from bookiesim.bookie.ledger_storage import LedgerStorage
    from bookiesim.gc.collector import GarbageCollector
    from bookiesim.gc.interfaces import Move

# CompactionTest: minor 0.1, major 0.5; 3 ledgers with 2/28/70 entries of ~1 KiB per log.
UPSTREAM_THRESHOLDS = CompactionSettings(
    minor_threshold=0.1,
    minor_interval=2,
    minor_max_time=None,
    major_threshold=0.5,
    major_interval=4,
    major_max_time=None,
    force_allow=True,
)
SIZE = 1000
SHARE = {1: 2, 2: 28, 3: 70}


def log_exists(storage: LedgerStorage, log_id: int) -> bool:
    return any((d / log_file_name(log_id)).exists() for d in storage.entry_logger.current_dirs)


def interleaved(tmp_path: Path, rounds: int = 3) -> tuple[LedgerStorage, list[int]]:
    """Upstream's CompactionTest layout: every log holds 2 % ledger 1, 28 % ledger 2 and
    70 % ledger 3; all logs rolled and checkpointed (flushed)."""
    storage = open_storage(config(tmp_path, entry_log_per_ledger_enabled=False))
    logs = []
    for _ in range(rounds):
        for ledger_id, n in SHARE.items():
            write(storage, ledger_id, n, SIZE)
        logs.append(storage.entry_logger.active_logs()[1])
        storage.entry_logger.create_new_log(1)  # roll the shared log
    storage.checkpoint_blocking()
    assert set(logs) <= set(storage.entry_logger.flushed_log_ids())
    return storage, logs


# --- GarbageCollectorThreadTest ------------------------------------------------------------


async def test_only_flushed_logs_are_extracted_and_deleted(tmp_path: Path) -> None:
    # testExtractMetaFromEntryLogs / testMinorCompactionWithEntryLogPerLedgerEnabled: with a
    # log per ledger, GC never touches a log still being written, even of a deleted ledger.
    storage = open_storage(config(tmp_path))
    for ledger_id in (1, 2, 3):
        write(storage, ledger_id, 5)
    logs = storage.entry_logger.active_logs()  # ledger -> log
    storage.rotate_ledger_log(2, RotationReason.WRITE_CLOSE)
    storage.checkpoint_blocking()
    assert storage.entry_logger.least_unflushed_log_id == logs[1]  # pinned by ledger 1's log
    ledgers = FakeLedgers()  # every ledger deleted
    gc = collector(storage, ledgers)
    report = await gc.run_once()
    assert report.ledgers_deleted == [1, 2, 3]
    assert report.logs_deleted == [logs[2]]  # flagged flushed, above the pointer
    assert log_exists(storage, logs[1])
    assert log_exists(storage, logs[3])
    assert gc.ledgers_awaiting_reclaim == 2
    # Once ledger 1's log is rotated and checkpointed, the next pass deletes it too.
    storage.rotate_ledger_log(1, RotationReason.EXPIRY)
    storage.checkpoint_blocking()
    report = await gc.run_once()
    assert report.logs_deleted == [logs[1]]
    assert log_exists(storage, logs[3])
    gc._check()
    storage.close()


async def test_upstream_behaviour_only_sees_logs_below_the_pointer(tmp_path: Path) -> None:
    # Upstream <= 4.14 (issue #2728): a flushed log above an active one is invisible to GC.
    storage = open_storage(config(tmp_path, upstream_behaviour=True))
    for ledger_id in (1, 2):
        write(storage, ledger_id, 5)
    logs = storage.entry_logger.active_logs()
    storage.entry_logger.create_new_log(2)  # a size roll: upstream rotates on those
    storage.checkpoint_blocking()
    gc = collector(storage, FakeLedgers([1]))
    report = await gc.run_once()
    assert report.ledgers_deleted == [2]
    assert report.logs_deleted == []
    assert log_exists(storage, logs[2])
    storage.close()


async def test_empty_log_files_left_by_a_crash_are_removed(tmp_path: Path) -> None:
    # Pooled (0-byte) and preallocated (header still buffered) logs stay behind after kill -9.
    cfg = config(tmp_path, entry_log_preallocation_pool_size=3)
    storage = open_storage(cfg)
    write(storage, 1, 5)
    assert storage.entry_logger.preallocate_some() == 3
    pooled = storage.entry_logger.pooled_log_ids()
    storage.checkpoint_blocking()
    crash(storage)
    again = open_storage(cfg)
    for log_id in pooled:
        assert os.path.getsize(again.entry_logger.log_path(log_id)) == 0
    gc = collector(again, FakeLedgers([1]))
    report = await gc.run_once()
    assert set(pooled) <= set(report.logs_deleted)
    assert report.reclaimed_by_deletion == 0
    assert_readable(again, 1, 5)
    again.close()


async def test_no_metadata_store_deletes_no_ledger(tmp_path: Path) -> None:
    storage = open_storage(config(tmp_path))
    write(storage, 1, 3)
    storage.rotate_ledger_log(1, RotationReason.WRITE_CLOSE)
    storage.checkpoint_blocking()
    gc = collector(storage, None)
    report = await gc.run_once()
    assert report.ledgers_deleted == []
    assert report.logs_deleted == []
    assert len(gc.usage) == 1
    assert_readable(storage, 1, 3)
    storage.close()


async def test_verify_metadata_keeps_a_ledger_the_listing_missed(tmp_path: Path) -> None:
    class Flaky(FakeLedgers):
        async def list_ledgers(self) -> list[int]:
            return []  # a listing that misses every ledger

    storage = open_storage(config(tmp_path))
    write(storage, 1, 3)
    gc = collector(storage, Flaky([1]), verify_metadata=True)
    assert (await gc.run_once()).ledgers_deleted == []
    assert_readable(storage, 1, 3)
    storage.close()


# --- CompactionTest ------------------------------------------------------------------------


async def test_minor_compaction(tmp_path: Path) -> None:
    storage, logs = interleaved(tmp_path)
    gc = collector(storage, FakeLedgers([1]), UPSTREAM_THRESHOLDS)
    report = await gc.run_once(force=True)
    # Forced: major runs first (upstream), at 0.5 it takes every 2 % log.
    assert report.compaction is CompactionKind.MAJOR
    assert sorted(r.log_id for r in report.compacted) == logs
    assert report.bytes_copied == 3 * SHARE[1] * (SIZE + 24 + 4)
    assert not any(log_exists(storage, i) for i in logs)
    assert_readable(storage, 1, 3 * SHARE[1], SIZE)
    storage.close()


async def test_scheduled_minor_compaction_only_below_its_threshold(tmp_path: Path) -> None:
    storage, logs = interleaved(tmp_path)
    clock = [0.0]
    gc = collector(storage, FakeLedgers([1, 3]), UPSTREAM_THRESHOLDS, clock=lambda: clock[0])
    await gc.run_once()  # starts the timers at 0
    clock[0] = 3.0  # past the minor interval (2 s), not the major one (4 s)
    report = await gc.run_once()
    assert report.compaction is CompactionKind.MINOR
    assert report.compacted == []  # 72 % live: above 0.1
    clock[0] = 10.0
    report = await gc.run_once()
    assert report.compaction is CompactionKind.MAJOR
    assert report.compacted == []  # 72 % live: above 0.5 too
    assert all(log_exists(storage, i) for i in logs)
    storage.close()


async def test_major_compaction(tmp_path: Path) -> None:
    # testMajorCompaction: ledgers 1 and 3 deleted, logs are 28 % live; ledger 2 survives.
    storage, logs = interleaved(tmp_path)
    gc = collector(storage, FakeLedgers([2]), UPSTREAM_THRESHOLDS)
    gc.suspend(minor=True)
    report = await gc.run_once(force=True)
    assert report.compaction is CompactionKind.MAJOR
    assert sorted(r.log_id for r in report.compacted) == logs
    assert_readable(storage, 2, 3 * SHARE[2], SIZE)
    storage.close()


async def test_disable_compaction(tmp_path: Path) -> None:
    # testDisableCompaction: thresholds 0, nothing is compacted even when forced.
    storage, logs = interleaved(tmp_path)
    off = CompactionSettings(0, 3600, None, 0, 86400, None, force_allow=True)
    gc = collector(storage, FakeLedgers([1]), off)
    report = await gc.run_once(force=True)
    assert report.compaction is None
    assert all(log_exists(storage, i) for i in logs)
    storage.close()


async def test_compaction_time_limit(tmp_path: Path) -> None:
    # testMinorCompactionWithMaxTimeMillisTooShort: the first log is compacted, then it stops.
    storage, logs = interleaved(tmp_path)
    clock = [0.0]

    def tick() -> float:
        clock[0] += 0.01
        return clock[0]

    limited = CompactionSettings(0.1, 2, 0.001, 0.5, 4, 0.001, force_allow=True)
    gc = collector(storage, FakeLedgers([1]), limited, clock=tick)
    report = await gc.run_once(force=True)
    assert len(report.compacted) == 1
    assert sum(log_exists(storage, i) for i in logs) == 2
    assert_readable(storage, 1, 3 * SHARE[1], SIZE)
    storage.close()


async def test_minor_compaction_with_entry_log_per_ledger(tmp_path: Path) -> None:
    # testMinorCompactionWithEntryLogPerLedgerEnabled: a ledger's garbage in per-ledger mode
    # is a whole log; compaction has nothing to copy, deletion reclaims everything.
    storage = open_storage(config(tmp_path))
    for ledger_id in (1, 2, 3, 4):
        write(storage, ledger_id, 10, SIZE)
    logs = storage.entry_logger.active_logs()
    for ledger_id in (2, 3):
        storage.rotate_ledger_log(ledger_id, RotationReason.WRITE_CLOSE)
    storage.checkpoint_blocking()
    gc = collector(storage, FakeLedgers([1, 4]), UPSTREAM_THRESHOLDS)
    report = await gc.run_once(force=True)
    assert sorted(report.logs_deleted) == sorted([logs[2], logs[3]])
    assert report.bytes_copied == 0
    assert log_exists(storage, logs[1])
    assert log_exists(storage, logs[4])
    storage.close()


async def test_disk_full_suspends_compaction(tmp_path: Path) -> None:
    # testMinorCompactionWithNoWritableLedgerDirs: full disks suspend both compactions...
    storage, _logs = interleaved(tmp_path)
    gc = collector(storage, FakeLedgers([1]), UPSTREAM_THRESHOLDS)
    gc.disk_checked(0.99, 0.90, 0.95)
    assert (gc.suspend_major, gc.suspend_minor) == (True, True)
    report = await gc.run_once(force=True)
    assert report.compaction is None
    # ... and a disk below the warn threshold again resumes them.
    gc.disk_checked(0.5, 0.90, 0.95)
    assert (gc.suspend_major, gc.suspend_minor) == (False, False)
    report = await gc.run_once(force=True)
    assert len(report.compacted) == 3
    storage.close()


async def test_disk_full_forces_gc_when_allowed(tmp_path: Path) -> None:
    # ...ButIsForceGCAllowWhenNoSpaceIsSet: compaction goes on, and GC is forced.
    storage, _logs = interleaved(tmp_path)
    gc = collector(
        storage, FakeLedgers([1]), UPSTREAM_THRESHOLDS, force_gc_allow_when_no_space=True
    )
    gc.disk_checked(0.99, 0.90, 0.95)
    assert (gc.force_requested, gc.suspend_major) == (True, False)
    report = await gc.run_once()
    assert report.forced
    assert len(report.compacted) == 3
    assert not gc.force_requested
    storage.close()


async def test_forced_gc_flags(tmp_path: Path) -> None:
    # testForceGarbageCollectionWhenDiskIsFull: forceMajor=false suspends major for the pass.
    storage, _logs = interleaved(tmp_path)
    gc = collector(storage, FakeLedgers([1]), UPSTREAM_THRESHOLDS)
    assert gc.trigger(force_major=False, force_minor=True)
    assert not gc.trigger()  # one forced pass at a time
    report = await gc.run_once()
    assert report.compaction is CompactionKind.MINOR
    assert not gc.force_requested
    assert gc.forced_pass_done is not None
    storage.close()


async def test_compaction_with_target_log_size(tmp_path: Path) -> None:
    # testCompactionWithFileSizeCheck: a small, fully live log counts as mostly empty.
    storage = open_storage(config(tmp_path, entry_log_per_ledger_enabled=False))
    write(storage, 1, 3, SIZE)
    storage.entry_logger.create_new_log(1)
    storage.checkpoint_blocking()
    plain = collector(storage, FakeLedgers([1]), UPSTREAM_THRESHOLDS)
    assert (await plain.run_once(force=True)).compacted == []
    sized = collector(storage, FakeLedgers([1]), UPSTREAM_THRESHOLDS, target_log_size=1 << 20)
    report = await sized.run_once(force=True)
    assert len(report.compacted) == 1
    assert report.compacted[0].entries_copied == 3
    assert_readable(storage, 1, 3, SIZE)
    storage.close()


class _CheckedStorage(BookieGcStorage):
    """Records the order of compaction's steps and checks durability at each."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.events: list[str] = []

    async def sync_entry_logs(self) -> None:
        self.events.append("sync")
        await super().sync_entry_logs()

    async def update_locations(self, moves: Sequence[Move]) -> int:
        # Every copy the index is about to point at is on disk, fsynced.
        for move in moves:
            writer = self.entry_logger.open_writer(move.new >> 32)
            assert writer is None or writer.unpersisted_bytes == writer.buffered_bytes == 0
        self.events.append("update")
        return await super().update_locations(moves)

    async def remove_entry_log(self, log_id: int) -> int:
        self.events.append("remove")
        return await super().remove_entry_log(log_id)


async def test_compaction_safety(tmp_path: Path) -> None:
    # testCompactionSafety: the index never points at copies that are not durable, and the
    # old log goes only after the index is updated. A crash right after compaction loses
    # nothing: the copies and the index both survive it.
    storage, _logs = interleaved(tmp_path)
    checked = _CheckedStorage(storage, trio.Lock())
    gc = collector(storage, FakeLedgers([1]), UPSTREAM_THRESHOLDS, max_outstanding=4)
    gc.storage = checked
    gc.compactor.storage = checked
    report = await gc.run_once(force=True)
    assert len(report.compacted) == 3
    for log_events in " ".join(checked.events).split("remove"):
        steps = log_events.split()
        assert steps == [s for pair in zip(steps[::2], steps[1::2], strict=False) for s in pair]
        assert all(
            a == "sync" and b == "update" for a, b in zip(steps[::2], steps[1::2], strict=False)
        )
    crash(storage)
    again = open_storage(config(tmp_path, entry_log_per_ledger_enabled=False))
    assert_readable(again, 1, 3 * SHARE[1], SIZE)
    again.close()


async def test_compaction_failure_keeps_the_log(tmp_path: Path) -> None:
    storage, logs = interleaved(tmp_path)

    class Failing(BookieGcStorage):
        async def sync_entry_logs(self) -> None:
            raise OSError(28, "No space left on device")

    gc = collector(storage, FakeLedgers([1]), UPSTREAM_THRESHOLDS)
    gc.compactor.storage = Failing(storage, trio.Lock())
    report = await gc.run_once(force=True)
    assert report.compacted == []
    assert all(log_exists(storage, i) for i in logs)
    assert_readable(storage, 1, 3 * SHARE[1], SIZE)
    storage.close()


async def test_a_failed_storage_compacts_nothing(tmp_path: Path) -> None:
    # No copy could be committed (that takes a checkpoint), so none is written either.
    storage, logs = interleaved(tmp_path)
    write(storage, 1, 1, SIZE)  # something for the failing checkpoint to sync
    disk = SimDisk()
    disk.add_root(tmp_path).sync_error = True
    with disk.installed(), pytest.raises(StorageFailedError):
        storage.checkpoint_blocking()  # it handed every buffer to the OS first

    def log_bytes() -> int:
        return sum(p.stat().st_size for p in tmp_path.rglob("*.log"))

    before = log_bytes()
    gc = collector(storage, FakeLedgers([1]), UPSTREAM_THRESHOLDS)
    report = await gc.run_once(force=True)
    assert report.compacted == []
    assert all(log_exists(storage, i) for i in logs)
    assert_readable(storage, 1, 3 * SHARE[1] + 1, SIZE)
    storage.close()
    assert log_bytes() == before


@pytest.mark.parametrize("per_ledger", [True, False])
async def test_reclaim_delay_is_observed_once_per_ledger(tmp_path: Path, per_ledger: bool) -> None:
    delays: list[float] = []

    class Metrics:
        def gc_run(self, seconds: float) -> None: ...
        def gc_ledgers_deleted(self, n: int) -> None: ...
        def gc_log_deleted(self, reason: str, reclaimed_bytes: int) -> None: ...
        def gc_compaction(self, kind: str) -> None: ...
        def gc_copied(self, entries: int, nbytes: int) -> None: ...
        def gc_reclaim_delay(self, seconds: float) -> None:
            delays.append(seconds)

        def gc_reclaim_failed(self) -> None: ...

    storage = open_storage(config(tmp_path, entry_log_per_ledger_enabled=per_ledger))
    for ledger_id in (1, 2):
        write(storage, ledger_id, 5)
    clock = [0.0]
    gc: GarbageCollector = collector(
        storage, FakeLedgers([1]), FORCE_BOTH, metrics=Metrics(), clock=lambda: clock[0]
    )
    await gc.run_once()  # ledger 2 deleted at t=0; its log is still active
    assert delays == []
    assert gc.ledgers_awaiting_reclaim == 1
    clock[0] = 5.0
    if per_ledger:
        storage.rotate_ledger_log(2, RotationReason.WRITE_CLOSE)
    else:
        storage.entry_logger.create_new_log(1)
    storage.checkpoint_blocking()
    clock[0] = 7.0
    await gc.run_once(force=True)
    assert delays == [7.0]
    assert gc.ledgers_awaiting_reclaim == 0
    storage.close()
