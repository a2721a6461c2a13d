"""The pool of preallocated entry logs (``entryLogPreallocationPoolSize``).

Empty log files created ahead of need, off the add path: registered unflushed (they pin
leastUnflushedLogId like upstream's preallocated log), holding no descriptor, taken oldest
first, deleted on close, and never a source of reused ids after a crash.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import threading
from collections import Counter
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.cluster.testing import (
    bookie_client,
    bookie_config,
    running_bookie,
    write_out_table,
)
from bookiesim.entrylog.format import HEADER_SIZE, log_file_name
from bookiesim.entrylog.logger import EntryLogger, RotationReason

from .entries import make_entry, upstream_entry

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

Written = dict[tuple[int, int], tuple[int, bytes]]


def dirs_of(tmp_path: Path, n: int = 1) -> list[Path]:
    return [tmp_path / f"ledgers{i}" for i in range(n)]


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def add(logger: EntryLogger, written: Written, ledger: int, entry: int, size: int = 100) -> None:
    body = make_entry(ledger, entry, random.Random(ledger * 7919 + entry).randbytes(size))
    written[ledger, entry] = (logger.add_entry(ledger, body), body)


def assert_all_readable(logger: EntryLogger, written: Written) -> None:
    for (ledger, entry), (location, body) in written.items():
        assert logger.read_entry(ledger, entry, location) == body


def log_file(logger: EntryLogger, log_id: int) -> Path:
    paths = [d / log_file_name(log_id) for d in logger.current_dirs]
    (path,) = [p for p in paths if p.exists()]
    return path


def test_pool_is_filled_on_request_and_used_oldest_first(tmp_path: Path) -> None:
    baseline = fd_count()
    logger = EntryLogger(dirs_of(tmp_path), preallocation_pool_size=8)
    assert logger.preallocation_pool_size == 8
    assert logger.log_ids() == []  # nothing is created before it is asked for
    assert logger.needs_preallocation()
    assert logger.preallocate_some(3) == 3
    assert logger.preallocate_some() == 5  # tops up to the pool size
    assert not logger.needs_preallocation()
    assert logger.preallocate_some() == 0
    assert logger.pooled_log_ids() == list(range(8))
    current = logger.current_dirs[0]
    assert (current / "lastId").read_text() == "7\n"  # one lastId write named the batch
    for log_id in range(8):
        assert (current / log_file_name(log_id)).stat().st_size == 0
    assert fd_count() == baseline  # pooled logs hold no descriptor
    assert logger.open_write_files == 0
    # Every pooled log is unflushed: the pointer stays at the oldest.
    assert logger.least_unflushed_log_id == 0
    assert logger.flushed_log_ids() == []
    with pytest.raises(ValueError, match="not flushed"):
        logger.remove_entry_log(5)
    logger._check()
    # The first new log takes pooled 0; pooled 1 becomes the (open) preallocated log.
    written: Written = {}
    add(logger, written, 10, 0)
    assert logger.current_log_id(10) == 0
    assert logger.preallocated_log_id == 1
    assert logger.pooled_log_ids() == list(range(2, 8))
    assert logger.open_write_files == 2
    assert fd_count() == baseline + 2
    for ledger in (11, 12):
        add(logger, written, ledger, 0)
    assert logger.active_logs() == {10: 0, 11: 1, 12: 2}
    logger._check()
    assert_all_readable(logger, written)
    logger.close()


def test_pooled_logs_pin_least_unflushed_like_the_preallocated_one(tmp_path: Path) -> None:
    logger = EntryLogger(dirs_of(tmp_path), preallocation_pool_size=4)
    written: Written = {}
    add(logger, written, 1, 0)  # no pool yet: log 0 and preallocated 1, made synchronously
    assert logger.preallocate_some() == 4  # 2..5
    assert logger.rotate_ledger(1, RotationReason.WRITE_CLOSE)
    logger.checkpoint()
    assert logger.least_unflushed_log_id == 1  # the preallocated log pins it
    add(logger, written, 2, 0)  # takes 1; 2 becomes the preallocated log
    assert logger.rotate_ledger(2, RotationReason.WRITE_CLOSE)
    logger.checkpoint()
    assert logger.least_unflushed_log_id == 2  # then the oldest pooled/preallocated one
    assert logger.flushed_log_ids() == [0, 1]
    for log_id in (2, 3, 4, 5):
        assert not logger.is_flushed_log_id(log_id)
    logger._check()
    logger.close()


def test_close_deletes_pooled_logs_and_restart_never_reuses_their_ids(tmp_path: Path) -> None:
    dirs = dirs_of(tmp_path, 2)
    logger = EntryLogger(dirs, preallocation_pool_size=6)
    written: Written = {}
    add(logger, written, 1, 0)
    assert logger.preallocate_some() == 6
    pooled = logger.pooled_log_ids()
    assert sorted(pooled) == list(range(2, 8))
    logger.close()
    assert logger.log_ids() == [0]  # pooled 2..7 and the preallocated 1 are gone
    again = EntryLogger(dirs, preallocation_pool_size=6)
    assert again.least_unflushed_log_id == 8
    assert again.flushed_log_ids() == [0]
    assert_all_readable(again, written)
    assert again.preallocate_some(2) == 2
    assert again.pooled_log_ids() == [8, 9]
    again._check()
    again.close()


def test_crash_with_pooled_logs_left_behind(tmp_path: Path) -> None:
    # kill -9 after a checkpoint: pooled and preallocated files stay (empty). The restart
    # treats them as logs of an earlier run (closed, flushed) and never reuses their ids.
    dirs = dirs_of(tmp_path)
    logger = EntryLogger(dirs, preallocation_pool_size=5)
    written: Written = {}
    for ledger in range(3):
        add(logger, written, ledger, 0)  # logs 0..2, preallocated 3
    assert logger.preallocate_some() == 5  # 4..8
    logger.checkpoint()
    for writer in list(logger._files.open_writers()):
        writer.close(discard_buffer=True)  # the crash: the checkpoint flushed every byte
    left = set(range(9))
    assert set(logger.log_ids()) == left
    again = EntryLogger(dirs, preallocation_pool_size=5)
    assert again.least_unflushed_log_id == 9
    assert set(again.flushed_log_ids()) == left
    assert_all_readable(again, written)
    assert again.preallocate_some() == 5
    assert again.pooled_log_ids() == [9, 10, 11, 12, 13]
    add(again, written, 7, 0)
    assert again.current_log_id(7) == 9
    again._check()
    again.close()


def test_crash_inside_a_batch_never_reuses_reserved_ids(tmp_path: Path) -> None:
    # lastId names the whole batch before any file of it exists: a crash that leaves only
    # part of the batch on disk still starts the next run after all of it.
    dirs = dirs_of(tmp_path)
    logger = EntryLogger(dirs, preallocation_pool_size=6)
    assert logger.preallocate_some() == 6  # 0..5
    current = logger.current_dirs[0]
    for log_id in (3, 4, 5):
        (current / log_file_name(log_id)).unlink()  # as if the crash came before them
    for writer in list(logger._files.open_writers()):
        writer.close(discard_buffer=True)
    again = EntryLogger(dirs, preallocation_pool_size=6)
    assert again.least_unflushed_log_id == 6
    again.add_entry(1, upstream_entry(1, 0))
    assert again.current_log_id(1) == 6
    again.close()


def test_unusable_pooled_log_is_skipped_never_overwritten(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logger = EntryLogger(dirs_of(tmp_path), preallocation_pool_size=4)
    assert logger.preallocate_some() == 4  # 0..3
    current = logger.current_dirs[0]
    (current / log_file_name(0)).unlink()  # gone
    (current / log_file_name(1)).write_bytes(b"not ours")  # not empty
    written: Written = {}
    with caplog.at_level(logging.WARNING):
        add(logger, written, 1, 0)
    assert "unusable" in caplog.text
    assert logger.current_log_id(1) == 2
    assert logger.preallocated_log_id == 3
    assert (current / log_file_name(1)).read_bytes() == b"not ours"
    logger._check()
    assert_all_readable(logger, written)
    logger.close()


def test_failed_preallocation_pauses_until_a_log_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logger = EntryLogger(dirs_of(tmp_path), preallocation_pool_size=4)
    real_mknod = os.mknod
    creations = [0]

    def full_disk(path: str, mode: int = 0o600, device: int = 0) -> None:
        creations[0] += 1
        if creations[0] > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_mknod(path, mode, device)

    monkeypatch.setattr(os, "mknod", full_disk)
    assert logger.preallocate_some() == 2  # the third creation fails; the rest is not tried
    assert creations[0] == 3
    assert logger.pooled_log_ids() == [0, 1]
    assert not logger.needs_preallocation()  # paused: no busy loop on a full disk
    logger._check()  # ids 2 and 3 were given up, not left registered
    monkeypatch.undo()
    logger.add_entry(1, upstream_entry(1, 0))  # takes 0, 1 becomes preallocated
    assert logger.needs_preallocation()  # a log was taken: try again
    assert logger.preallocate_some() == 4
    assert logger.pooled_log_ids() == [4, 5, 6, 7]
    logger._check()
    logger.close()


def test_listener_fires_once_when_the_pool_runs_low(tmp_path: Path) -> None:
    logger = EntryLogger(dirs_of(tmp_path), preallocation_pool_size=6)
    calls: list[int] = []

    def listener() -> None:
        calls.append(len(logger.pooled_log_ids()))

    logger.notify_when_preallocation_needed(listener)  # needed now: called at once
    assert calls == [0]
    assert logger.preallocate_some() == 6
    logger.notify_when_preallocation_needed(listener)
    for ledger in range(3):
        logger.add_entry(ledger, upstream_entry(ledger, 0))
    # Ledger 0 took pooled 0 and opened pooled 1 as the preallocated log (4 left); ledger 1
    # took that and opened 2 (3 left = half): the listener ran once, then was disarmed.
    assert calls == [0, 3]
    assert logger.preallocate_some() == 4
    logger.close()
    logger.notify_when_preallocation_needed(listener)  # closed: nothing is needed any more
    assert calls == [0, 3]


def test_owner_uses_reserved_ids_while_the_pool_is_being_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pool is empty and a refill is under way (ids 0..3 reserved, lastId says 3): an add
    # that needs a log now creates one under a reserved id itself, without a lastId write,
    # and the refill carries on with the ids left.
    logger = EntryLogger(dirs_of(tmp_path), preallocation_pool_size=4)
    current = logger.current_dirs[0]
    real_mknod = os.mknod
    real_open = os.open
    last_id_writes = [0]
    calls = [0]

    def counting_open(path: str, flags: int, mode: int = 0o777) -> int:
        if str(path).endswith("lastId"):
            last_id_writes[0] += 1
        return real_open(path, flags, mode)

    def racing_mknod(path: str, mode: int = 0o600, device: int = 0) -> None:
        calls[0] += 1
        if calls[0] == 1:  # the owner thread needs two logs while the first is being made
            logger.add_entry(1, upstream_entry(1, 0))
        real_mknod(path, mode, device)

    monkeypatch.setattr(os, "open", counting_open)
    monkeypatch.setattr(os, "mknod", racing_mknod)
    created = logger.preallocate_some()
    monkeypatch.undo()
    assert last_id_writes[0] == 1  # the batch's only one
    assert (current / "lastId").read_text() == "3\n"
    assert logger.current_log_id(1) == 1  # ids 1 and 2 went to the add, 0 and 3 to the pool
    assert logger.preallocated_log_id == 2
    assert created == 2
    assert logger.pooled_log_ids() == [0, 3]
    logger._check()
    logger.close()


def test_churn_past_a_dry_pool_writes_last_id_once_per_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nobody refills the pool (as when churn outruns its worker): every new log is created
    # on the owner thread, yet the ids come in batches of the pool's size, one lastId write
    # each, never reused.
    logger = EntryLogger(dirs_of(tmp_path), max_active_logs=2, preallocation_pool_size=8)
    real_open = os.open
    last_id_writes = [0]

    def counting_open(path: str, flags: int, mode: int = 0o777) -> int:
        if str(path).endswith("lastId"):
            last_id_writes[0] += 1
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", counting_open)
    written: Written = {}
    for ledger in range(40):  # each evicts a log and needs a new one
        add(logger, written, ledger, 0)
    monkeypatch.undo()
    log_ids = [written[ledger, 0][0] >> 32 for ledger in range(40)]
    assert len(set(log_ids)) == 40
    assert last_id_writes[0] <= 41 // 8 + 1
    assert_all_readable(logger, written)
    logger._check()
    logger.close()


def test_existing_file_is_given_up_by_the_pool(tmp_path: Path) -> None:
    # With one ledger dir the pool does not stat ahead: creating exclusively is the check.
    logger = EntryLogger(dirs_of(tmp_path), preallocation_pool_size=4)
    stray = logger.current_dirs[0] / log_file_name(2)
    stray.write_bytes(b"not ours")
    assert logger.preallocate_some() == 3
    assert logger.pooled_log_ids() == [0, 1, 3]
    assert stray.read_bytes() == b"not ours"
    logger._check()
    assert logger.preallocate_some() == 1
    assert logger.pooled_log_ids() == [0, 1, 3, 4]
    logger.close()
    assert stray.read_bytes() == b"not ours"


def test_preallocation_off_means_no_pool(tmp_path: Path) -> None:
    logger = EntryLogger(dirs_of(tmp_path), preallocation=False, preallocation_pool_size=8)
    assert logger.preallocation_pool_size == 0
    assert not logger.needs_preallocation()
    assert logger.preallocate_some() == 0
    logger.add_entry(1, upstream_entry(1, 0))
    assert logger.log_ids() == [0]
    logger.close()


def test_close_during_a_batch_removes_what_it_creates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker creates files without the lock; a close() in between (here from inside
    # the third creation, deterministically) must leave no pooled file behind.
    logger = EntryLogger(dirs_of(tmp_path), preallocation_pool_size=5)
    real_mknod = os.mknod
    creations = [0]

    def closing_mknod(path: str, mode: int = 0o600, device: int = 0) -> None:
        creations[0] += 1
        if creations[0] == 3:
            logger.close()
        real_mknod(path, mode, device)

    monkeypatch.setattr(os, "mknod", closing_mknod)
    assert logger.preallocate_some() == 2
    monkeypatch.undo()
    assert logger.log_ids() == []
    assert logger.pooled_log_ids() == []
    assert (logger.current_dirs[0] / "lastId").read_text() == "4\n"


def test_pool_spreads_over_dirs_and_logs_stay_balanced(tmp_path: Path) -> None:
    n = 3
    logger = EntryLogger(dirs_of(tmp_path, n), preallocation_pool_size=9)
    assert logger.preallocate_some() == 9
    per_dir = Counter(log_file(logger, i).parent for i in logger.pooled_log_ids())
    assert sorted(per_dir.values()) == [3, 3, 3]
    for ledger in range(n * 4):
        logger.create_new_log(ledger)
        loads = Counter(logger.log_path(i).parent for i in logger.active_logs().values())
        assert max(loads.values()) - min(loads.get(d, 0) for d in logger.current_dirs) <= 1
        logger.preallocate_some()
        logger._check()
    logger.close()


def test_fd_bound_under_churn_with_a_background_refill(tmp_path: Path) -> None:
    # 2,000 ledgers through 50 active logs while a thread keeps a pool of 64 full, with
    # checkpoints: descriptors stay within active + the preallocated log + the one a
    # creation in flight holds, ids are unique, everything reads back.
    logger = EntryLogger(dirs_of(tmp_path, 2), max_active_logs=50, preallocation_pool_size=64)
    baseline = fd_count()
    wake = threading.Event()
    stop = threading.Event()
    failures: list[BaseException] = []
    created = [0]

    def refill() -> None:
        try:
            while not stop.is_set():
                while logger.needs_preallocation() and not stop.is_set():
                    created[0] += logger.preallocate_some()
                wake.clear()
                logger.notify_when_preallocation_needed(wake.set)
                wake.wait(0.01)
        except BaseException as e:  # pragma: no cover - reported below
            failures.append(e)

    worker = threading.Thread(target=refill)
    worker.start()
    written: Written = {}
    seen_logs: set[int] = set()
    rng = random.Random(32)
    try:
        order = list(range(2000)) + [rng.randrange(2000) for _ in range(2000)]
        entries: Counter[int] = Counter()
        for step, ledger in enumerate(order):
            add(logger, written, ledger, entries[ledger], size=rng.randrange(16, 300))
            entries[ledger] += 1
            log_id = logger.current_log_id(ledger)
            assert log_id is not None
            seen_logs.add(log_id)
            assert fd_count() <= baseline + 50 + 1 + 1
            if step % 700 == 699:
                logger.checkpoint()
    finally:
        stop.set()
        wake.set()
        worker.join()
    assert not failures
    assert created[0] > 100  # the pool really served the churn
    assert logger.rotations[RotationReason.MAX_ACTIVE] > 3000
    logger._check()
    assert_all_readable(logger, written)
    logger.checkpoint()
    ids = logger.log_ids()
    assert len(ids) == len(set(ids))
    logger.close()
    # Every log that held entries is still there; only unused ones were deleted.
    assert seen_logs <= set(logger.log_ids())
    assert fd_count() == baseline


async def eventually(condition: Callable[[], bool]) -> None:
    # Polls (10 s at most): the pool is filled by a worker thread, which tells the test nothing.
    for _ in range(1000):
        if condition():
            return
        await trio.sleep(0.01)
    raise AssertionError("condition not met in time")


def _logs_on_disk(root: Path) -> set[int]:
    return {int(p.name[:-4], 16) for p in (root / "ledgers" / "current").glob("*.log")}


async def test_bookie_keeps_the_pool_filled_and_removes_it_on_shutdown(tmp_path: Path) -> None:
    # The bookie's background task (bookie.py, _preallocation_loop) in a real bookie.
    cfg = bookie_config(
        tmp_path, maximum_number_of_active_entry_logs=5, entry_log_preallocation_pool_size=8
    )
    async with running_bookie(cfg) as svc, bookie_client(svc) as client:
        logger = svc.bookie.storage.entry_logger
        await eventually(lambda: len(logger.pooled_log_ids()) == 8)
        first = set(logger.pooled_log_ids())
        for ledger in range(1, 31):  # 30 new logs: more than the pool holds
            response = await client.add(ledger, 0, b"entry %d" % ledger)
            assert response.status == 0
        await write_out_table(svc)  # the sorted storage takes its logs at the flush
        # Refilled whenever it fell to half: it holds newer logs, at least half of its size.
        await eventually(lambda: len(logger.pooled_log_ids()) >= 4)
        pooled = set(logger.pooled_log_ids())
        assert min(pooled) > max(first)
        assert logger.rotations[RotationReason.MAX_ACTIVE] >= 25
        logger._check()
    assert not pooled & _logs_on_disk(tmp_path)  # deleted at shutdown


def test_writer_refuses_to_open_a_log_with_data(tmp_path: Path) -> None:
    from bookiesim.entrylog.writer import EntryLogWriter

    with EntryLogWriter(tmp_path, 1) as w:
        w.append(upstream_entry(1, 0))
    with pytest.raises(FileExistsError, match="not a preallocated log"):
        EntryLogWriter(tmp_path, 1, create=False)
    (tmp_path / log_file_name(2)).touch()
    with EntryLogWriter(tmp_path, 2, create=False) as w:
        assert w.position == HEADER_SIZE
    with pytest.raises(FileNotFoundError):
        EntryLogWriter(tmp_path, 3, create=False)
