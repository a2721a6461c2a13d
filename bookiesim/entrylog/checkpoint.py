"""One checkpoint of the entry logs: the fsync pass, the only part that runs off the owner thread.

The bookie's add path and the checkpoint share the writers, and the fsyncs take
milliseconds, so a checkpoint is split where threads change::

    plan = logger.prepare_checkpoint()           # owner thread: buffers -> OS, fix the list
    await trio.to_thread.run_sync(plan.sync)     # worker thread: fsyncs only
    logger.complete_checkpoint(plan)             # owner thread: retire rotated logs

:meth:`~bookiesim.entrylog.logger.EntryLogger.prepare_checkpoint` hands every active and
rotated log's buffer to the OS and records which logs to fsync. :meth:`CheckpointPlan.sync`
fsyncs them (and the ledger dirs that gained files, so that a new log's name is as durable
as its bytes); adds may go on meanwhile, rotating logs or closing descriptors: a writer is
only closed under ``LogFiles.io_lock``, under which the sync pass duplicates its descriptor
(and fsyncs the duplicate after releasing the lock, so an add never waits for an fsync), and
a writer found closed is fsynced by path instead.
:meth:`~bookiesim.entrylog.logger.EntryLogger.complete_checkpoint` records the persisted
positions, and moves every log that was rotated when the plan was made to FLUSHED
(``LogFiles.mark_flushed``) — the only way leastUnflushedLogId moves (§4): past every
leading flushed id. Active logs are fsynced but stay unflushed until rotated, so in
per-ledger mode the active log with the smallest id (or the preallocated one) pins the
pointer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from bookiesim.entrylog import writeback

if TYPE_CHECKING:
    import threading
    from collections.abc import Sequence

    from bookiesim.entrylog.log_files import LogFiles
    from bookiesim.entrylog.writer import EntryLogWriter

__all__ = ["CheckpointPlan", "checkpoint_needed", "make_plan"]


def make_plan(files: LogFiles, dirs_synced: Sequence[int]) -> CheckpointPlan:
    """The owner thread's step: every open log's buffer to the OS, then the plan of what
    to fsync: the logs holding bytes not fsynced, the rotated logs, and the ledger dirs whose
    file count moved past ``dirs_synced`` (``LogFiles.dir_creations`` at the last
    checkpoint)."""
    items: list[tuple[EntryLogWriter | None, str]] = []
    for writer in files.writers_to_flush():
        writer.flush()
        if writer.unpersisted_bytes:
            items.append((writer, writer.fspath))
    records = files.rotated_logs()
    rotated = [record.log_id for record in records]
    items.extend((None, record.fspath) for record in records if record.writer is None)
    marks = list(files.dir_creations)
    pairs = zip(files.current_dirs, marks, dirs_synced, strict=True)
    dirs = [d for d, mark, synced in pairs if mark != synced]
    return CheckpointPlan(items, rotated, dirs, marks, files.io_lock)


def checkpoint_needed(files: LogFiles, dirs_synced: Sequence[int]) -> bool:
    """Whether :func:`make_plan` would plan anything: an open log holding bytes not fsynced
    (buffered, deferred or handed to the OS), a rotated log waiting to be flushed, or a
    ledger dir that gained a file. Read from the state the plan is made from, so an idle
    bookie can skip its checkpoint on this word."""
    if files.rotated_count:
        return True
    for writer in files.writers_to_flush():
        if writer.unpersisted_bytes:
            return True
    return list(files.dir_creations) != list(dirs_synced)


class CheckpointPlan:
    """The logs one checkpoint makes durable, fixed on the owner thread.

    :meth:`sync` is the only method that may run on another thread. A plan is used once;
    one that is abandoned (its sync failed, or was never run) changes nothing and the next
    checkpoint covers its logs again.
    """

    __slots__ = ("_dir_marks", "_dirs", "_items", "_lock", "_positions", "_rotated", "_synced")

    def __init__(
        self,
        items: list[tuple[EntryLogWriter | None, str]],
        rotated: list[int],
        dirs: list[Path],
        dir_marks: list[int],
        lock: threading.Lock,
    ) -> None:
        self._items = items
        self._rotated = rotated
        self._dirs = dirs
        self._dir_marks = dir_marks
        self._lock = lock
        self._positions: list[tuple[EntryLogWriter, int]] = []
        self._synced = False

    @property
    def synced(self) -> bool:
        """True once :meth:`sync` has completed without error."""
        return self._synced

    @property
    def empty(self) -> bool:
        """True when :meth:`sync` would fsync nothing and no rotated log awaits it: an idle
        bookie's checkpoint, which need not wake a worker thread."""
        return not (self._items or self._rotated or self._dirs)

    @property
    def paths(self) -> list[Path]:
        """The log files this plan fsyncs."""
        return [Path(path) for _, path in self._items]

    @property
    def rotated_log_ids(self) -> list[int]:
        """Rotated logs that become flushed when the plan completes."""
        return list(self._rotated)

    @property
    def dir_marks(self) -> list[int]:
        """Files created per ledger dir when the plan was made (``LogFiles.dir_creations``)."""
        return list(self._dir_marks)

    @property
    def persisted_positions(self) -> list[tuple[EntryLogWriter, int]]:
        """(open writer, position its fsync made durable), once :meth:`sync` succeeded."""
        return list(self._positions)

    def sync(self) -> None:
        """fsync every planned log and every ledger dir that gained a file. Blocking.

        Safe in a worker thread while the owner keeps adding: the io lock is held only to
        duplicate an open writer's descriptor, and the duplicate is fsynced without it, so
        the owner never waits for an fsync to close a descriptor.
        """
        if self._synced:
            raise RuntimeError("this checkpoint plan was already synced")
        if len(self._items) >= writeback.SYNCFS_MIN_FILES:
            self._sync_file_systems()
        else:
            self._sync_files()
        self._synced = True

    def _sync_files(self) -> None:
        positions = self._positions
        for writer, path in self._items:
            if writer is not None:
                with self._lock:
                    dup = None if writer.closed else writer.dup_for_sync()
                if dup is not None:
                    fd, position = dup
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    positions.append((writer, position))
                    continue
            # Closed since the plan was made (rotated meanwhile): every byte it held reached
            # the OS before its descriptor was closed, so an fsync through a new one covers it.
            # (Gone meanwhile: only a flushed log may be deleted, by GC, after an overlapping
            # checkpoint flushed it; nothing of it is left to persist.)
            writeback.fsync_path(path)
        for d in self._dirs:
            writeback.fsync_path(d, directory=True)

    def _sync_file_systems(self) -> None:
        # Each open log's position first: what reached the OS by then is what the syncfs
        # after it makes durable (a closed log's bytes all reached the OS at its close).
        positions = self._positions
        with self._lock:
            for writer, _ in self._items:
                if writer is not None and not writer.closed:
                    positions.append((writer, writer.os_position))
        writeback.sync_file_systems(
            {*map(str, self._dirs), *(os.path.dirname(p) for _, p in self._items)}
        )
