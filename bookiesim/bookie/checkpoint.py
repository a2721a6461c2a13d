"""Upstream's SyncThread: the periodic checkpoint (reference §6.4).

A checkpoint takes the journal's synced mark *first*, makes the ledger storage durable
(entry logs, then the index), and only then persists the mark as ``lastMark`` in every
ledger directory and deletes the journals wholly before it (keeping ``maxBackupJournals``).
So ``lastMark`` never runs ahead of what storage holds, and a restart replays the journal
from it. The bookie runs one per process, every ``flushInterval`` (the ELPL schedule), on
its trio thread; files are written off it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from bookiesim.bookie.blocking import run_blocking
from bookiesim.bookie.errors import StorageFailedError
from bookiesim.bookie.journal.files import delete_old_journals
from bookiesim.bookie.journal.log_mark import LogMark, write_last_mark

if TYPE_CHECKING:
    from collections.abc import Callable

    from bookiesim.bookie.config import BookieConfig
    from bookiesim.bookie.journal.service import JournalService
    from bookiesim.bookie.ledger_storage import LedgerStorage
    from bookiesim.bookie.metrics import BookieMetrics

__all__ = ["SyncThread"]

log = logging.getLogger(__name__)


class SyncThread:
    """Checkpoints on demand (:meth:`checkpoint`) and on a timer (:meth:`run`)."""

    def __init__(
        self,
        cfg: BookieConfig,
        storage: LedgerStorage,
        journal: JournalService,
        metrics: BookieMetrics,
        *,
        on_storage_failed: Callable[[OSError], None],
        on_write_failed: Callable[[OSError], None] = lambda exc: None,
    ) -> None:
        self._cfg = cfg
        self._storage = storage
        self._journal = journal
        self._metrics = metrics
        self._on_storage_failed = on_storage_failed
        self._on_write_failed = on_write_failed
        self.lock = trio.Lock()
        """Held for a whole checkpoint; GC's compaction takes it too, so that it never
        deletes a log a checkpoint is flushing."""
        self.persisted_mark: LogMark | None = None
        """The mark the last checkpoint of this process wrote to every ledger dir."""

    async def checkpoint(self) -> LogMark:
        """Mark first, storage durable, then persist the mark; returns the mark. A write
        that fails (not an fsync) is also told to ``on_write_failed`` before it propagates:
        for lack of space the bookie turns read-only (upstream: allDisksFull)."""
        try:
            return await self._checkpoint()
        except StorageFailedError:
            raise
        except OSError as exc:
            self._on_write_failed(exc)
            raise

    async def _checkpoint(self) -> LogMark:
        mark = self._journal.synced_mark
        if mark == self.persisted_mark and not self._storage.needs_checkpoint():
            # An idle bookie, every flushInterval: no journal write since the mark on disk,
            # and storage holds nothing to make durable or close (its own state says so, the
            # state the checkpoint would plan from). The whole checkpoint would change
            # nothing; a simulated cluster idle for hours runs thousands of them.
            self._metrics.checkpoint(0.0)
            return mark
        async with self.lock:
            started = trio.current_time()
            mark = self._journal.synced_mark
            try:
                await self._storage.checkpoint()
            except StorageFailedError as exc:
                self._on_storage_failed(exc)
                raise
            # With no journal write since the last checkpoint (an idle bookie, every
            # flushInterval), the same mark is on disk already and no journal became
            # deletable: rewriting and fsyncing lastMark and listing the journal directory
            # would change nothing.
            if mark != self.persisted_mark:
                cfg = self._cfg
                await run_blocking(write_last_mark, cfg.ledger_directories, mark)
                await run_blocking(
                    delete_old_journals,
                    cfg.effective_journal_directories[0],
                    mark,
                    cfg.journal_max_backups,
                )
                self.persisted_mark = mark
            self._metrics.checkpoint(trio.current_time() - started)
            return mark

    async def run(self) -> None:
        """Checkpoint every ``flushInterval`` until cancelled, or until storage fails."""
        interval = self._cfg.flush_interval / 1000
        while True:
            await trio.sleep(interval)
            try:
                await self.checkpoint()
            except StorageFailedError as exc:
                # An fsync failed: a retry could succeed with the data gone (see
                # ledger_storage), so no later mark may be persisted by this process.
                log.error("checkpoint failed; no more checkpoints until restart: %s", exc)
                return
            except OSError as exc:
                # A write to the OS failed (a full disk): nothing was claimed durable, and
                # what was not written stays in memory. Upstream logs and retries next
                # period; the mark is not persisted, so nothing acknowledged is at risk.
                log.error("checkpoint failed, will retry: %s", exc)
