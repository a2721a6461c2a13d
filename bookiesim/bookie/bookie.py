"""The bookie (upstream's BookieImpl): wiring of its components, its loops and the add path.

The components sit in their own modules, named as upstream names them (reference §6, §7):
:class:`~bookiesim.bookie.ledger_storage.LedgerStorage` (entry logs + index),
:class:`~bookiesim.bookie.journal.service.JournalService` (durability),
:class:`~bookiesim.bookie.handles.HandleFactory` (per-ledger descriptors, key checks and the
fence state of :mod:`~bookiesim.bookie.ledger_state`),
:class:`~bookiesim.bookie.checkpoint.SyncThread` (checkpoints) and
:class:`~bookiesim.bookie.disk_monitor.LedgerDirsMonitor` (disk usage). Everything runs on one
trio thread; only fsyncs leave it.

Add path (§6.3): key check → fence check → storage (readable at once) → journal (master key
record the first time this process sees the ledger, then the entry) → the caller's
completion runs after the journal's sync. A fencing read persists the fence bit, journals a
FENCE record and answers only once that record is durable, then rotates the ledger's log
(BP-32: the writer is gone). Long-poll reads wait on a per-ledger event that every LAC
advance and every fence replaces.

Whoever must watch the add path (the simulator checks that no normal add lands on a fenced
ledger) passes :data:`AddObserver` callbacks at construction instead of subclassing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.bookie.blocking import run_blocking
from bookiesim.bookie.checkpoint import SyncThread
from bookiesim.bookie.disk_monitor import LedgerDirsMonitor, is_out_of_space
from bookiesim.bookie.errors import (
    BookieError,
    BookieIOError,
    FencedError,
    NoLedgerError,
    ReadOnlyError,
)
from bookiesim.bookie.gc_storage import BookieGcStorage
from bookiesim.bookie.handles import HandleFactory
from bookiesim.bookie.journal.files import JournalWriter
from bookiesim.bookie.journal.journals import Journals
from bookiesim.bookie.journal.records import (
    DataRecord,
    ExplicitLacRecord,
    FenceRecord,
    JournalRecord,
    MasterKeyRecord,
)
from bookiesim.bookie.journal.service import Completion, GroupCommitPolicy, JournalService
from bookiesim.bookie.ledger_storage import (
    EntryHeader,
    entry_header,
)
from bookiesim.bookie.metrics import BookieMetrics
from bookiesim.bookie.sorted_storage import SortedLedgerStorage, open_ledger_storage
from bookiesim.entrylog.logger import RotationEvent, RotationReason
from bookiesim.gc.collector import GarbageCollector
from bookiesim.gc.policy import CompactionSettings, Throttle

if TYPE_CHECKING:
    from bookiesim.bookie.config import BookieConfig
    from bookiesim.bookie.journal.log_mark import LogMark

log = logging.getLogger(__name__)


AddObserver = Callable[[EntryHeader, bool, bool], None]
"""Called after each accepted add with (header, recovery, fenced): ``fenced`` is whether
storage had the ledger fenced before this add arrived."""


class Bookie:
    """One bookie's state and operations; :meth:`run` drives its loops in a nursery."""

    def __init__(
        self,
        cfg: BookieConfig,
        metrics: BookieMetrics | None = None,
        *,
        add_observers: Sequence[AddObserver] = (),
    ) -> None:
        self.cfg = cfg
        self.metrics = metrics if metrics is not None else BookieMetrics()
        for d in (*cfg.ledger_directories, *cfg.effective_index_directories):
            os.makedirs(os.path.join(d, "current"), exist_ok=True)
        self.storage = open_ledger_storage(cfg, clock=trio.current_time, on_rotate=self._on_rotate)
        self.handles = HandleFactory(self.storage)
        self._add_observers = tuple(add_observers)
        self._bytes_written = 0
        writers = [
            JournalWriter(
                journal_dir,
                prealloc_size=cfg.journal_pre_alloc_size_mb << 20,
                max_size=cfg.journal_max_size_mb << 20,
                alignment=cfg.journal_alignment_size,
            )
            for journal_dir in cfg.effective_journal_directories
        ]
        policy = GroupCommitPolicy(
            max_group_wait=cfg.journal_max_group_wait_msec / 1000,
            buffered_writes_threshold=cfg.journal_buffered_writes_threshold,
            buffered_entries_threshold=cfg.journal_buffered_entries_threshold,
            flush_when_queue_empty=cfg.journal_flush_when_queue_empty,
            sync_data=cfg.journal_sync_data,
            page_cache_flush_interval=cfg.journal_page_cache_flush_interval_msec / 1000,
        )
        self.journals = Journals(
            [
                JournalService(
                    writer, policy, on_sync=self._on_journal_sync, on_fail=self._went_read_only
                )
                for writer in writers
            ],
            writers,
        )
        self._read_only = False
        # Read-only by an operator's request (PUT /api/v1/bookie/state/readonly), as
        # upstream's manual transition; cleared only by the opposite request.
        self._admin_read_only = False
        self._mode_changed = trio.Event()
        self.stop_requested = trio.Event()
        """Set when the bookie must stop by itself: it would turn read-only, and
        ``readOnlyModeEnabled`` is false (upstream shuts down then)."""
        self.sync_thread = SyncThread(
            cfg,
            self.storage,
            self.journals,
            self.metrics,
            on_storage_failed=self._went_read_only,
            on_write_failed=self._write_failed,
        )
        self.storage.on_write_failed = self._write_failed
        self.disk_monitor = LedgerDirsMonitor(cfg)
        self.gc = _garbage_collector(cfg, self)
        usage = self.gc.usage
        self.metrics.bind_gc_gauges(
            entry_logs=lambda: len(usage),
            live_bytes=lambda: usage.remaining_bytes,
            total_bytes=lambda: usage.total_bytes,
            usage_buckets=usage.bucket_counts,
        )
        self.ready = trio.Event()
        self.replayed_records = 0
        self.shutdown_errors: list[str] = []
        """Disk errors the last :meth:`shutdown` logged; empty after a clean stop."""
        self.metrics.bind_gauges(
            active_logs=lambda: self.storage.entry_logger.active_log_count,
            rotated_logs=lambda: self.storage.entry_logger.rotated_log_count,
            open_write_files=lambda: self.storage.entry_logger.open_write_files,
            open_read_files=lambda: self.storage.entry_logger.open_read_files,
            least_unflushed_log_id=lambda: self.storage.entry_logger.least_unflushed_log_id,
            newest_log_id=lambda: max(self.storage.entry_logger.log_ids(), default=-1),
            ledgers=lambda: len(self.storage.ledger_ids()),
            writable_dirs=self.disk_monitor.writable_ledger_dirs,
            disk_usage=self.disk_monitor.used_fraction,
            server_status=lambda: 0 if self._read_only else 1,
        )
        self.metrics.bind_journal_queue_depth(lambda: self.journals.pending_requests)
        # Upstream's monitor checks once before the bookie starts: on full disks it starts
        # read-only (or, with readOnlyModeEnabled=false, stops).
        self.check_disks()

    # -- read-only mode (upstream's BookieStateManager) -----------------------------------

    def _went_read_only(self, error: OSError) -> None:
        log.error("bookie read-only until restarted: %s", error)
        self._update_mode()

    def _write_failed(self, error: OSError) -> None:
        """A write of the ledger storage or the checkpoint failed: for lack of space, every
        ledger directory counts as full from now on (read-only until the disk check finds
        room below the low-water mark), as upstream's SyncThread reports ``allDisksFull``."""
        if is_out_of_space(error):
            self.disk_monitor.out_of_space(error)
            self._disk_checked()

    def check_disks(self) -> None:
        """The disk check now, as every ``diskCheckInterval``: read-only or writable again."""
        self.disk_monitor.check()
        self._disk_checked()

    def _disk_checked(self) -> None:
        self.gc.disk_state_is(self.disk_monitor.disk_state)
        self._update_mode()

    @property
    def failure(self) -> OSError | None:
        """Why this bookie takes no more adds until restarted (its journal or its storage
        failed); None otherwise."""
        return self.journals.failed or self.storage.failed

    @property
    def is_read_only(self) -> bool:
        """Adds are refused (EREADONLY): a failure (:attr:`failure`), or every ledger (or
        index) directory full (:mod:`.disk_monitor`); reads and fencing go on."""
        return self._read_only

    @property
    def available_for_high_priority_writes(self) -> bool:
        """Upstream's ``isAvailableForHighPriorityWrites``: a read-only bookie still takes
        high-priority adds (recovery, re-replication) unless its journal or storage failed,
        or every ledger (or index) directory is full with none keeping
        ``minUsableSizeForHighPriorityWrites`` available. An admin's read-only keeps them."""
        return self.failure is None and self.disk_monitor.high_priority_writes_allowed

    def set_admin_read_only(self, read_only: bool) -> None:
        """An operator turns the bookie read-only, or lifts that (disks full or a failure
        still keep it read-only)."""
        if read_only != self._admin_read_only:
            log.warning("bookie read-only by an admin request: %s", read_only)
        self._admin_read_only = read_only
        self._update_mode()

    def _update_mode(self) -> None:
        read_only = self.failure is not None or self.disk_monitor.all_full or self._admin_read_only
        if read_only == self._read_only:
            return
        self._read_only = read_only
        if not read_only:
            log.warning("bookie is writable again")
        elif not self.cfg.read_only_mode_enabled:
            log.error(
                "bookie must turn read-only and readOnlyModeEnabled=false: shutting down "
                "(set readOnlyModeEnabled=true to keep serving reads)"
            )
            self.stop_requested.set()
        elif self.failure is None and self.disk_monitor.all_full:
            log.warning("bookie is read-only: every ledger directory is full")
        self._mode_changed.set()
        self._mode_changed = trio.Event()

    async def wait_mode(self, *, read_only: bool) -> None:
        """Return once the bookie is read-only (or writable, with ``read_only=False``):
        whoever tells the world (the registration) follows it with this."""
        while self._read_only != read_only:
            await self._mode_changed.wait()

    # -- life cycle ---------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Replay the journal, then run the journal, checkpoint and expiry loops until
        cancelled; a cancelled bookie runs a final checkpoint (shielded) and closes."""
        self.replay_journal()
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.journals.run)
                nursery.start_soon(self.sync_thread.run)
                nursery.start_soon(self._preallocation_loop)
                if isinstance(self.storage, SortedLedgerStorage):
                    nursery.start_soon(self.storage.run_flusher)
                if self.storage.entry_logger.expires_on_timer:
                    nursery.start_soon(self._expiry_loop)
                await nursery.start(self.gc.run)
                nursery.start_soon(self.disk_monitor.run, self._disk_checked)
                self.ready.set()
                task_status.started()
                await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await self.shutdown()

    async def shutdown(self) -> None:
        """Final checkpoint and close; safe to call once the loops have stopped.

        A disk error here (a full disk, a failed fsync) is logged, not raised: it must not
        keep the rest from closing, and loses nothing acknowledged, since lastMark moves only
        past what a checkpoint made durable and the next start replays the journal from it.
        Each such error is also kept in :attr:`shutdown_errors`, so that the process can
        exit non-zero: an operator's service manager should see that this stop was not clean.
        """
        try:
            await self.journals.commit_pending()
            if self.journals.failed is None and self.storage.failed is None:
                await self.checkpoint()
        except OSError as exc:
            self._shutdown_error("final checkpoint failed", exc)
        finally:
            try:
                await self.journals.aclose()
            except OSError as exc:
                self._shutdown_error("closing the journal failed", exc)
            finally:
                try:
                    self.storage.close()
                except OSError as exc:
                    self._shutdown_error("closing the ledger storage failed", exc)

    def _shutdown_error(self, what: str, exc: OSError) -> None:
        if is_out_of_space(exc):
            # A full disk is no disk error: nothing was claimed durable that is not, and the
            # journal holds every acknowledged entry past lastMark. One line, a clean stop.
            log.warning("%s: no space left (%s); the next start replays the journal", what, exc)
            return
        log.error("%s: %s", what, exc)
        self.shutdown_errors.append(f"{what}: {exc}")

    def replay_journal(self) -> None:
        """Restore entries, keys, fence bits and explicit LACs from each journal after its
        mark (§6.5), then checkpoint so the replayed state is durable before we serve anyone."""
        journals, ledger_dirs = self.journals, self.cfg.ledger_directories
        marks = journals.read_marks(ledger_dirs)

        def stored_entry(ledger_id: int, entry_id: int) -> bytes | None:
            # Replay's torn-tail check learns a ledger's digest type from an entry it holds
            # when the journal after the mark has none of that ledger's earlier entries.
            try:
                return self.storage.read_entry(ledger_id, entry_id)
            except (BookieError, OSError):
                return None

        count = journals.replay(
            self.cfg.effective_journal_directories,
            marks,
            self._replay_record,
            stored_entry=stored_entry,
        )
        self.replayed_records = count
        new_marks = journals.sync_new_files()
        self.storage.checkpoint_blocking()
        journals.persist_marks(ledger_dirs, new_marks)
        if count:
            log.info("replayed %d journal records from %s", count, marks)

    def _replay_record(self, record: JournalRecord) -> None:
        storage = self.storage
        if isinstance(record, MasterKeyRecord):
            if not storage.ledger_exists(record.ledger_id):
                storage.create_ledger(record.ledger_id, record.master_key)
            return
        # Records of a ledger deleted since are skipped, as upstream's NoLedgerException.
        if not storage.ledger_exists(record.ledger_id):
            return
        if isinstance(record, FenceRecord):
            storage.set_fenced(record.ledger_id)
        elif isinstance(record, ExplicitLacRecord):
            storage.set_explicit_lac(record.ledger_id, record.lac_blob)
        elif isinstance(record, DataRecord):
            storage.add_entry(entry_header(record.body), record.body)

    async def checkpoint(self) -> tuple[LogMark, ...]:
        """Upstream's SyncThread.checkpoint: the marks first, storage durable, then persist
        them; returns each journal's mark."""
        return await self.sync_thread.checkpoint()

    async def _expiry_loop(self) -> None:
        """Rotate idle logs on time even when no write arrives (upstream only does it when a
        write touches the cache, so an idle bookie never rotates)."""
        expiry = self.cfg.entrylog_map_access_expiry_time_in_seconds
        logger = self.storage.entry_logger
        while True:
            now = trio.current_time()
            deadline = logger.next_expiry_deadline()
            # A log created after we went to sleep expires no earlier than now + expiry.
            wake = now + expiry if deadline is None else min(deadline, now + expiry)
            await trio.sleep_until(max(wake, now))
            logger.expire_idle()

    def disk_used_fraction(self) -> float:
        """The highest used fraction among the ledger and index directories' disks."""
        return self.disk_monitor.used_fraction()

    def forget_ledger(self, ledger_id: int) -> None:
        """GC deleted the ledger: drop its in-memory state (long polls wake and find it
        gone)."""
        self.handles.forget(ledger_id)

    async def _preallocation_loop(self) -> None:
        """Keep the entry logger's pool of empty logs full, creating files off the trio
        thread; woken when the pool runs low (a no-op wait with no pool)."""
        logger = self.storage.entry_logger
        while True:
            while logger.needs_preallocation():
                await run_blocking(logger.preallocate_some)
            wake = trio.Event()
            logger.notify_when_preallocation_needed(wake.set)
            await wake.wait()

    def _on_journal_sync(self, seconds: float, entries: int, nbytes: int) -> None:
        # Entry bytes are counted in a plain int on the add path and handed to the metric
        # once per group commit: a library counter per add costs a lock and a call.
        self.metrics.journal_sync(seconds, entries, nbytes)
        if self._bytes_written:
            self.metrics.bytes_written(self._bytes_written)
            self._bytes_written = 0

    def _on_rotate(self, event: RotationEvent) -> None:
        self.metrics.rotation(event.reason.value)

    # -- operations ----------------------------------------------------------------------

    def add_entry(
        self,
        body: bytes,
        master_key: bytes,
        done: Completion,
        *,
        recovery: bool = False,
        ack_before_sync: bool = False,
        header: EntryHeader | None = None,
        high_priority: bool = False,
    ) -> EntryHeader:
        """Store and journal an entry; ``done`` runs when it may be acknowledged.
        ``high_priority`` (v3 ``priority > 0``, v2 ``FLAG_HIGH_PRIORITY``: recovery and
        re-replication) lets it through on a read-only bookie that
        :attr:`available_for_high_priority_writes`.

        Raises :class:`BookieError` synchronously for anything that must not be stored.
        """
        if header is None:
            header = entry_header(body)
        if self._read_only and not (high_priority and self.available_for_high_priority_writes):
            # Before any other check, as upstream's processors answer EREADONLY.
            raise ReadOnlyError("bookie is read-only")
        ledger_id = header.ledger_id
        storage = self.storage
        if observers := self._add_observers:
            was_fenced = storage.ledger_exists(ledger_id) and storage.is_fenced(ledger_id)
        handle = self.handles.get_handle(ledger_id, master_key)
        if handle.fenced and not recovery and not self.cfg.unsafe_add_ignores_fence:
            raise FencedError(ledger_id)
        try:
            storage.add_entry(header, body)
        except OSError as exc:
            self._write_failed(exc)
            raise BookieIOError(f"ledger {ledger_id}: {exc}") from exc
        handle.advance_lac(header.lac)
        journal = self.journals.for_ledger(ledger_id)
        if not handle.machine.key_journaled:
            # Upstream journals the key once per ledger per process, just before its entry.
            journal.append_unacknowledged(handle.with_key([]))
        journal.log_entry(body, done, ack_before_sync=ack_before_sync)
        self._bytes_written += len(body)
        for observer in observers:
            observer(header, recovery, was_fenced)
        return header

    def read_entry(self, ledger_id: int, entry_id: int) -> tuple[bytes, int]:
        """The stored body and the bookie's LAC for the ledger."""
        handle = self.handles.get_read_only_handle(ledger_id)
        body = self.storage.read_entry(ledger_id, entry_id)
        self.metrics.bytes_read(len(body))
        return body, handle.lac

    def last_add_confirmed(self, ledger_id: int) -> int:
        return self.handles.get_read_only_handle(ledger_id).lac

    async def fence(self, ledger_id: int, master_key: bytes) -> None:
        """Fence the ledger and return once the fence is durable (EIO if it cannot be).

        A fencing read is the first contact of a recovering client, so like upstream it
        creates the ledger when the bookie has never seen it. Concurrent fences share the
        journal write in flight. Afterwards the ledger's log is rotated: no more regular
        writes will come (BP-32).
        """
        handle = self.handles.get_handle(ledger_id, master_key)
        if handle.needs_fence_record:
            journal = self.journals.for_ledger(ledger_id)
            if journal.failed is not None:
                raise BookieIOError(str(journal.failed))
            newly = self.storage.set_fenced(ledger_id)
            journal.log(handle.begin_fence(), handle.fence_logged)
            if newly:
                handle.wake_watchers()
                self.storage.rotate_ledger_log(ledger_id, RotationReason.FENCE)
        await handle.wait_fence_durable()

    def fence_is_durable(self, ledger_id: int) -> bool:
        """The ledger is fenced and its fence journaled: a fencing read has nothing to wait
        for."""
        handle = self.handles.peek(ledger_id)
        return handle is not None and handle.fence_is_durable

    def check_fenced(self, ledger_id: int, master_key: bytes) -> None:
        """A fencing read of a ledger whose fence is durable: the key must match (EUA)."""
        self.handles.get_handle(ledger_id, master_key)

    async def wait_for_lac(self, ledger_id: int, previous_lac: int, max_wait: float) -> bool:
        """Long poll: True once the bookie's LAC exceeds ``previous_lac`` (or the ledger is
        fenced), False on timeout."""
        handle = self.handles.get_read_only_handle(ledger_id)
        with trio.move_on_after(max_wait):
            while handle.lac <= previous_lac and not handle.fenced:
                await handle.wait_for_change()
        return handle.lac > previous_lac

    def write_lac(
        self, ledger_id: int, lac: int, master_key: bytes, blob: bytes, done: Completion
    ) -> None:
        if self._read_only:
            raise ReadOnlyError("bookie is read-only")
        handle = self.handles.get_handle(ledger_id, master_key)
        self.storage.set_explicit_lac(ledger_id, blob)
        handle.advance_lac(lac)
        journal = self.journals.for_ledger(ledger_id)
        journal.log(handle.with_key([ExplicitLacRecord(ledger_id, blob)]), done)

    def read_lac(self, ledger_id: int) -> tuple[bytes | None, bytes | None]:
        """(explicit LAC blob, last entry body); either may be missing."""
        self.handles.get_read_only_handle(ledger_id)
        explicit = self.storage.explicit_lac(ledger_id)
        last: bytes | None = None
        if self.storage.last_entry_id(ledger_id) >= 0:
            last = self.storage.read_entry(ledger_id, -1)
        return explicit, last

    def force_ledger(self, ledger_id: int, done: Completion) -> None:
        """Completes after the next journal sync (used with DEFERRED_SYNC writes)."""
        self.handles.get_read_only_handle(ledger_id)
        self.journals.for_ledger(ledger_id).log([], done)

    def write_close(
        self,
        ledger_id: int,
        master_key: bytes,
        reason: RotationReason = RotationReason.WRITE_CLOSE,
    ) -> str:
        """BP-32: writing the ledger is over here; rotate its log now, flush it at the next
        checkpoint. ``reason`` is WRITE_CLOSE when the writer closed it, REPLICATION when a
        replication worker has finished copying a fragment to this bookie. Returns the
        outcome label used by the metrics."""
        if not self.storage.ledger_exists(ledger_id):
            raise NoLedgerError(ledger_id)
        self.handles.get_read_only_handle(ledger_id).check_key(master_key)
        # Whether write-close rotates at all (not with upstream behaviour, not in single-log
        # mode) is the entry logger's rotation policy's to say.
        rotated = self.storage.rotate_ledger_log(ledger_id, reason)
        return "rotated" if rotated else "no_active_log"

    def entry_ids(self, ledger_id: int) -> list[int]:
        self.handles.get_read_only_handle(ledger_id)
        return self.storage.entry_ids(ledger_id)

    # -- introspection -------------------------------------------------------------------

    def disk_usage(self) -> tuple[int, int]:
        """(total, free) bytes over the ledger directories' file systems."""
        return self.disk_monitor.total_and_free()

    def info(self) -> dict[str, Any]:
        logger = self.storage.entry_logger
        return {
            "mode": "entryLogPerLedger" if self.cfg.entry_log_per_ledger_enabled else "interleaved",
            "ledgerStorage": self.cfg.effective_ledger_storage,
            "upstreamBehaviour": self.cfg.upstream_behaviour,
            "ledgerDirectories": [str(d) for d in self.cfg.ledger_directories],
            "indexDirectories": [str(d) for d in self.cfg.effective_index_directories],
            "journalDirectories": [str(d) for d in self.cfg.effective_journal_directories],
            "leastUnflushedLogId": logger.least_unflushed_log_id,
            "activeLogs": logger.active_log_count,
            "rotatedLogs": logger.rotated_log_count,
            "openWriteFiles": logger.open_write_files,
            "openReadFiles": logger.open_read_files,
            "rotations": {reason.value: n for reason, n in logger.rotations.items()},
            "ledgers": len(self.storage.ledger_ids()),
            "journalSyncedMarks": [
                {"fileId": mark.file_id, "offset": mark.offset}
                for mark in self.journals.synced_marks
            ],
            "state": "read_only" if self._read_only else "writable",
        }


def _garbage_collector(cfg: BookieConfig, bookie: Bookie) -> GarbageCollector:
    """The bookie's GC, configured by upstream's keys (docs/configuration.md)."""
    by_bytes = cfg.is_throttle_by_bytes
    rate = cfg.compaction_rate_by_bytes if by_bytes else cfg.compaction_rate_by_entries
    return GarbageCollector(
        BookieGcStorage(bookie.storage, bookie.sync_thread.lock, bookie.forget_ledger),
        CompactionSettings.from_config(cfg),
        gc_wait_time=cfg.gc_wait_time / 1000,
        throttle=Throttle(rate, by_bytes=by_bytes),
        max_outstanding=cfg.compaction_max_outstanding_requests,
        verify_metadata=cfg.verify_metadata_on_gc,
        force_gc_allow_when_no_space=cfg.is_force_gc_allow_when_no_space,
        target_log_size=cfg.log_size_limit if cfg.use_target_entry_log_size_for_gc else None,
        metrics=bookie.metrics,
    )


__all__ = ["AddObserver", "Bookie", "BookieError"]
