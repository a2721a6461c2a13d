"""GC's incremental bookkeeping: an idle pass asks only about what may have changed, and
finds everything a full rescan would.

* ``flushed_log_ids(skip=...)`` leaves tracked logs out before the flushed test;
* ``_reclaim`` asks only about ledgers deleted locally since the last reclaim
  (``LedgerIndex.deleted_since``), and checks every ledger when that is unknown;
* compaction candidates are recomputed only when a tracked log's usage may have changed.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from bookiesim.entrylog.logger import RotationReason
from bookiesim.entrylog.metadata import EntryLogMetadata
from bookiesim.gc.policy import CompactionSettings
from bookiesim.gc.usage import EntryLogUsage

from .helpers import FakeLedgers, collector, config, crash, open_storage, write

if TYPE_CHECKING:
    from pathlib import Path

    from bookiesim.bookie.ledger_storage import LedgerStorage

NO_COMPACTION = CompactionSettings(
    minor_threshold=0.0,
    minor_interval=0,
    minor_max_time=None,
    major_threshold=0.0,
    major_interval=0,
    major_max_time=None,
    force_allow=True,
)


def closed_ledgers(storage: LedgerStorage, ledger_ids: tuple[int, ...]) -> dict[int, int]:
    """Five entries in each ledger, every log write-closed and flushed; ledger -> its log."""
    for ledger_id in ledger_ids:
        write(storage, ledger_id, 5)
    logs = storage.entry_logger.active_logs()
    for ledger_id in ledger_ids:
        storage.rotate_ledger_log(ledger_id, RotationReason.WRITE_CLOSE)
    storage.checkpoint_blocking()
    return logs


async def test_flushed_log_ids_skip_is_only_a_filter(tmp_path: Path) -> None:
    for upstream in (False, True):
        storage = open_storage(config(tmp_path / str(upstream), upstream_behaviour=upstream))
        for ledger_id in (1, 2, 3, 4):
            write(storage, ledger_id, 3)
        for ledger_id in (1, 3):
            storage.rotate_ledger_log(ledger_id, RotationReason.WRITE_CLOSE)
        storage.checkpoint_blocking()
        logger = storage.entry_logger
        every = logger.flushed_log_ids()
        for skip in ([], every[:1], every, [*logger.log_ids(), 999]):
            assert logger.flushed_log_ids(skip) == [i for i in every if i not in skip]
        storage.close()


async def test_a_log_flushed_after_a_pass_is_extracted_on_the_next(tmp_path: Path) -> None:
    storage = open_storage(config(tmp_path))
    for ledger_id in (1, 2):
        write(storage, ledger_id, 5)
    logs = storage.entry_logger.active_logs()
    storage.rotate_ledger_log(2, RotationReason.WRITE_CLOSE)
    storage.checkpoint_blocking()
    gc = collector(storage, FakeLedgers([1, 2]), NO_COMPACTION)
    assert (await gc.run_once()).logs_extracted == 1
    assert logs[2] in gc.usage
    assert logs[1] not in gc.usage  # still being written
    assert (await gc.run_once()).logs_extracted == 0  # nothing new
    storage.rotate_ledger_log(1, RotationReason.EXPIRY)
    storage.checkpoint_blocking()
    assert (await gc.run_once()).logs_extracted == 1
    assert logs[1] in gc.usage
    gc._check()
    storage.close()


async def test_ledgers_deleted_between_passes_are_reclaimed(tmp_path: Path) -> None:
    storage = open_storage(config(tmp_path))
    logs = closed_ledgers(storage, (1, 2, 3))
    ledgers = FakeLedgers([1, 2, 3])
    gc = collector(storage, ledgers, NO_COMPACTION)
    await gc.run_once()
    assert all(logs[i] in gc.usage for i in (1, 2, 3))
    # Deleted in the metadata store between passes: GC's own deletion.
    ledgers.ids.discard(2)
    report = await gc.run_once()
    assert report.ledgers_deleted == [2]
    assert report.logs_deleted == [logs[2]]
    # Deleted locally by someone else (not this collector) between passes.
    storage.delete_ledger(3)
    report = await gc.run_once()
    assert report.logs_deleted == [logs[3]]
    assert logs[1] in gc.usage
    gc._check()
    storage.close()


async def test_unknown_deletion_history_checks_every_ledger(tmp_path: Path) -> None:
    storage = open_storage(config(tmp_path))
    for ledger_id in (1, 2, 3, 4):
        write(storage, ledger_id, 5)
        storage.rotate_ledger_log(ledger_id, RotationReason.WRITE_CLOSE)
    logs = dict(enumerate(storage.entry_logger.log_ids(), 1))
    storage.checkpoint_blocking()
    gc = collector(storage, FakeLedgers([1, 2, 3, 4]), NO_COMPACTION)
    await gc.run_once()
    assert len(gc.usage) == 4
    index = storage.index
    index._recent_deletions = deque(index._recent_deletions, maxlen=1)
    cursor = index.deletion_cursor()
    storage.delete_ledger(2)
    storage.delete_ledger(3)  # pushes 2 out of the history
    assert index.deleted_since(cursor) is None
    assert index.deleted_since((cursor[0] + 10_000, cursor[1])) is None  # another index's
    report = await gc.run_once()
    assert sorted(report.logs_deleted) == sorted([logs[2], logs[3]])
    assert len(gc.usage) == 2
    gc._check()
    storage.close()


async def test_nothing_is_skipped_after_a_restart(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    storage = open_storage(cfg)
    logs = closed_ledgers(storage, (1, 2, 3))
    ledgers = FakeLedgers([1, 2, 3])
    gc = collector(storage, ledgers, NO_COMPACTION)
    await gc.run_once()
    assert len(gc.usage) == 3
    crash(storage)
    # While the bookie is down, ledger 1 goes from the store; a new process, a new GC.
    ledgers.ids.discard(1)
    storage = open_storage(cfg)
    assert storage.index.deletion_cursor()[1] == 0
    gc = collector(storage, ledgers, NO_COMPACTION)
    report = await gc.run_once()
    assert report.ledgers_deleted == [1]
    assert logs[1] in report.logs_deleted  # deleted as it is extracted
    assert logs[2] in gc.usage
    assert logs[3] in gc.usage
    storage.delete_ledger(2)  # and the new GC's cursor covers later deletions
    report = await gc.run_once()
    assert report.logs_deleted == [logs[2]]
    gc._check()
    storage.close()


def test_compaction_candidates_follow_every_change() -> None:
    usage = EntryLogUsage()
    usage.add(EntryLogMetadata.from_ledger_sizes(1, {10: 100, 11: 900}))
    usage.add(EntryLogMetadata.from_ledger_sizes(2, {12: 500, 13: 500}))
    assert usage.candidates(0.5) == []
    assert usage.candidates(0.5) == []  # from the cache
    live = {10, 11, 12}
    usage.remove_deleted_ledgers(live.__contains__, [13])  # log 2 at 50 %
    assert usage.candidates(0.6) == [2]
    assert usage.candidates(0.5) == []
    live.discard(11)  # log 1 at 10 %
    usage.remove_deleted_ledgers(live.__contains__)
    assert usage.candidates(0.5) == [1]
    usage.target_size = 10_000  # both far below the target now
    assert usage.candidates(0.5) == [1, 2]
    usage.forget(1)
    assert usage.candidates(0.5) == [2]
    usage.add(EntryLogMetadata.from_ledger_sizes(3, {14: 10}))
    assert usage.candidates(0.5) == [2, 3]
    usage._check()
