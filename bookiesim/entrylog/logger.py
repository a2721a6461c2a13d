"""The entry logger: the one object the bookie's ledger storage talks to about entry logs.

Upstream's ``DefaultEntryLogger`` in our terms: it owns the log files (through
:class:`~bookiesim.entrylog.log_files.LogFiles`), delegates "which log does this entry go to"
to one of the two managers in :mod:`bookiesim.entrylog.managers`, reads entries back, runs
checkpoints, and answers the garbage collector's questions (which logs are flushed, delete
this one).

Reads
-----
A location names a log. If that log is still open for writing (active, preallocated, or
rotated but stuck after a write error) the read goes through its writer, which also sees
bytes still in the write buffer. Otherwise it goes through an :class:`EntryLogReader` from
a least-recently-used cache capped at ``max_open_read_files``; evicting a reader closes its
descriptor. (Upstream keeps one read descriptor per log ever read, for ever.) Reads never
count as a ledger's access for expiry or eviction.

Checkpoints
-----------
In three steps, so that the fsyncs run on a worker thread: :meth:`EntryLogger.prepare_checkpoint`,
:meth:`CheckpointPlan.sync`, :meth:`EntryLogger.complete_checkpoint` (see
:mod:`bookiesim.entrylog.checkpoint`). Completing moves the logs rotated before the plan was
made to FLUSHED, which is what advances leastUnflushedLogId.

Life cycle and rotation
-----------------------
Each log's state (RESERVED, POOLED, PREALLOCATED, ACTIVE, ROTATED, then FLUSHED and DELETED)
is kept by :class:`~bookiesim.entrylog.log_files.LogFiles` under the one table of
:mod:`bookiesim.entrylog.lifecycle`; when a log rotates is decided by the one
:class:`~bookiesim.entrylog.rotation.RotationPolicy` of :mod:`bookiesim.entrylog.rotation`,
which the bookie asks through this class (:meth:`EntryLogger.rotate_ledger`,
:attr:`EntryLogger.expires_on_timer`) rather than deciding again.

Preallocation pool
------------------
With ``preallocation_pool_size > 0`` (``entryLogPreallocationPoolSize``) new logs come from
a pool of empty log files created ahead of need, so that an add that needs a new log opens
an existing file instead of creating one (see :mod:`bookiesim.entrylog.pool`). The
logger stays free of trio and threads: whoever owns it refills the pool by calling
:meth:`EntryLogger.preallocate_some` on a worker thread while
:meth:`EntryLogger.needs_preallocation` holds, and learns when to do so again from
:meth:`EntryLogger.notify_when_preallocation_needed`. The bookie does it in a trio task::

    while True:
        while logger.needs_preallocation():
            await run_blocking(logger.preallocate_some)
        wake = trio.Event()
        logger.notify_when_preallocation_needed(wake.set)
        await wake.wait()

Nobody refilling is fine too: adds then create logs synchronously, as with a pool of 0.

Everything except :meth:`CheckpointPlan.sync` and :meth:`EntryLogger.preallocate_some`
belongs to one thread. Time is read only through the ``clock`` given (the bookie passes
``trio.current_time``, so virtual time in tests works).
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from typing import TYPE_CHECKING

from bookiesim.entrylog.allocator import list_log_ids
from bookiesim.entrylog.checkpoint import CheckpointPlan, checkpoint_needed, make_plan
from bookiesim.entrylog.config import DEFAULT_LOG_SIZE_LIMIT, EntryLogConfig
from bookiesim.entrylog.lifecycle import LogState
from bookiesim.entrylog.log_files import LogFiles, RotatedLog
from bookiesim.entrylog.managers import (
    EntryLogManager,
    EntryLogManagerForEntryLogPerLedger,
    EntryLogManagerForSingleEntryLog,
)
from bookiesim.entrylog.metadata import EntryLogMetadata, extract_metadata
from bookiesim.entrylog.reader import EntryLogReader, find_log_file, read_entry
from bookiesim.entrylog.rotation import RotationEvent, RotationPolicy, RotationReason
from bookiesim.entrylog.writer import DEFAULT_WRITE_BUFFER_SIZE, EntryLogWriter

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Container, Sequence
    from pathlib import Path

__all__ = [
    "CheckpointPlan",
    "EntryLogConfig",
    "EntryLogger",
    "RotatedLog",
    "RotationEvent",
    "RotationReason",
]


class EntryLogger:
    """Entry logs of one bookie: adds, reads, rotations, checkpoints, GC queries.

    ``per_ledger`` picks :class:`EntryLogManagerForEntryLogPerLedger` (a log per ledger,
    BP-32) or :class:`EntryLogManagerForSingleEntryLog` (upstream's interleaved log). With
    ``upstream_behaviour``, per-ledger logs expire only lazily on later adds
    (:meth:`expire_idle` does nothing), BP-32's write-close, fence and replication rotations
    are ignored, and :meth:`flushed_log_ids` offers GC only ids below leastUnflushedLogId.
    Two switches re-create upstream bugs for fault campaigns (never for real use):
    ``gc_below_pointer_only`` is that last part of ``upstream_behaviour`` alone (#2728), and
    ``garbage_header`` leaves new logs' headers not zero-filled and makes
    :meth:`entry_log_metadata` believe a header's ledgers map (the data loss of PR #4607).
    ``on_rotate`` is called for every rotation, on the thread that caused it; it must not
    raise.
    """

    def __init__(
        self,
        ledger_dirs: Sequence[str | os.PathLike[str]],
        *,
        per_ledger: bool = True,
        log_size_limit: int = DEFAULT_LOG_SIZE_LIMIT,
        expiry_seconds: float = 300,
        max_active_logs: int = 500,
        max_open_read_files: int = 1000,
        write_buffer_size: int = DEFAULT_WRITE_BUFFER_SIZE,
        flush_entrylog_bytes: int = 0,
        writeback_bytes: int = 0,
        preallocation: bool = True,
        preallocation_pool_size: int = 0,
        upstream_behaviour: bool = False,
        gc_below_pointer_only: bool = False,
        garbage_header: bool = False,
        clock: Callable[[], float] = time.monotonic,
        on_rotate: Callable[[RotationEvent], None] | None = None,
    ) -> None:
        if max_open_read_files < 1:
            raise ValueError(f"max_open_read_files must be at least 1, not {max_open_read_files}")
        self._files = LogFiles(
            ledger_dirs,
            preallocation=preallocation,
            pool_size=preallocation_pool_size,
            write_buffer_size=write_buffer_size,
            flush_entrylog_bytes=flush_entrylog_bytes,
            writeback_bytes=writeback_bytes,
            on_rotate=on_rotate,
            zero_headers=not garbage_header,
        )
        self._per_ledger = per_ledger
        self._upstream = upstream_behaviour
        self._policy = RotationPolicy(
            per_ledger=per_ledger,
            upstream_behaviour=upstream_behaviour,
            log_size_limit=log_size_limit,
            expiry_seconds=expiry_seconds,
            max_active_logs=max_active_logs,
        )
        self._gc_below_pointer = upstream_behaviour or gc_below_pointer_only
        self._trust_ledgers_map = garbage_header
        self._clock = clock
        fsync_before_roll = flush_entrylog_bytes > 0
        self._manager: EntryLogManager
        if per_ledger:
            self._manager = EntryLogManagerForEntryLogPerLedger(
                self._files, policy=self._policy, clock=clock, fsync_before_roll=fsync_before_roll
            )
        else:
            self._manager = EntryLogManagerForSingleEntryLog(
                self._files, policy=self._policy, fsync_before_roll=fsync_before_roll
            )
        self._readers: OrderedDict[int, EntryLogReader] = OrderedDict()
        self._max_readers = max_open_read_files
        self._dirs_synced = list(self._files.dir_creations)
        self._pointer_seen = self._files.status.position
        self._closed = False

    @classmethod
    def from_config(
        cls,
        cfg: EntryLogConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_rotate: Callable[[RotationEvent], None] | None = None,
    ) -> EntryLogger:
        """An entry logger configured by upstream's keys (see ``docs/configuration.md``)."""
        return cls(
            cfg.ledger_directories,
            per_ledger=cfg.entry_log_per_ledger_enabled,
            log_size_limit=cfg.log_size_limit,
            expiry_seconds=cfg.entrylog_map_access_expiry_time_in_seconds,
            max_active_logs=cfg.maximum_number_of_active_entry_logs,
            max_open_read_files=cfg.entry_log_max_open_read_files,
            write_buffer_size=cfg.write_buffer_size_bytes,
            flush_entrylog_bytes=cfg.flush_entrylog_bytes,
            writeback_bytes=cfg.entry_log_writeback_bytes,
            preallocation=cfg.entry_log_file_preallocation_enabled,
            preallocation_pool_size=cfg.entry_log_preallocation_pool_size,
            upstream_behaviour=cfg.upstream_behaviour,
            gc_below_pointer_only=cfg.unsafe_gc_below_least_unflushed_only,
            garbage_header=cfg.unsafe_entry_log_garbage_header,
            clock=clock,
            on_rotate=on_rotate,
        )

    # ---------------------------------------------------------------- configuration

    @property
    def per_ledger(self) -> bool:
        return self._per_ledger

    @property
    def upstream_behaviour(self) -> bool:
        return self._upstream

    @property
    def rotation_policy(self) -> RotationPolicy:
        """The rules deciding every rotation (and the upstream-behaviour gate)."""
        return self._policy

    @property
    def expires_on_timer(self) -> bool:
        """Whether the owner should call :meth:`expire_idle` on a timer (per-ledger mode
        without ``upstream_behaviour``); the bookie runs its expiry loop on this."""
        return self._policy.timer_expiry

    @property
    def trusts_ledgers_map(self) -> bool:
        """The #4607 bug switch is on: ledgers maps are believed (whoever reads them)."""
        return self._trust_ledgers_map

    @property
    def current_dirs(self) -> tuple[Path, ...]:
        """``<ledger dir>/current`` for every ledger dir: where the logs live."""
        return self._files.current_dirs

    @property
    def manager(self) -> EntryLogManager:
        """The manager in use (tests, introspection, and :mod:`.deferred`)."""
        return self._manager

    # ---------------------------------------------------------------- adds and reads

    def add_entry(self, ledger_id: int, body: bytes) -> int:
        """Append one entry (the client's packaged body; bytes 0..8 are ``ledger_id``) and
        return its location ``(log_id << 32) | pos``.

        The entry is readable at once and durable after the next checkpoint. Rolls the log
        first on size; in per-ledger mode may rotate the least recently written ledger's log
        to stay within ``max_active_logs``. An ``OSError`` from the write rotates the log
        (:attr:`RotationReason.WRITE_ERROR`) before it propagates; entries added earlier
        stay readable. ``ValueError`` for a body that is too short or names another ledger.
        """
        return self._manager.add_entry(ledger_id, body)

    def add_entries(
        self, ledger_id: int, bodies: Sequence[bytes], *, defer_writes: bool = False
    ) -> list[int]:
        """:meth:`add_entry` of each body in turn (the same rolls, evictions and write-error
        rotation), in one pass per log rather than a call per entry: the sorted storage's
        flush writes each ledger's entries as one run. Returns their locations in order.
        ``ValueError`` for a body too short or of another ledger; the run is then written up
        to the stretch (the part that went to one log) that holds it.

        ``defer_writes``: the buffers the run fills are not written here but kept for
        :func:`~bookiesim.entrylog.deferred.take_pending_write` (the entries are readable
        meanwhile, and a flush or checkpoint writes them in any case).
        """
        return self._manager.add_entries(ledger_id, bodies, defer_writes=defer_writes)

    def read_entry(self, ledger_id: int, entry_id: int, location: int) -> bytes:
        """The body stored at ``location``, checked to be entry ``(ledger_id, entry_id)``.

        Raises :class:`~bookiesim.entrylog.reader.EntryReadError` subclasses for a location
        that does not hold that entry, ``FileNotFoundError`` for a log that does not exist.
        """
        log_id = location >> 32
        writer = self._files.open_writer(log_id)
        if writer is not None:
            return read_entry(writer, ledger_id, entry_id, location)
        readers = self._readers
        reader = readers.get(log_id)
        if reader is None:
            reader = self._open_reader(log_id)
        else:
            readers.move_to_end(log_id)
        return read_entry(reader, ledger_id, entry_id, location)

    def _open_reader(self, log_id: int) -> EntryLogReader:
        if self._closed:
            raise ValueError("the entry logger is closed")
        reader = EntryLogReader.open_log(self._files.current_dirs, log_id)
        readers = self._readers
        while len(readers) >= self._max_readers:
            _, evicted = readers.popitem(last=False)
            evicted.close()
        readers[log_id] = reader
        return reader

    # ---------------------------------------------------------------- rotation

    def rotate_ledger(self, ledger_id: int, reason: RotationReason) -> bool:
        """Rotate the ledger's active log now: append its ledgers map and queue it for the
        next checkpoint, which lets leastUnflushedLogId pass it.

        For BP-32's signals (write-close, fencing read, write error, replication done) and
        anything else that knows a ledger's log is finished. False if the ledger has no
        active log, always in single-log mode (the shared log serves other ledgers too), and
        for write-close, fence and replication with ``upstream_behaviour`` (upstream has no
        such rotations): the rotation policy decides.
        """
        return self._manager.rotate_ledger(ledger_id, reason)

    def create_new_log(self, ledger_id: int) -> int:
        """Give ``ledger_id`` a fresh log now (upstream ``createNewLog``); return its id.

        A log the ledger held is rotated with :attr:`RotationReason.SIZE` (upstream's roll);
        in single-log mode the shared log rolls. For tests and tools; adds create logs as
        needed.
        """
        return self._manager.create_new_log(ledger_id).log_id

    def expire_idle(self) -> list[RotationEvent]:
        """Rotate every per-ledger log not written for ``expiry_seconds`` or more.

        Called by the bookie's timer (see :meth:`next_expiry_deadline`); a no-op with
        ``upstream_behaviour`` and in single-log mode.
        """
        return self._manager.expire_idle(self._clock())

    def next_expiry_deadline(self) -> float | None:
        """Clock time at which the least recently written log expires; None if none will
        (no active logs, single-log mode, or ``upstream_behaviour``)."""
        return self._manager.next_expiry_deadline()

    # ---------------------------------------------------------------- checkpoints

    @property
    def needs_checkpoint(self) -> bool:
        """Whether :meth:`prepare_checkpoint` would plan anything (:func:`checkpoint_needed`):
        an idle bookie skips its checkpoint on this word."""
        return checkpoint_needed(self._files, self._dirs_synced)

    def prepare_checkpoint(self) -> CheckpointPlan:
        """Step 1, owner thread: hand every active and rotated log's buffer to the OS and
        list what to fsync (:func:`make_plan`).

        Raises ``OSError`` if a buffer cannot be written (a log stuck after a write error):
        the checkpoint must then not complete, so the journal keeps those entries.
        """
        return make_plan(self._files, self._dirs_synced)

    def complete_checkpoint(self, plan: CheckpointPlan) -> None:
        """Step 3, owner thread: record persisted positions; mark the plan's rotated logs
        flushed (closing any still open), which advances leastUnflushedLogId (§4)."""
        if not plan.synced:
            raise RuntimeError("complete_checkpoint needs a plan whose sync() succeeded")
        for writer, position in plan.persisted_positions:
            if not writer.closed:
                writer.mark_persisted(position)
        files = self._files
        for log_id in plan.rotated_log_ids:
            files.mark_flushed(log_id)
        marks = zip(self._dirs_synced, plan.dir_marks, strict=True)
        self._dirs_synced = [max(a, b) for a, b in marks]
        self._pointer_seen = max(self._pointer_seen, files.status.position)

    def checkpoint(self) -> None:
        """The three steps in a row, on this thread (tests, shutdown, replay)."""
        plan = self.prepare_checkpoint()
        plan.sync()
        self.complete_checkpoint(plan)

    # ---------------------------------------------------------------- leastUnflushedLogId, GC

    @property
    def least_unflushed_log_id(self) -> int:
        return self._files.status.least_unflushed_log_id

    def is_flushed_log_id(self, log_id: int) -> bool:
        """True if the log was rotated and checkpointed in this run, or is older than the
        pointer (all logs of earlier runs); across an id wrap-around, see
        :mod:`bookiesim.entrylog.recent_logs`."""
        return self._files.is_flushed(log_id)

    def flushed_log_ids(self, skip: Container[int] = ()) -> list[int]:
        """Ids of ``*.log`` files in all ledger dirs that GC may touch, ascending, leaving
        out the ids in ``skip`` (GC passes the logs it tracks already: the flushed test is
        then made only for the few logs it could still extract, not every log every pass).

        Upstream ≥ 4.16 (``getFlushedLogIds``): every listed id for which
        :meth:`is_flushed_log_id` holds. With ``upstream_behaviour``: only ids below
        leastUnflushedLogId, as GC saw them up to 4.14 — one long-lived active log then
        hides every newer log from GC (issue #2728). Either way an id must also pass
        :meth:`is_flushed_log_id`: after an id wrap-around the new small ids are below the
        pointer while they are still being written (upstream would offer them to GC).
        """
        listed = list_log_ids(self._files.current_dirs)
        # The tracked logs left out before sorting: an idle bookie with 1,000 tracked logs
        # sorts the few it could still extract, not all of them, every pass.
        ids = sorted(i for i in listed if i not in skip) if skip else sorted(listed)
        if self._gc_below_pointer:
            pointer = self.least_unflushed_log_id
            ids = [i for i in ids if i < pointer]
        return self._files.flushed_among(ids)

    def log_ids(self) -> list[int]:
        """Ids of every ``*.log`` file in the ledger dirs, ascending."""
        return sorted(list_log_ids(self._files.current_dirs))

    def remove_entry_log(self, log_id: int) -> bool:
        """Delete a log (GC): close its read handle, unlink its file; False if there was none.

        ``ValueError`` for a log not flushed yet (reserved, pooled, open for writing, or
        rotated but not yet checkpointed): the life-cycle table allows deleting only
        flushed logs.
        """
        removed = self._files.delete(log_id)  # refused before any I/O if not flushed
        reader = self._readers.pop(log_id, None)
        if reader is not None:
            reader.close()
        return removed

    def ledgers_of_log(self, log_id: int) -> list[int] | None:
        """Ledgers with bytes in a log open for writing, pooled, or queued for the next
        checkpoint, without reading it; None if that is not known here (a flushed log, or a
        rotated log of the single interleaved log)."""
        writer = self._files.open_writer(log_id)
        if writer is not None:
            return list(writer.ledger_sizes)
        record = self._files.rotated_log(log_id)
        if record is not None and record.ledger_id is not None:
            return [record.ledger_id]
        if record is None and self._files.state_of(log_id) is LogState.POOLED:
            return []  # created empty ahead of need
        return None

    def entry_log_metadata(self, log_id: int) -> EntryLogMetadata:
        """Ledger -> bytes of a log: from memory while it is open for writing, else from its
        ledgers map or a scan (:func:`~bookiesim.entrylog.metadata.extract_metadata`)."""
        writer = self._files.open_writer(log_id)
        if writer is not None:
            return EntryLogMetadata.from_ledger_sizes(log_id, writer.ledger_sizes)
        record = self._files.rotated_log(log_id)
        path = record.path if record is not None else None
        if path is None:
            reader = self._readers.get(log_id)
            path = reader.path if reader is not None else None
        if path is None:
            path = find_log_file(self._files.current_dirs, log_id)
        return extract_metadata(path, log_id, trust_header=self._trust_ledgers_map)

    # ---------------------------------------------------------------- introspection

    @property
    def active_log_count(self) -> int:
        return self._manager.active_log_count

    @property
    def rotated_log_count(self) -> int:
        """Rotated logs waiting for a checkpoint."""
        return self._files.rotated_count

    @property
    def open_write_files(self) -> int:
        """Descriptors open for writing: active logs + the preallocated one + rotated logs
        stuck after a write error. Pooled logs hold none (see :meth:`pooled_log_ids`)."""
        return self._files.open_writer_count

    @property
    def open_read_files(self) -> int:
        """Read descriptors in the reader cache (≤ ``max_open_read_files``)."""
        return len(self._readers)

    @property
    def rotations(self) -> Counter[RotationReason]:
        """Rotations by reason since this logger started (live, do not modify)."""
        return self._files.rotations

    def active_logs(self) -> dict[int, int]:
        """Ledger id -> active log id (single-log mode: every ledger in the shared log)."""
        return self._manager.active_logs()

    def current_log_id(self, ledger_id: int) -> int | None:
        """The ledger's active log id, without counting as an access."""
        writer = self._manager.current_log(ledger_id)
        return None if writer is None else writer.log_id

    def rotated_log_ids(self) -> list[int]:
        """Rotated logs waiting for a checkpoint, in rotation order."""
        return [record.log_id for record in self._files.rotated_logs()]

    @property
    def preallocated_log_id(self) -> int | None:
        return self._files.preallocated_log_id

    # ---------------------------------------------------------------- preallocation pool

    @property
    def preallocation_pool_size(self) -> int:
        """Pooled logs kept ahead of need (0: none; 0 also with preallocation off)."""
        return self._files.pool.size

    def pooled_log_ids(self) -> list[int]:
        """Empty logs created ahead of need, not open, registered unflushed, in the order
        they will be used (per ledger dir)."""
        return self._files.pool.log_ids()

    def needs_preallocation(self) -> bool:
        """True if :meth:`preallocate_some` has logs to create now."""
        return self._files.pool.needs_filling()

    def preallocate_some(self, count: int | None = None) -> int:
        """Create up to ``count`` pooled logs (default: fill the pool); return how many.

        Blocking file creation: run it on a worker thread (it is thread-safe, and holds the
        io lock only between files). Errors are logged and pause preallocation until the
        next log is taken; they never reach the caller.
        """
        return self._files.pool.fill(count)

    def notify_when_preallocation_needed(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, on the owner thread, when the pool runs low (at once if
        :meth:`needs_preallocation` already holds); it must not raise."""
        self._files.pool.notify_when_needed(callback)

    def open_writer(self, log_id: int) -> EntryLogWriter | None:
        """The writer of a log open for writing (read-only use: tests, metrics)."""
        return self._files.open_writer(log_id)

    def log_path(self, log_id: int) -> Path:
        """Where log ``log_id`` is (or would be, if open or queued)."""
        writer = self._files.open_writer(log_id)
        if writer is not None:
            return writer.path
        record = self._files.rotated_log(log_id)
        if record is not None:
            return record.path
        return find_log_file(self._files.current_dirs, log_id)

    # ---------------------------------------------------------------- closing

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Flush every log to the OS and close everything; no ledgers maps, no fsync.

        As upstream: the logs active at shutdown keep a header offset of 0 and are scanned
        after a restart. Call :meth:`checkpoint` first for durability. If a
        :meth:`CheckpointPlan.sync` is in flight on another thread, closing waits for each
        fsync in progress (safe, but it blocks). Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        active = self._manager.active_writers()
        self._manager.close()
        try:
            self._files.close(active)
        finally:
            for reader in self._readers.values():
                reader.close()
            self._readers.clear()

    def __enter__(self) -> EntryLogger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check(self) -> None:
        """Assert every invariant (sortedcontainers style). O(open + rotated + read handles).

        One ledger per log (per-ledger mode), active ≤ ``max_active_logs``, write order
        matches write times, every open or queued log registered unflushed, dir accounting,
        read handles ≤ the cap and never for a log open for writing, leastUnflushedLogId
        never below any value seen before.
        """
        manager = self._manager
        active = manager.active_writers()
        assert len(active) == manager.active_log_count
        self._files._check(active)
        manager._check()
        if not self._per_ledger:
            assert len(active) <= 1
        assert len(self._readers) <= self._max_readers
        for log_id, reader in self._readers.items():
            assert reader.log_id == log_id
            assert not reader.closed
            assert self._files.open_writer(log_id) is None, f"log {log_id}: reader and writer"
        position = self._files.status.position
        assert position >= self._pointer_seen, (position, self._pointer_seen)
        self._pointer_seen = position
        for writer in active:
            assert not self.is_flushed_log_id(writer.log_id)
