"""The garbage collector of one bookie: upstream's ``GarbageCollectorThread`` on trio.

Theory of operation
-------------------
:meth:`GarbageCollector.run` sleeps ``gcWaitTime`` between passes (fixed delay: the wait
starts when a pass ends), and wakes early when a pass is forced (:meth:`trigger`, the admin
API, or a full disk with ``isForceGCAllowWhenNoSpace``). One pass
(:meth:`GarbageCollector.run_once`), as upstream's ``runWithFlags``:

1. **Ledgers** — compare the bookie's ledgers with the metadata store's
   (:mod:`bookiesim.gc.ledgers`) and delete the missing ones locally (index and state). No
   store, no deletions: a bookie that cannot know what was deleted deletes nothing.
2. **Extract** — for every *flushed* log not yet tracked (``EntryLogger.flushed_log_ids``:
   below leastUnflushedLogId or flagged flushed; with ``upstreamBehaviour`` only below the
   pointer), read its metadata (ledgers map, else a scan), drop deleted ledgers, delete the
   log if nothing is left, else track it. A log that cannot be read is skipped and retried
   next pass. Logs still being written are never looked at.
3. **Reclaim** — drop ledgers deleted since from every tracked log; delete the logs left
   empty.
4. **Compact** — major or minor, as :func:`bookiesim.gc.policy.choose_compaction` says; logs
   below the threshold, emptiest bucket first, until the time limit.

Everything GC does to storage goes through :class:`~bookiesim.gc.interfaces.GcStorage`; the
decisions are in :mod:`~bookiesim.gc.usage` and :mod:`~bookiesim.gc.policy`, which have no
I/O. Time is trio's clock (virtual time works); the wall clock is only read to report
upstream's epoch-millisecond timestamps in :meth:`status`.

Delete-to-reclaim latency: when a pass deletes ledgers it notes the time and the logs that may
still hold their bytes without GC knowing yet (logs not flushed, or not yet extracted, and not
known to hold other ledgers only). A deleted ledger's space counts as reclaimed once none of
those logs is left unexamined and no tracked log holds its bytes.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.entrylog.format import EntryLogFormatError
from bookiesim.gc.compactor import CompactionResult, EntryLogCompactor
from bookiesim.gc.ledgers import find_deleted_ledgers
from bookiesim.gc.policy import (
    CompactionKind,
    CompactionSettings,
    DiskAction,
    DiskState,
    Throttle,
    choose_compaction,
    classify_disk,
    disk_actions,
)
from bookiesim.gc.usage import EntryLogUsage

if TYPE_CHECKING:
    from collections.abc import Callable

    from bookiesim.gc.interfaces import GcMetrics, GcStorage, LedgerSource

__all__ = ["GarbageCollector", "GcRunReport"]

log = logging.getLogger(__name__)


@dataclass
class GcRunReport:
    """What one pass did."""

    forced: bool = False
    ledgers_deleted: list[int] = field(default_factory=list)
    logs_extracted: int = 0
    logs_deleted: list[int] = field(default_factory=list)
    reclaimed_by_deletion: int = 0
    """Metadata bytes (entries + 4-byte size fields) of the logs deleted whole."""
    compaction: CompactionKind | None = None
    compacted: list[CompactionResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def bytes_copied(self) -> int:
        return sum(r.bytes_copied for r in self.compacted)

    @property
    def reclaimed_by_compaction(self) -> int:
        return sum(r.reclaimed_bytes for r in self.compacted)


@dataclass
class _Deletion:
    """Ledgers deleted in one pass, and the logs that may hold their bytes unseen: logs
    whose ledgers are unknown (shared by all of them), and per ledger the logs still being
    written that are known to hold it."""

    at: float
    ledgers: set[int]
    unknown: set[int]
    known: dict[int, set[int]]


class _NoMetrics:
    def gc_run(self, seconds: float) -> None: ...
    def gc_ledgers_deleted(self, n: int) -> None: ...
    def gc_log_deleted(self, reason: str, reclaimed_bytes: int) -> None: ...
    def gc_compaction(self, kind: str) -> None: ...
    def gc_copied(self, entries: int, nbytes: int) -> None: ...
    def gc_reclaim_delay(self, seconds: float) -> None: ...
    def gc_reclaim_failed(self) -> None: ...


class GarbageCollector:
    """GC and compaction for one bookie's storage; see the module docstring."""

    def __init__(
        self,
        storage: GcStorage,
        settings: CompactionSettings,
        *,
        gc_wait_time: float,
        throttle: Throttle,
        max_outstanding: int = 100_000,
        ledger_source: LedgerSource | None = None,
        verify_metadata: bool = False,
        force_gc_allow_when_no_space: bool = False,
        target_log_size: int | None = None,
        metrics: GcMetrics | None = None,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        if gc_wait_time <= 0:
            raise ValueError(f"gc_wait_time must be positive, not {gc_wait_time}")
        self.storage = storage
        self.settings = settings
        self.gc_wait_time = gc_wait_time
        self.ledger_source = ledger_source
        """Set it (or leave it None: no ledger is ever deleted) before or while running."""
        self.verify_metadata = verify_metadata
        self.force_gc_allow_when_no_space = force_gc_allow_when_no_space
        self.metrics: GcMetrics = metrics if metrics is not None else _NoMetrics()
        self.usage = EntryLogUsage(target_log_size)
        self.compactor = EntryLogCompactor(
            storage, throttle, max_outstanding=max_outstanding, clock=clock
        )
        self._clock = clock
        self._deletions: list[_Deletion] = []
        self._deletion_cursor: tuple[int, int] | None = None  # see _reclaim
        self._wake = trio.Event()
        self._lock = trio.Lock()
        # Upstream's flags: a forced pass pending or running, and suspended compactions
        # (set by the admin API and by full disks alike).
        self.force_requested = False
        self._force_major: bool | None = None
        self._force_minor: bool | None = None
        self.suspend_major = False
        self.suspend_minor = False
        self.disk_state = DiskState.WRITABLE
        self.running = False
        self.compacting: CompactionKind | None = None
        self.forced_running = False
        self.runs = 0
        self.major_compactions = 0
        self.minor_compactions = 0
        self.last_report: GcRunReport | None = None
        self._forced_done = trio.Event()
        self._last_major = self._last_minor = math.nan  # set when run() starts
        self._last_major_wall = self._last_minor_wall = 0

    # -- control -------------------------------------------------------------------------

    def trigger(self, force_major: bool | None = None, force_minor: bool | None = None) -> bool:
        """Force a pass now (upstream ``enableForceGC``): ``force_major=False`` suspends
        major compaction for that pass, ``None`` keeps the suspension flag as it is; same
        for minor. False if a forced pass is already pending (this request joins it)."""
        if self.force_requested:
            return False
        self.force_requested = True
        self._force_major = force_major
        self._force_minor = force_minor
        self._wake.set()
        return True

    @property
    def forced_pass_done(self) -> trio.Event:
        """Set when the forced pass pending or running now has finished (see
        :attr:`last_report`); a new event after that."""
        return self._forced_done

    def stop_forcing(self) -> None:
        """Upstream ``disableForceGC``: a pending forced pass becomes a normal one."""
        self.force_requested = False

    def suspend(self, *, major: bool = False, minor: bool = False) -> None:
        self.suspend_major |= major
        self.suspend_minor |= minor

    def resume(self, *, major: bool = False, minor: bool = False) -> None:
        if major:
            self.suspend_major = False
        if minor:
            self.suspend_minor = False

    def disk_checked(self, used_fraction: float, warn: float, full: float) -> DiskState:
        """Apply the disk rules (:func:`~bookiesim.gc.policy.disk_actions`) for the worst
        disk's used fraction; returns the new state."""
        return self.disk_state_is(classify_disk(used_fraction, warn, full))

    def disk_state_is(self, state: DiskState) -> DiskState:
        """Apply the disk rules for the worst disk's state as the bookie's disk monitor
        keeps it (a full disk stays full until the monitor finds it writable again, with
        ``diskUsageLwmThreshold``'s hysteresis); returns it."""
        for action in disk_actions(
            self.disk_state, state, force_gc_allowed=self.force_gc_allow_when_no_space
        ):
            if action is DiskAction.FORCE_GC:
                self.trigger()
            elif action is DiskAction.STOP_FORCING:
                self.stop_forcing()
            elif action is DiskAction.SUSPEND_MAJOR:
                self.suspend(major=True)
            elif action is DiskAction.SUSPEND_MINOR:
                self.suspend(minor=True)
            elif action is DiskAction.RESUME_MAJOR:
                self.resume(major=True)
            elif action is DiskAction.RESUME_MINOR:
                self.resume(minor=True)
        if state is not self.disk_state:
            log.info("gc: ledger disks %s -> %s", self.disk_state.name, state.name)
        self.disk_state = state
        return state

    # -- the loop ------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Pass after pass until cancelled; the first one ``gcWaitTime`` after start."""
        now = self._clock()
        self._last_major = self._last_minor = now
        self._last_major_wall = self._last_minor_wall = _wall_millis()
        task_status.started()
        while True:
            with trio.move_on_after(self.gc_wait_time):
                await self._wake.wait()
            self._wake = trio.Event()
            try:
                await self.run_once()
            except OSError as exc:
                # Upstream logs and carries on: the next pass starts from the files again.
                log.error("gc: pass failed, retrying after gcWaitTime: %s", exc)

    async def run_once(self, *, force: bool | None = None) -> GcRunReport:
        """One pass (see the module docstring). ``force`` defaults to whether a forced pass
        was requested; the suspension flags in effect are the current ones, or what the
        forcing request said."""
        async with self._lock:
            if force is None:
                force = self.force_requested
            suspend_major, suspend_minor = self.suspend_major, self.suspend_minor
            if force and self._force_major is not None:
                suspend_major = not self._force_major
            if force and self._force_minor is not None:
                suspend_minor = not self._force_minor
            if math.isnan(self._last_major):
                self._last_major = self._last_minor = self._clock()
            self.running = True
            self.forced_running = force
            try:
                return await self._pass(force, suspend_major, suspend_minor)
            finally:
                self.running = self.forced_running = False
                self.compacting = None
                if force:
                    self.force_requested = False
                    self._force_major = self._force_minor = None
                    self._forced_done.set()
                    self._forced_done = trio.Event()

    async def _pass(self, force: bool, suspend_major: bool, suspend_minor: bool) -> GcRunReport:
        started = self._clock()
        report = GcRunReport(forced=force)
        await self._gc_ledgers(report)
        await self._extract(report)
        await self._reclaim(report)
        kind = choose_compaction(
            self.settings,
            now=self._clock(),
            last_major=self._last_major,
            last_minor=self._last_minor,
            force=force,
            suspend_major=suspend_major,
            suspend_minor=suspend_minor,
        )
        if kind is not None:
            await self._compact(kind, report)
        self._note_reclaimed()
        report.seconds = self._clock() - started
        self.runs += 1
        self.last_report = report
        self.metrics.gc_run(report.seconds)
        return report

    # -- steps ---------------------------------------------------------------------------

    async def _gc_ledgers(self, report: GcRunReport) -> None:
        source = self.ledger_source
        if source is None:
            return
        storage = self.storage
        deleted = await find_deleted_ledgers(
            storage.local_ledger_ids(), source, verify=self.verify_metadata
        )
        for ledger_id in deleted:
            storage.delete_ledger(ledger_id)
        if not deleted:
            return
        report.ledgers_deleted = deleted
        self.metrics.gc_ledgers_deleted(len(deleted))
        log.info("gc: deleted %d ledgers gone from the metadata store", len(deleted))
        ledgers = set(deleted)
        unknown: set[int] = set()
        known: dict[int, set[int]] = {}
        for log_id in storage.log_ids():
            if log_id in self.usage:
                continue
            held = storage.ledgers_of_unflushed_log(log_id)
            if held is None:
                unknown.add(log_id)
                continue
            for ledger_id in ledgers.intersection(held):
                known.setdefault(ledger_id, set()).add(log_id)
        self._deletions.append(_Deletion(self._clock(), ledgers, unknown, known))

    async def _extract(self, report: GcRunReport) -> None:
        storage = self.storage
        # Tracked logs are left out before the flushed test rather than after: the same
        # ids come out (a tracked log was skipped here anyway), but an idle bookie with
        # 1,000 logs no longer tests every one of them for "flushed" every pass.
        for log_id in storage.flushed_log_ids(skip=self.usage.log_ids):
            if log_id in self.usage:
                continue  # tracked by now (cannot happen; kept as the guard it was)
            try:
                meta = await storage.entry_log_metadata(log_id)
            except FileNotFoundError:
                continue  # deleted since it was listed
            except (EntryLogFormatError, OSError) as exc:
                log.warning("gc: cannot read entry log %x, skipped this pass: %s", log_id, exc)
                continue
            report.logs_extracted += 1
            dead = [lid for lid in meta.ledgers if not storage.ledger_exists(lid)]
            for ledger_id in dead:
                meta.remove_ledger(ledger_id)
            if meta.is_empty:
                await self._delete_log(log_id, meta.total_size, report, tracked=False)
            else:
                self.usage.add(meta, dead)

    async def _reclaim(self, report: GcRunReport) -> None:
        # Only ledgers deleted locally since the last reclaim are asked about, not every
        # tracked ledger. Safe: every ledger tracked now was seen to exist after that
        # cursor was taken (a survivor of the last reclaim's check, which ran right at the
        # cursor with no await in between, or a ledger of a log _extract added since,
        # checked then), and a ledger stops existing only by delete_ledger, which the
        # storage lists in deleted_since. When the storage cannot say (first pass, a new
        # collector after a restart, too many deletions since) every ledger is checked.
        storage = self.storage
        cursor = storage.deletion_cursor()
        since = (
            None if self._deletion_cursor is None else storage.deleted_since(self._deletion_cursor)
        )
        self.usage.remove_deleted_ledgers(storage.ledger_exists, since)
        self._deletion_cursor = cursor
        for log_id in self.usage.empty_logs():
            meta = self.usage.get(log_id)
            assert meta is not None
            await self._delete_log(log_id, meta.total_size, report, tracked=True)

    async def _delete_log(
        self, log_id: int, total_size: int, report: GcRunReport, *, tracked: bool
    ) -> None:
        try:
            await self.storage.remove_entry_log(log_id)
        except OSError as exc:
            # A tracked log stays tracked, an untracked one is found again: either way
            # the next pass tries again.
            log.warning("gc: cannot delete entry log %x: %s", log_id, exc)
            self.metrics.gc_reclaim_failed()
            return
        if tracked:
            self.usage.forget(log_id)
        report.logs_deleted.append(log_id)
        report.reclaimed_by_deletion += total_size
        self.metrics.gc_log_deleted("empty", total_size)

    async def _compact(self, kind: CompactionKind, report: GcRunReport) -> None:
        report.compaction = kind
        self.compacting = kind
        threshold = self.settings.threshold(kind)
        max_time = self.settings.max_time(kind)
        started = self._clock()
        for i, log_id in enumerate(self.usage.candidates(threshold)):
            if i > 0 and max_time is not None and self._clock() - started > max_time:
                log.info("gc: %s compaction stopped after its %.3f s limit", kind.value, max_time)
                break
            meta = self.usage.get(log_id)
            if meta is None:
                continue
            try:
                result = await self.compactor.compact(meta)
            except (EntryLogFormatError, OSError) as exc:
                log.warning("gc: compaction of entry log %x failed, log kept: %s", log_id, exc)
                continue
            self.usage.forget(log_id)
            report.compacted.append(result)
            self.metrics.gc_copied(result.entries_copied, result.bytes_copied)
            self.metrics.gc_log_deleted("compacted", result.reclaimed_bytes)
        now, wall = self._clock(), _wall_millis()
        if kind is CompactionKind.MAJOR:
            self._last_major, self._last_major_wall = now, wall
            self.major_compactions += 1
        else:
            self.minor_compactions += 1
        # A major compaction covers a minor one.
        self._last_minor, self._last_minor_wall = now, wall
        self.metrics.gc_compaction(kind.value)

    def _note_reclaimed(self) -> None:
        """Observe delete-to-reclaim latency for ledgers whose bytes are all gone."""
        if not self._deletions:
            return
        existing = set(self.storage.log_ids())
        now = self._clock()
        kept = []
        usage = self.usage

        def unseen(log_ids: set[int]) -> set[int]:
            return {i for i in log_ids if i in existing and i not in usage}

        for deletion in self._deletions:
            deletion.unknown = unseen(deletion.unknown)
            if not deletion.unknown:
                for ledger_id in list(deletion.ledgers):
                    logs = deletion.known.pop(ledger_id, set())
                    if logs := unseen(logs):
                        deletion.known[ledger_id] = logs
                    elif not usage.holds_dead_bytes(ledger_id):
                        deletion.ledgers.discard(ledger_id)
                        self.metrics.gc_reclaim_delay(now - deletion.at)
            if deletion.ledgers:
                kept.append(deletion)
        self._deletions = kept

    # -- introspection -------------------------------------------------------------------

    @property
    def ledgers_awaiting_reclaim(self) -> int:
        return sum(len(d.ledgers) for d in self._deletions)

    def awaiting_reclaim(self) -> list[tuple[int, float]]:
        """(ledger id, when this GC deleted it) for every deleted ledger whose bytes may
        still be on disk (the simulation's liveness check RC bounds the wait)."""
        return sorted((lid, d.at) for d in self._deletions for lid in d.ledgers)

    def status(self) -> dict[str, Any]:
        """Upstream's ``GarbageCollectionStatus`` fields, plus ours."""
        return {
            "forceCompacting": self.forced_running and self.compacting is not None,
            "majorCompacting": self.compacting is CompactionKind.MAJOR,
            "minorCompacting": self.compacting is CompactionKind.MINOR,
            "lastMajorCompactionTime": self._last_major_wall,
            "lastMinorCompactionTime": self._last_minor_wall,
            "majorCompactionCounter": self.major_compactions,
            "minorCompactionCounter": self.minor_compactions,
            "gcRunning": self.running,
            "isInForceGc": self.force_requested,
            "isMajorGcSuspended": self.suspend_major,
            "isMinorGcSuspended": self.suspend_minor,
            "diskState": self.disk_state.name.lower(),
            "gcRuns": self.runs,
            "ledgersAwaitingReclaim": self.ledgers_awaiting_reclaim,
        }

    def _check(self) -> None:
        self.usage._check()
        for deletion in self._deletions:
            assert deletion.ledgers


def _wall_millis() -> int:
    return int(time.time() * 1000)
