"""The bookie: handles, fencing, the add path, replay, checkpoints and timers.

Upstream splits this across BookieImpl, HandleFactoryImpl, LedgerDescriptorImpl and
SyncThread (reference §6, §7); here it is one class over three narrow collaborators:
:class:`~bookiesim.bookie.ledger_storage.LedgerStorage` (entry logs + index),
:class:`~bookiesim.bookie.journal_service.JournalService` (durability) and the entry
logger's rotation policy. Everything runs on one trio thread; only fsyncs leave it.

Add path (§6.3): key check → fence check → storage (readable at once) → journal (master key
record the first time this process sees the ledger, then the entry) → the caller's
completion runs after the journal's sync. A fencing read persists the fence bit, journals a
FENCE record and answers only once that record is durable, then rotates the ledger's log
(BP-32: the writer is gone). Long-poll reads wait on a per-ledger event that every LAC
advance and every fence replaces.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from typing import Any

import trio

from bookiesim.bookie import journal as journal_files
from bookiesim.bookie.blocking import run_blocking
from bookiesim.bookie.config import BookieConfig
from bookiesim.bookie.errors import (
    BookieError,
    BookieIOError,
    FencedError,
    NoLedgerError,
    UnauthorizedError,
)
from bookiesim.bookie.gc_storage import BookieGcStorage
from bookiesim.bookie.journal import JournalWriter
from bookiesim.bookie.journal_format import (
    DataRecord,
    ExplicitLacRecord,
    FenceRecord,
    JournalRecord,
    MasterKeyRecord,
)
from bookiesim.bookie.journal_service import Completion, GroupCommitPolicy, JournalService
from bookiesim.bookie.ledger_storage import (
    EntryHeader,
    LedgerStorage,
    StorageFailedError,
    entry_header,
)
from bookiesim.bookie.log_mark import LogMark, read_last_mark, write_last_mark
from bookiesim.bookie.metrics import BookieMetrics
from bookiesim.entrylog.logger import RotationEvent, RotationReason
from bookiesim.gc.collector import GarbageCollector
from bookiesim.gc.policy import CompactionSettings, Throttle

log = logging.getLogger(__name__)


@dataclass
class LedgerState:
    """What the bookie keeps in memory per ledger it has seen in this process."""

    master_key: bytes
    fenced: bool
    lac: int = -1
    key_journaled: bool = False
    fence_durable: trio.Event | None = None
    fence_error: BaseException | None = None
    # Created only while a long poll waits: replacing an event on every add would cost
    # more than the rest of the add path's bookkeeping.
    _lac_changed: trio.Event | None = None

    def advance_lac(self, lac: int) -> None:
        if lac > self.lac:
            self.lac = lac
            if self._lac_changed is not None:
                self.wake_watchers()

    def wake_watchers(self) -> None:
        event = self._lac_changed
        if event is not None:
            self._lac_changed = None
            event.set()

    async def wait_for_change(self) -> None:
        if self._lac_changed is None:
            self._lac_changed = trio.Event()
        await self._lac_changed.wait()


class Bookie:
    """One bookie's state and operations; :meth:`run` drives its loops in a nursery."""

    def __init__(self, cfg: BookieConfig, metrics: BookieMetrics | None = None) -> None:
        self.cfg = cfg
        self.metrics = metrics if metrics is not None else BookieMetrics()
        for d in (*cfg.ledger_directories, *cfg.effective_index_directories):
            os.makedirs(os.path.join(d, "current"), exist_ok=True)
        self.storage = LedgerStorage.from_config(
            cfg, clock=trio.current_time, on_rotate=self._on_rotate
        )
        self._ledgers: dict[int, LedgerState] = {}
        self._bytes_written = 0
        self._journal_writer = JournalWriter(
            cfg.effective_journal_directories[0],
            prealloc_size=cfg.journal_pre_alloc_size_mb << 20,
            max_size=cfg.journal_max_size_mb << 20,
            alignment=cfg.journal_alignment_size,
        )
        self.journal = JournalService(
            self._journal_writer,
            GroupCommitPolicy(
                max_group_wait=cfg.journal_max_group_wait_msec / 1000,
                buffered_writes_threshold=cfg.journal_buffered_writes_threshold,
                buffered_entries_threshold=cfg.journal_buffered_entries_threshold,
                flush_when_queue_empty=cfg.journal_flush_when_queue_empty,
                sync_data=cfg.journal_sync_data,
                page_cache_flush_interval=cfg.journal_page_cache_flush_interval_msec / 1000,
            ),
            on_sync=self._on_journal_sync,
            on_fail=self._went_read_only,
        )
        self.read_only = trio.Event()
        """Set when the bookie stops taking adds (:attr:`failure`), for whoever must tell
        the world (its registration moves under ``available/readonly``)."""
        self._checkpoint_lock = trio.Lock()
        self._persisted_mark: LogMark | None = None
        """The mark the last checkpoint of this process wrote to every ledger dir."""
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
            writable_dirs=self.writable_ledger_dirs,
            disk_usage=self.disk_used_fraction,
            server_status=lambda: 1 if self.failure is None else 0,
        )

    def _went_read_only(self, error: OSError) -> None:
        if not self.read_only.is_set():
            log.warning("bookie read-only until restarted: %s", error)
            self.read_only.set()

    @property
    def failure(self) -> OSError | None:
        """Why this bookie takes no more adds (its journal or its storage failed): it is
        read-only until restarted. None while writable."""
        return self.journal.failed or self.storage.failed

    # -- life cycle ---------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Replay the journal, then run the journal, checkpoint and expiry loops until
        cancelled; a cancelled bookie runs a final checkpoint (shielded) and closes."""
        self.replay_journal()
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.journal.run)
                nursery.start_soon(self._checkpoint_loop)
                nursery.start_soon(self._preallocation_loop)
                if self.cfg.entry_log_per_ledger_enabled and not self.cfg.upstream_behaviour:
                    nursery.start_soon(self._expiry_loop)
                await nursery.start(self.gc.run)
                nursery.start_soon(self._disk_check_loop)
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
            if self.journal.failed is None:
                await self.journal.commit_pending()
                if self.storage.failed is None:
                    await self.checkpoint()
        except OSError as exc:
            self._shutdown_error("final checkpoint failed; the next start replays the journal", exc)
        finally:
            try:
                await self.journal.aclose()
            except OSError as exc:
                self._shutdown_error("closing the journal failed", exc)
            finally:
                try:
                    self.storage.close()
                except OSError as exc:
                    self._shutdown_error("closing the ledger storage failed", exc)

    def _shutdown_error(self, what: str, exc: OSError) -> None:
        log.error("%s: %s", what, exc)
        self.shutdown_errors.append(f"{what}: {exc}")

    def replay_journal(self) -> None:
        """Restore entries, keys, fence bits and explicit LACs from the journal (§6.5), then
        checkpoint so the replayed state is durable before we serve anyone."""
        mark = read_last_mark(self.cfg.ledger_directories)
        journal_dir = self.cfg.effective_journal_directories[0]
        count = 0
        replayed = journal_files.replay(journal_dir, mark)
        for item in replayed:
            if item.file_id == self._journal_writer.file_id:
                break  # the file we just opened for writing
            self._replay_record(item.record)
            count += 1
        self.replayed_records = count
        # Make the fresh journal file's header durable so its position is a valid mark.
        self._journal_writer.flush()
        new_mark = self._journal_writer.fsync()
        self.storage.checkpoint_blocking()
        write_last_mark(self.cfg.ledger_directories, new_mark)
        if count:
            log.info("replayed %d journal records from %s", count, mark)

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

    async def checkpoint(self) -> LogMark:
        """Upstream's SyncThread.checkpoint: mark first, storage durable, then persist mark."""
        async with self._checkpoint_lock:
            started = trio.current_time()
            mark = self.journal.synced_mark
            try:
                await self.storage.checkpoint()
            except StorageFailedError as exc:
                self._went_read_only(exc)
                raise
            # With no journal write since the last checkpoint (an idle bookie, every
            # flushInterval), the same mark is on disk already and no journal became
            # deletable: rewriting and fsyncing lastMark and listing the journal directory
            # would change nothing.
            if mark != self._persisted_mark:
                dirs = self.cfg.ledger_directories
                await run_blocking(write_last_mark, dirs, mark)
                journal_dir = self.cfg.effective_journal_directories[0]
                await run_blocking(
                    journal_files.delete_old_journals,
                    journal_dir,
                    mark,
                    self.cfg.journal_max_backups,
                )
                self._persisted_mark = mark
            self.metrics.checkpoint(trio.current_time() - started)
            return mark

    async def _checkpoint_loop(self) -> None:
        interval = self.cfg.flush_interval / 1000
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

    async def _disk_check_loop(self) -> None:
        """Upstream's LedgerDirsMonitor, as far as GC cares: every diskCheckInterval, the
        fullest ledger or index disk decides whether compaction is suspended (or GC forced,
        with isForceGCAllowWhenNoSpace)."""
        cfg = self.cfg
        while True:
            try:
                used = self.disk_used_fraction()
            except OSError as exc:
                log.warning("disk check failed: %s", exc)
            else:
                self.gc.disk_checked(used, cfg.disk_usage_warn_threshold, cfg.disk_usage_threshold)
            await trio.sleep(cfg.disk_check_interval / 1000)

    def disk_used_fraction(self) -> float:
        """The highest used fraction (1 - usable/total, as upstream's DiskChecker) among the
        file systems of the ledger and index directories."""
        worst = 0.0
        for d in {*self.cfg.ledger_directories, *self.cfg.effective_index_directories}:
            st = os.statvfs(d)
            if st.f_blocks:
                worst = max(worst, 1.0 - st.f_bavail / st.f_blocks)
        return worst

    def writable_ledger_dirs(self) -> int:
        """Ledger directories whose disk is below diskUsageThreshold."""
        threshold = self.cfg.disk_usage_threshold
        writable = 0
        for d in self.cfg.ledger_directories:
            st = os.statvfs(d)
            if not st.f_blocks or 1.0 - st.f_bavail / st.f_blocks < threshold:
                writable += 1
        return writable

    def forget_ledger(self, ledger_id: int) -> None:
        """GC deleted the ledger: drop its in-memory state (long polls wake and find it
        gone)."""
        state = self._ledgers.pop(ledger_id, None)
        if state is not None:
            state.wake_watchers()

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

    # -- handles -------------------------------------------------------------------------

    def _handle(self, ledger_id: int, master_key: bytes) -> LedgerState:
        """The write handle: creates the ledger (persisting the key) on first contact;
        afterwards the key must match byte for byte (EUA otherwise)."""
        state = self._ledgers.get(ledger_id)
        if state is None:
            if self.storage.ledger_exists(ledger_id):
                state = self._load_state(ledger_id)
            else:
                self.storage.create_ledger(ledger_id, master_key)
                state = LedgerState(master_key=master_key, fenced=False)
                self._ledgers[ledger_id] = state
        if state.master_key != master_key:
            raise UnauthorizedError(f"master key mismatch for ledger {ledger_id}")
        return state

    def _read_state(self, ledger_id: int) -> LedgerState:
        """The read-only handle: the ledger must exist; no key check."""
        state = self._ledgers.get(ledger_id)
        if state is None:
            if not self.storage.ledger_exists(ledger_id):
                raise NoLedgerError(ledger_id)
            state = self._load_state(ledger_id)
        return state

    def _load_state(self, ledger_id: int) -> LedgerState:
        storage = self.storage
        state = LedgerState(
            master_key=storage.master_key(ledger_id), fenced=storage.is_fenced(ledger_id)
        )
        last = storage.last_entry_id(ledger_id)
        if last >= 0:
            state.lac = entry_header(storage.read_entry(ledger_id, last)).lac
        self._ledgers[ledger_id] = state
        return state

    def _journal(self, state: LedgerState, ledger_id: int, records: list[JournalRecord]) -> None:
        if not state.key_journaled:
            records.insert(0, MasterKeyRecord(ledger_id, state.master_key))
            state.key_journaled = True

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
    ) -> EntryHeader:
        """Store and journal an entry; ``done`` runs when it may be acknowledged.

        Raises :class:`BookieError` synchronously for anything that must not be stored.
        """
        if header is None:
            header = entry_header(body)
        if (failure := self.failure) is not None:
            raise BookieIOError(str(failure))
        state = self._handle(header.ledger_id, master_key)
        if state.fenced and not recovery:
            raise FencedError(header.ledger_id)
        try:
            self.storage.add_entry(header, body)
        except OSError as exc:
            raise BookieIOError(f"ledger {header.ledger_id}: {exc}") from exc
        state.advance_lac(header.lac)
        journal = self.journal
        if not state.key_journaled:
            # Upstream journals the key once per ledger per process, just before its entry.
            journal.append_unacknowledged([MasterKeyRecord(header.ledger_id, state.master_key)])
            state.key_journaled = True
        journal.log_entry(body, done, ack_before_sync=ack_before_sync)
        self._bytes_written += len(body)
        return header

    def read_entry(self, ledger_id: int, entry_id: int) -> tuple[bytes, int]:
        """The stored body and the bookie's LAC for the ledger."""
        state = self._read_state(ledger_id)
        body = self.storage.read_entry(ledger_id, entry_id)
        self.metrics.bytes_read(len(body))
        return body, state.lac

    def last_add_confirmed(self, ledger_id: int) -> int:
        return self._read_state(ledger_id).lac

    async def fence(self, ledger_id: int, master_key: bytes) -> None:
        """Fence the ledger and return once the fence is durable (EIO if it cannot be).

        A fencing read is the first contact of a recovering client, so like upstream it
        creates the ledger when the bookie has never seen it. Concurrent fences share the
        journal write in flight. Afterwards the ledger's log is rotated: no more regular
        writes will come (BP-32).
        """
        state = self._handle(ledger_id, master_key)
        if state.fence_durable is None or state.fence_error is not None:
            # The earlier error stays until a new fence record is on its way: cleared before
            # this check, a failed journal would leave the old (set) event looking durable.
            if self.journal.failed is not None:
                raise BookieIOError(str(self.journal.failed))
            state.fence_error = None
            newly = self.storage.set_fenced(ledger_id)
            state.fenced = True
            durable = state.fence_durable = trio.Event()

            def fenced(error: BaseException | None) -> None:
                state.fence_error = error
                durable.set()

            records: list[JournalRecord] = [FenceRecord(ledger_id)]
            self._journal(state, ledger_id, records)
            self.journal.log(records, fenced)
            if newly:
                state.wake_watchers()
                self.storage.rotate_ledger_log(ledger_id, RotationReason.FENCE)
        await state.fence_durable.wait()
        if state.fence_error is not None:
            raise BookieIOError(f"fence of ledger {ledger_id} not persisted: {state.fence_error}")

    def fence_is_durable(self, ledger_id: int) -> bool:
        """The ledger is fenced and its fence journaled: a fencing read has nothing to wait
        for."""
        state = self._ledgers.get(ledger_id)
        return (
            state is not None
            and state.fence_durable is not None
            and state.fence_durable.is_set()
            and state.fence_error is None
        )

    def check_fenced(self, ledger_id: int, master_key: bytes) -> None:
        """A fencing read of a ledger whose fence is durable: the key must match (EUA)."""
        self._handle(ledger_id, master_key)

    async def wait_for_lac(self, ledger_id: int, previous_lac: int, max_wait: float) -> bool:
        """Long poll: True once the bookie's LAC exceeds ``previous_lac`` (or the ledger is
        fenced), False on timeout."""
        state = self._read_state(ledger_id)
        with trio.move_on_after(max_wait):
            while state.lac <= previous_lac and not state.fenced:
                await state.wait_for_change()
        return state.lac > previous_lac

    def write_lac(
        self, ledger_id: int, lac: int, master_key: bytes, blob: bytes, done: Completion
    ) -> None:
        state = self._handle(ledger_id, master_key)
        self.storage.set_explicit_lac(ledger_id, blob)
        state.advance_lac(lac)
        records: list[JournalRecord] = [ExplicitLacRecord(ledger_id, blob)]
        self._journal(state, ledger_id, records)
        self.journal.log(records, done)

    def read_lac(self, ledger_id: int) -> tuple[bytes | None, bytes | None]:
        """(explicit LAC blob, last entry body); either may be missing."""
        self._read_state(ledger_id)
        explicit = self.storage.explicit_lac(ledger_id)
        last: bytes | None = None
        if self.storage.last_entry_id(ledger_id) >= 0:
            last = self.storage.read_entry(ledger_id, -1)
        return explicit, last

    def force_ledger(self, ledger_id: int, done: Completion) -> None:
        """Completes after the next journal sync (used with DEFERRED_SYNC writes)."""
        self._read_state(ledger_id)
        self.journal.log([], done)

    def write_close(self, ledger_id: int, master_key: bytes) -> str:
        """BP-32: the writer is done; rotate the ledger's log now, flush it at the next
        checkpoint. Returns the outcome label used by the metrics."""
        if not self.storage.ledger_exists(ledger_id):
            raise NoLedgerError(ledger_id)
        state = self._read_state(ledger_id)
        if state.master_key != master_key:
            raise UnauthorizedError(f"master key mismatch for ledger {ledger_id}")
        if self.cfg.upstream_behaviour:
            return "no_active_log"
        rotated = self.storage.rotate_ledger_log(ledger_id, RotationReason.WRITE_CLOSE)
        return "rotated" if rotated else "no_active_log"

    def entry_ids(self, ledger_id: int) -> list[int]:
        self._read_state(ledger_id)
        return self.storage.entry_ids(ledger_id)

    # -- introspection -------------------------------------------------------------------

    def disk_usage(self) -> tuple[int, int]:
        """(total, free) bytes over the ledger directories' file systems."""
        seen: set[int] = set()
        total = free = 0
        for d in self.cfg.ledger_directories:
            dev = os.stat(d).st_dev
            if dev in seen:
                continue
            seen.add(dev)
            usage = shutil.disk_usage(d)
            total += usage.total
            free += usage.free
        return total, free

    def info(self) -> dict[str, Any]:
        logger = self.storage.entry_logger
        return {
            "mode": "entryLogPerLedger" if self.cfg.entry_log_per_ledger_enabled else "interleaved",
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
            "journalSyncedMark": {
                "fileId": self.journal.synced_mark.file_id,
                "offset": self.journal.synced_mark.offset,
            },
            "state": "read_only" if self.failure else "writable",
        }


def _garbage_collector(cfg: BookieConfig, bookie: Bookie) -> GarbageCollector:
    """The bookie's GC, configured by upstream's keys (docs/configuration.md)."""
    by_bytes = cfg.is_throttle_by_bytes
    rate = cfg.compaction_rate_by_bytes if by_bytes else cfg.compaction_rate_by_entries
    return GarbageCollector(
        BookieGcStorage(bookie.storage, bookie._checkpoint_lock, bookie.forget_ledger),
        CompactionSettings.from_config(cfg),
        gc_wait_time=cfg.gc_wait_time / 1000,
        throttle=Throttle(rate, by_bytes=by_bytes),
        max_outstanding=cfg.compaction_max_outstanding_requests,
        verify_metadata=cfg.verify_metadata_on_gc,
        force_gc_allow_when_no_space=cfg.is_force_gc_allow_when_no_space,
        target_log_size=cfg.log_size_limit if cfg.use_target_entry_log_size_for_gc else None,
        metrics=bookie.metrics,
    )


__all__ = ["Bookie", "BookieError", "LedgerState"]
