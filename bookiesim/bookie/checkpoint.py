"""Upstream's SyncThread: the periodic checkpoint (reference §6.4).

A checkpoint takes each journal's synced mark *first*, makes the ledger storage durable
(entry logs, then the index), and only then persists the marks as ``lastMark`` (``lastMark.<i>``
with several journals) in every ledger directory and deletes each journal's files wholly
before its mark (keeping ``maxBackupJournals``). So no mark runs ahead of what storage
holds, and a restart replays each journal from its own. The bookie runs one per process,
every ``flushInterval`` (the ELPL schedule), on its trio thread; files are written off it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from bookiesim.bookie.blocking import run_blocking
from bookiesim.bookie.errors import StorageFailedError

if TYPE_CHECKING:
    from collections.abc import Callable

    from bookiesim.bookie.config import BookieConfig
    from bookiesim.bookie.journal.journals import Journals
    from bookiesim.bookie.journal.log_mark import LogMark
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
        journals: Journals,
        metrics: BookieMetrics,
        *,
        on_storage_failed: Callable[[OSError], None],
        on_write_failed: Callable[[OSError], None] = lambda exc: None,
    ) -> None:
        self._cfg = cfg
        self._storage = storage
        self._journals = journals
        self._metrics = metrics
        self._on_storage_failed = on_storage_failed
        self._on_write_failed = on_write_failed
        self.lock = trio.Lock()
        """Held for a whole checkpoint; GC's compaction takes it too, so that it never
        deletes a log a checkpoint is flushing."""
        self.persisted_marks: tuple[LogMark, ...] | None = None
        """The marks the last checkpoint of this process wrote to every ledger dir."""

    async def checkpoint(self) -> tuple[LogMark, ...]:
        """Marks first, storage durable, then persist the marks; returns them. A write
        that fails (not an fsync) is also told to ``on_write_failed`` before it propagates:
        for lack of space the bookie turns read-only (upstream: allDisksFull)."""
        try:
            return await self._checkpoint()
        except StorageFailedError:
            raise
        except OSError as exc:
            self._on_write_failed(exc)
            raise

    async def _checkpoint(self) -> tuple[LogMark, ...]:
        marks = self._journals.synced_marks
        if marks == self.persisted_marks and not self._storage.needs_checkpoint():
            # An idle bookie, every flushInterval: no journal write since the marks on disk,
            # and storage holds nothing to make durable or close (its own state says so, the
            # state the checkpoint would plan from). The whole checkpoint would change
            # nothing; a simulated cluster idle for hours runs thousands of them.
            self._metrics.checkpoint(0.0)
            return marks
        async with self.lock:
            started = trio.current_time()
            marks = self._journals.synced_marks
            try:
                await self._storage.checkpoint()
            except StorageFailedError as exc:
                self._on_storage_failed(exc)
                raise
            # With no journal write since the last checkpoint (an idle bookie, every
            # flushInterval), the same marks are on disk already and no journal became
            # deletable: rewriting and fsyncing lastMark and listing the journal directories
            # would change nothing.
            if marks != self.persisted_marks:
                cfg = self._cfg
                journals = self._journals
                await run_blocking(journals.persist_marks, cfg.ledger_directories, marks)
                await run_blocking(
                    journals.delete_old,
                    cfg.effective_journal_directories,
                    marks,
                    cfg.journal_max_backups,
                )
                self.persisted_marks = marks
            self._metrics.checkpoint(trio.current_time() - started)
            return marks

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
