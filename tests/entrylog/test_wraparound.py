"""Entry log ids wrapping around (2**31 - 1 -> 0) and leastUnflushedLogId.

Found in review: at the wrap the pointer started at ``recovered_last_id + 1 = 2**31`` and the
new ids 0, 1, ... were below it, so they were never registered and read as flushed — GC
could have deleted live logs. Ids are now tracked in allocation order across a wrap (see
``bookiesim.entrylog.recent_logs``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bookiesim.entrylog.format import MAX_LOG_ID, log_file_name
from bookiesim.entrylog.logger import EntryLogger, RotationReason

from .entries import upstream_entry

if TYPE_CHECKING:
    from pathlib import Path


def start_at(tmp_path: Path, last_id: int) -> list[Path]:
    """One ledger dir whose ``lastId`` says ``last_id``."""
    current = tmp_path / "ledgers" / "current"
    current.mkdir(parents=True)
    (current / "lastId").write_text(f"{last_id:x}\n")
    return [tmp_path / "ledgers"]


def test_logs_after_a_wrap_at_startup_are_not_flushed(tmp_path: Path) -> None:
    # lastId = 2**31 - 1: the first log of this run is 0, while the pointer starts at 2**31.
    logger = EntryLogger(start_at(tmp_path, MAX_LOG_ID), preallocation=False)
    logger.add_entry(1, upstream_entry(1, 0))
    assert logger.current_log_id(1) == 0
    assert not logger.is_flushed_log_id(0)
    assert logger.flushed_log_ids() == []
    logger.checkpoint()
    assert not logger.is_flushed_log_id(0)  # active logs stay unflushed
    assert logger.flushed_log_ids() == []
    logger._check()
    assert logger.rotate_ledger(1, RotationReason.WRITE_CLOSE)
    assert not logger.is_flushed_log_id(0)  # rotated, not yet checkpointed
    logger.checkpoint()
    assert logger.is_flushed_log_id(0)
    assert logger.flushed_log_ids() == [0]
    assert logger.least_unflushed_log_id == 1
    logger._check()
    logger.close()


def test_logs_across_a_wrap_during_a_run(tmp_path: Path) -> None:
    # Logs 2**31 - 2, 2**31 - 1, 0, 1 (preallocated): whatever their numeric order, only
    # rotated and checkpointed logs are flushed, and the pointer follows allocation order.
    for upstream in (False, True):
        logger = EntryLogger(
            start_at(tmp_path / str(upstream), MAX_LOG_ID - 2), upstream_behaviour=upstream
        )
        for ledger in (1, 2, 3):
            logger.add_entry(ledger, upstream_entry(ledger, 0))
        assert logger.active_logs() == {1: MAX_LOG_ID - 1, 2: MAX_LOG_ID, 3: 0}
        assert logger.preallocated_log_id == 1
        assert logger.least_unflushed_log_id == MAX_LOG_ID - 1
        for log_id in (MAX_LOG_ID - 1, MAX_LOG_ID, 0, 1):
            assert not logger.is_flushed_log_id(log_id), log_id
        assert logger.flushed_log_ids() == []
        # The log after the wrap goes first: the pointer stays in the old round.
        assert logger.rotate_ledger(3, RotationReason.SIZE)
        logger.checkpoint()
        assert logger.is_flushed_log_id(0)
        assert not logger.is_flushed_log_id(MAX_LOG_ID - 1)
        assert logger.least_unflushed_log_id == MAX_LOG_ID - 1
        assert logger.flushed_log_ids() == [0]  # below the pointer too, so upstream GC sees it
        logger._check()
        # The old round drains: the pointer moves on to the new round, numerically down.
        assert logger.rotate_ledger(1, RotationReason.SIZE)
        assert logger.rotate_ledger(2, RotationReason.SIZE)
        logger.checkpoint()
        assert logger.least_unflushed_log_id == 1  # the preallocated log 1 pins it
        for log_id in (MAX_LOG_ID - 1, MAX_LOG_ID, 0):
            assert logger.is_flushed_log_id(log_id), log_id
        assert not logger.is_flushed_log_id(1)
        # Upstream GC only sees ids below the pointer: none of the old round any more.
        expected = [0] if upstream else [0, MAX_LOG_ID - 1, MAX_LOG_ID]
        assert logger.flushed_log_ids() == expected
        logger._check()
        logger.add_entry(4, upstream_entry(4, 0))
        assert logger.current_log_id(4) == 1
        assert not logger.is_flushed_log_id(1)
        assert not logger.is_flushed_log_id(2)  # preallocated now
        logger._check()
        logger.close()


def test_restart_after_a_wrap_counts_the_old_high_ids_as_flushed(tmp_path: Path) -> None:
    # An earlier run wrapped: its logs are 2**31 - 2, 2**31 - 1, 0, 1 and lastId says 1.
    # They are all closed files of an earlier run, so GC may have them; new logs start at 2.
    dirs = start_at(tmp_path, 1)
    current = dirs[0] / "current"
    for log_id in (MAX_LOG_ID - 1, MAX_LOG_ID, 0, 1):
        (current / log_file_name(log_id)).touch()
    logger = EntryLogger(dirs, preallocation=False)
    assert logger.least_unflushed_log_id == 2
    assert logger.flushed_log_ids() == [0, 1, MAX_LOG_ID - 1, MAX_LOG_ID]
    logger.add_entry(7, upstream_entry(7, 0))
    assert logger.current_log_id(7) == 2
    assert logger.flushed_log_ids() == [0, 1, MAX_LOG_ID - 1, MAX_LOG_ID]
    assert not logger.is_flushed_log_id(2)
    logger._check()
    logger.close()
