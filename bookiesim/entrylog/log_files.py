"""The entry log files of one bookie, and the state of each (upstream ``EntryLoggerAllocator``
and the file half of ``EntryLogManagerBase``). Theory of operation:

:class:`LogFiles` owns ids (through :class:`~bookiesim.entrylog.allocator.EntryLogIdAllocator`),
the choice of ledger dir, preallocation (with :mod:`bookiesim.entrylog.pool`), every
:class:`~bookiesim.entrylog.writer.EntryLogWriter` open for writing, the queue of rotated
logs waiting for a checkpoint, and the registration of every new log with
:class:`~bookiesim.entrylog.recent_logs.RecentEntryLogsStatus` (leastUnflushedLogId). It
keeps every log's :class:`~bookiesim.entrylog.lifecycle.LogState` in one map and changes it
only through the table of :mod:`bookiesim.entrylog.lifecycle`; :meth:`LogFiles._check`
asserts that the map and the structures that hold the logs agree. The managers decide which
log a ledger writes to and when it rotates (:mod:`bookiesim.entrylog.rotation`); they ask
this class for a log (:meth:`~LogFiles.activate_log`) and hand it back
(:meth:`~LogFiles.rotate`); the checkpoint marks rotated logs flushed
(:meth:`~LogFiles.mark_flushed`) and GC deletes flushed ones (:meth:`~LogFiles.delete`).

Rotation always does the same thing whatever its reason: append the ledgers map, hand the
buffer to the OS, close the descriptor, and queue the log for the next checkpoint; why the
descriptor is closed at rotation, and why the preallocated log pins leastUnflushedLogId, is
told with the states in :mod:`bookiesim.entrylog.lifecycle`. Ledger dir choice: the dir with
the fewest active logs, ties to the preallocated log's dir and then to the first dir. If the
preallocated log sits in a dir that is not among the least loaded, it is swapped for a
pooled log of that dir (going back to its own dir's pool) or, with none, moved (it was never
written to: close, unlink, create again with the same id), so logs spread evenly with
preallocation on as well as off (upstream keeps the preallocated log where it was made).

Threads: everything runs on the owner thread (the bookie's trio thread) except the
checkpoint's fsync pass (:mod:`bookiesim.entrylog.checkpoint`) and the pool's
:meth:`~bookiesim.entrylog.pool.PreallocationPool.fill`. ``io_lock`` guards what they share
— closing descriptors (so the fsync pass never duplicates one closed, and maybe reused,
under it), the allocator, ``status``, the pool, pooled and reserved logs' states, and
``dir_creations`` — held for microseconds: never across an fsync or a file creation.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bookiesim.entrylog.allocator import EntryLogIdAllocator, list_log_ids
from bookiesim.entrylog.format import log_file_name
from bookiesim.entrylog.lifecycle import LogEvent, LogState, next_state, tracked
from bookiesim.entrylog.pool import PreallocationPool
from bookiesim.entrylog.recent_logs import RecentEntryLogsStatus
from bookiesim.entrylog.rotation import RotationEvent, RotationReason
from bookiesim.entrylog.writer import DEFAULT_WRITE_BUFFER_SIZE, EntryLogWriter

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

__all__ = ["LogFiles", "RotatedLog"]

_log = logging.getLogger(__name__)

_SPARE_BUFFERS = 4
"""Write buffers of closed writers kept for new ones (allocating 64 KiB costs more)."""


@dataclass(slots=True)
class RotatedLog:
    """A rotated log waiting for the checkpoint that fsyncs it and marks it flushed.

    ``writer`` is None once the log's bytes are all in the OS and its descriptor is closed
    (the normal case); it stays set only for a log whose buffer could not be written out.
    """

    log_id: int
    fspath: str
    ledger_id: int | None
    reason: RotationReason
    writer: EntryLogWriter | None

    @property
    def path(self) -> Path:
        return Path(self.fspath)


class LogFiles:
    """The entry log files under both managers, each in one state of its life cycle.

    Components read from outside: ``allocator``, ``status`` (leastUnflushedLogId), ``pool``,
    ``rotations`` (counts by reason), ``io_lock``, ``dir_creations``, ``current_dirs``.
    Which log is where is asked through methods (:meth:`state_of`, :meth:`open_writer`,
    :meth:`rotated_log`, ...), never read from the structures that hold them.
    """

    def __init__(
        self,
        ledger_dirs: Sequence[str | os.PathLike[str]],
        *,
        preallocation: bool = True,
        pool_size: int = 0,
        write_buffer_size: int = DEFAULT_WRITE_BUFFER_SIZE,
        flush_entrylog_bytes: int = 0,
        writeback_bytes: int = 0,
        on_rotate: Callable[[RotationEvent], None] | None = None,
        zero_headers: bool = True,
    ) -> None:
        if pool_size < 0:
            raise ValueError(f"pool_size must be at least 0, not {pool_size}")
        self.allocator = EntryLogIdAllocator(ledger_dirs, last_id_in_place=True)
        self.current_dirs: tuple[Path, ...] = self.allocator.current_dirs
        self._dir_strs = tuple(os.fspath(d) for d in self.current_dirs)
        # §2.7: leastUnflushedLogId starts one above the last id found at startup, so every
        # log of an earlier run counts as flushed (they are closed files). Logs numbered above
        # it exist only if an earlier run wrapped around: they are older still.
        recovered = self.allocator.recovered_last_id
        above = [i for i in list_log_ids(self.current_dirs) if i > recovered]
        self.status = RecentEntryLogsStatus(
            recovered + 1, flushed_from=min(above) if above else None
        )
        self._states: dict[int, LogState] = {}  # every log not in a final state
        self._writers: dict[int, EntryLogWriter] = {}  # open: preallocated, active, kept
        self._rotated: dict[int, RotatedLog] = {}  # in rotation order
        self._preallocated: EntryLogWriter | None = None
        self.rotations: Counter[RotationReason] = Counter()
        self.io_lock = threading.Lock()
        self.dir_creations = [0] * len(self.current_dirs)
        """Files created per dir; the checkpoint fsyncs a dir whose count moved."""
        self._active_in_dir = [0] * len(self.current_dirs)
        self._dir_of: dict[int, int] = {}  # log id -> dir index, for every writer
        self._preallocation = preallocation
        self.pool = PreallocationPool(
            self, self._dir_strs, pool_size if preallocation else 0, self.io_lock
        )
        """Empty logs made ahead of need (filled by the owner's worker thread)."""
        self._spare_buffers: list[bytearray] = []
        self.look_ahead = len(self.current_dirs) > 1 or bool(above)
        """Whether the allocator stats every dir for an id's file before handing it out.
        With one dir, creating the file exclusively is the same check for one syscall less,
        as long as existing files are rare: after the first collision (typically after an
        id wrap-around, with old logs about) ids are looked for again."""
        self._write_buffer_size = write_buffer_size
        self._unpersisted_bound = max(0, flush_entrylog_bytes)
        self._writeback_bytes = max(0, writeback_bytes)
        self._on_rotate = on_rotate
        self._zero_headers = zero_headers
        self._closed = False

    # ---------------------------------------------------------------- states

    def _move(self, log_id: int, event: LogEvent) -> None:
        """The one place a log changes state: by the table, or IllegalTransition."""
        states = self._states
        state = next_state(log_id, states.get(log_id, LogState.FLUSHED), event)
        if tracked(state):
            states[log_id] = state
        else:
            del states[log_id]

    def state_of(self, log_id: int) -> LogState:
        """The log's state; FLUSHED for a log not tracked (flushed in this run, of an earlier
        run, deleted, given up, or never made: the final states are not kept)."""
        return self._states.get(log_id, LogState.FLUSHED)

    def logs_in(self, state: LogState) -> list[int]:
        """Ids of the logs in a (non-final) state, ascending."""
        with self.io_lock:
            return sorted(i for i, s in self._states.items() if s is state)

    def open_writer(self, log_id: int) -> EntryLogWriter | None:
        """The writer of a log open for writing: active, preallocated, or rotated and kept
        open after a write error."""
        return self._writers.get(log_id)

    def open_writers(self) -> list[EntryLogWriter]:
        return list(self._writers.values())

    @property
    def open_writer_count(self) -> int:
        return len(self._writers)

    def writers_to_flush(self) -> list[EntryLogWriter]:
        """Every open writer but the preallocated one (a 0-byte file until first use, which
        nothing needs to make durable)."""
        pre = self._preallocated
        return [w for w in self._writers.values() if w is not pre]

    @property
    def preallocated_log_id(self) -> int | None:
        pre = self._preallocated
        return None if pre is None else pre.log_id

    def rotated_log(self, log_id: int) -> RotatedLog | None:
        return self._rotated.get(log_id)

    def rotated_logs(self) -> list[RotatedLog]:
        """Rotated logs waiting for a checkpoint, in rotation order."""
        return list(self._rotated.values())

    @property
    def rotated_count(self) -> int:
        return len(self._rotated)

    # ---------------------------------------------------------------- creating logs

    @property
    def closed(self) -> bool:
        return self._closed

    def activate_log(self) -> EntryLogWriter:
        """A log for a manager: the preallocated one (moved if need be) or a new one, now
        ACTIVE. The caller installs it; it counts as active in its dir from now on."""
        if self._closed:
            raise ValueError("the entry logger is closed")
        loads = self._active_in_dir
        least = min(loads)
        writer = self._preallocated
        if writer is not None:
            self._preallocated = None
            if loads[self._dir_of[writer.log_id]] != least:
                writer = self._move_preallocated(writer, loads.index(least))
        else:
            writer = self._open_log(loads.index(least))
        self._move(writer.log_id, LogEvent.ACTIVATE)
        loads[self._dir_of[writer.log_id]] += 1
        if self._preallocation:
            try:
                self._preallocated = self._open_log(loads.index(min(loads)))
            except OSError:
                # Upstream reports a failed preallocation at the next creation; here the next
                # creation simply allocates synchronously (and fails there if it must).
                _log.warning("could not preallocate an entry log", exc_info=True)
        return writer

    def _open_log(self, dir_index: int) -> EntryLogWriter:
        """A writer (PREALLOCATED) on the oldest pooled log of the dir, or on a log created
        now."""
        pool = self.pool
        while (log_id := pool.take(dir_index)) is not None:
            try:
                writer = self._writer(dir_index, log_id, create=False)
            except (FileNotFoundError, FileExistsError):
                # Gone, or not empty: not the file we made. Never write to it; give the id up.
                _log.warning("preallocated entry log %x is unusable", log_id, exc_info=True)
                with self.io_lock:
                    self.give_up(log_id)
                continue
            except BaseException:
                pool.put_back(dir_index, log_id)
                raise
            self._register(writer, dir_index)
            pool.taken()
            return writer
        writer = self._create_reserved(dir_index) or self._allocate(dir_index)
        pool.taken()
        return writer

    def _create_reserved(self, dir_index: int) -> EntryLogWriter | None:
        """A log created now under an id preallocation reserved (None if there is none):
        the pool ran dry while its files are still being made; ``lastId`` already names
        the id, so this costs the file creation alone."""
        while (log_id := self.pool.take_reserved()) is not None:
            try:
                writer = self._writer(dir_index, log_id, create=True)
            except BaseException as e:
                with self.io_lock:
                    self.give_up(log_id)
                if isinstance(e, FileExistsError):
                    self.look_ahead = True
                    continue
                raise
            with self.io_lock:
                self.dir_creations[dir_index] += 1
            self._register(writer, dir_index)
            return writer
        return None

    def _writer(self, dir_index: int, log_id: int, *, create: bool) -> EntryLogWriter:
        spare = self._spare_buffers
        return EntryLogWriter(
            self._dir_strs[dir_index],
            log_id,
            write_buffer_size=self._write_buffer_size,
            unpersisted_bytes_bound=self._unpersisted_bound,
            writeback_bytes=self._writeback_bytes,
            create=create,
            buffer=spare.pop() if spare else None,
            zero_header=self._zero_headers,
        )

    def _allocate(self, dir_index: int) -> EntryLogWriter:
        """Create a log now, on this thread (no pooled log at hand). The io lock is held to
        allocate the id, not while the file is created (up to milliseconds here).

        With a pool, the ids it lacks are reserved in the same call: one ``lastId`` write
        for all of them instead of one per log while churn outruns the pool's worker (who
        makes their files, unless this thread needs them first: :meth:`_create_reserved`).
        """
        pool = self.pool
        while True:
            with self.io_lock:
                log_id, *rest = self.reserve_ids(max(1, pool.size - pool.level()))
                pool.reserved.extend(rest)
            try:
                writer = self._writer(dir_index, log_id, create=True)
            except BaseException as e:
                with self.io_lock:
                    self.give_up(log_id)
                if isinstance(e, FileExistsError):
                    self.look_ahead = True
                    continue  # not ours; the next id (looked for from now on) skips it
                raise
            break
        with self.io_lock:
            self.dir_creations[dir_index] += 1
        self._register(writer, dir_index)
        return writer

    def reserve_ids(self, count: int) -> list[int]:
        """Allocate ids and register them unflushed, before any file exists: each is born
        RESERVED. Under io_lock.

        Registering first means a log file of this run is never seen unregistered (which
        reads as flushed to GC). The allocator hands out ids in increasing order until it
        wraps around, so an id not above the one before it starts a new round in ``status``
        (equal only if it came all the way round).
        """
        previous = self.allocator.last_allocated_id
        ids = self.allocator.reserve(count, skip_existing=self.look_ahead)
        created = self.status.created
        states = self._states
        for log_id in ids:
            created(log_id, wrapped=log_id <= previous)
            previous = log_id
            assert log_id not in states, f"entry log {log_id:x} is reserved again"
            states[log_id] = LogState.RESERVED
        return ids

    def give_up(self, log_id: int, *, unused_file: bool = False) -> None:
        """DISCARD a log never written: forget its registration as if the id had never been
        handed out (its file could not be made, or is not ours), or, with ``unused_file``,
        as a log removed unused. Under io_lock."""
        self._move(log_id, LogEvent.DISCARD)
        if unused_file:
            self.status.forget(log_id)
        else:
            self.status.discard(log_id)

    def file_created(self, dir_index: int, log_id: int) -> None:
        """The pool made a reserved id's file. Under io_lock."""
        self._move(log_id, LogEvent.CREATE_FILE)
        self.dir_creations[dir_index] += 1

    def _register(self, writer: EntryLogWriter, dir_index: int) -> None:
        self._move(writer.log_id, LogEvent.OPEN)
        self._writers[writer.log_id] = writer
        self._dir_of[writer.log_id] = dir_index

    def _move_preallocated(self, writer: EntryLogWriter, dir_index: int) -> EntryLogWriter:
        """The preallocated log is not in the least loaded dir: take a pooled log from that
        dir (the preallocated one goes back to its dir's pool), or move it there."""
        if not self.pool.has_log_in(dir_index):
            return self._relocate(writer, dir_index)
        log_id = writer.log_id
        home = self._dir_of[log_id]
        self._close_writer(writer, discard_buffer=True)  # still 0 bytes on disk
        self._move(log_id, LogEvent.RETURN_TO_POOL)
        self.pool.put_back(home, log_id)
        return self._open_log(dir_index)

    def _relocate(self, writer: EntryLogWriter, dir_index: int) -> EntryLogWriter:
        """Move a preallocated (never written, 0-byte) log to another dir, keeping its id."""
        log_id = writer.log_id
        try:
            self._close_writer(writer, discard_buffer=True)  # its header: nothing to keep
            os.unlink(writer.fspath)
            moved = self._writer(dir_index, log_id, create=True)
        except OSError as e:
            # Held by nothing now: give the id up, or it would pin leastUnflushedLogId.
            with self.io_lock:
                self.give_up(log_id, unused_file=True)
            if not isinstance(e, FileExistsError):
                raise
            return self._allocate(dir_index)  # a stray file with this id in the target dir
        with self.io_lock:
            self.dir_creations[dir_index] += 1
        self._move(log_id, LogEvent.RELOCATE)
        self._writers[log_id] = moved
        self._dir_of[log_id] = dir_index
        return moved

    # ---------------------------------------------------------------- rotating, flushing

    def rotate(
        self, writer: EntryLogWriter, ledger_id: int | None, reason: RotationReason
    ) -> RotationEvent:
        """ACTIVE -> ROTATED: seal the log, close its descriptor, queue it for the next
        checkpoint.

        Errors while sealing are logged, not raised, as upstream's removal listener does:
        a log without its ledgers map is still correct (GC scans it). The writer has
        already been removed from its manager.
        """
        log_id = writer.log_id
        self._move(log_id, LogEvent.ROTATE)
        self._active_in_dir[self._dir_of[log_id]] -= 1
        if writer.failed is None and not writer.sealed:
            try:
                writer.append_ledgers_map()
            except OSError as exc:  # no traceback: a full disk repeats it every checkpoint
                _log.warning("could not seal entry log %x: %s", log_id, exc)
        kept: EntryLogWriter | None = None
        if writer.buffered_bytes:
            try:
                writer.flush()
            except OSError as exc:
                _log.warning(
                    "entry log %x keeps %d buffered bytes after a write error (%s); it stays "
                    "open until a checkpoint can write them",
                    log_id,
                    writer.buffered_bytes,
                    exc,
                )
                kept = writer
        if kept is None:
            self._close_writer(writer)
        self._rotated[log_id] = RotatedLog(log_id, writer.fspath, ledger_id, reason, kept)
        self.rotations[reason] += 1
        event = RotationEvent(log_id, ledger_id, reason)
        if self._on_rotate is not None:
            self._on_rotate(event)
        return event

    def _close_writer(self, writer: EntryLogWriter, *, discard_buffer: bool = False) -> None:
        """Close under the io lock (see the module docstring) and forget the writer."""
        log_id = writer.log_id
        try:
            with self.io_lock:
                writer.close(discard_buffer=discard_buffer)
        finally:
            del self._writers[log_id]
            del self._dir_of[log_id]
        spare = self._spare_buffers
        if len(spare) < _SPARE_BUFFERS:
            buf = writer.release_buffer()
            if buf is not None:
                spare.append(buf)

    def mark_flushed(self, log_id: int) -> bool:
        """ROTATED -> FLUSHED: a checkpoint fsynced log ``log_id``; drop it from the queue
        and mark it flushed in ``status`` (leastUnflushedLogId may pass it).

        False (and nothing changes) if the log is not queued, or if it is a log kept open
        after a write error that still holds bytes not yet durable.
        """
        record = self._rotated.get(log_id)
        if record is None:
            return False
        writer = record.writer
        if writer is not None:
            if writer.buffered_bytes or writer.unpersisted_bytes:
                return False
            self._close_writer(writer)
        self._move(log_id, LogEvent.CHECKPOINT)
        del self._rotated[log_id]
        with self.io_lock:
            self.status.flushed(log_id)
        return True

    def delete(self, log_id: int) -> bool:
        """FLUSHED -> DELETED (GC): unlink the log's file; False if there was none.

        :class:`~bookiesim.entrylog.lifecycle.IllegalTransition` (a ``ValueError``) for a
        log that is not flushed yet: open for writing, pooled, reserved or rotated.
        """
        next_state(log_id, self.state_of(log_id), LogEvent.DELETE)
        removed = False
        name = log_file_name(log_id)
        for d in self.current_dirs:
            try:
                os.unlink(d / name)
            except FileNotFoundError:
                continue
            removed = True
        return removed

    # ---------------------------------------------------------------- leastUnflushedLogId

    def is_flushed(self, log_id: int) -> bool:
        with self.io_lock:
            return self.status.is_flushed(log_id)

    def flushed_among(self, log_ids: Iterable[int]) -> list[int]:
        """The ids for which :meth:`is_flushed` holds, in the order given (one lock)."""
        with self.io_lock:
            is_flushed = self.status.is_flushed
            return [i for i in log_ids if is_flushed(i)]

    # ---------------------------------------------------------------- closing

    def close(self, active: Iterable[EntryLogWriter] = ()) -> None:
        """Close every writer (flush, no fsync, no ledgers map) and drop unused logs;
        ``active`` (the manager's, which forgets them) become CLOSED.

        The preallocated log and the pooled ones are deleted rather than left as empty files
        for every restart; their ids are never reused (``lastId`` already names them).
        """
        if self._closed:
            return
        error: OSError | None = None
        for writer in active:
            self._move(writer.log_id, LogEvent.CLOSE)
        with self.io_lock:
            self._closed = True
            pooled = self.pool.drain()
        pre = self._preallocated
        self._preallocated = None
        if pre is not None:
            try:
                self._close_writer(pre)
                os.unlink(pre.fspath)
            except OSError as e:
                error = error or e
            with self.io_lock:
                self.give_up(pre.log_id, unused_file=True)
        for dir_index, log_id in pooled:
            try:
                os.unlink(os.path.join(self._dir_strs[dir_index], log_file_name(log_id)))
            except FileNotFoundError:
                pass
            except OSError as e:
                error = error or e
            with self.io_lock:
                self.give_up(log_id, unused_file=True)
        for writer in list(self._writers.values()):
            try:
                self._close_writer(writer)
            except OSError as e:
                error = error or e
        for record in self._rotated.values():
            record.writer = None
        self._active_in_dir = [0] * len(self.current_dirs)
        self._spare_buffers.clear()
        if error is not None:
            raise error

    # ---------------------------------------------------------------- checking

    def _check(self, active: Sequence[EntryLogWriter]) -> None:
        """Assert every invariant, given the manager's active writers: each log in exactly
        one state, and the state map agrees with the structures holding the logs. O(open +
        rotated + pooled); stats every pooled file."""
        active_ids = {w.log_id for w in active}
        assert len(active_ids) == len(active), "a log is active twice"
        kept = {lid for lid, rec in self._rotated.items() if rec.writer is not None}
        pre = {self._preallocated.log_id} if self._preallocated is not None else set()
        with self.io_lock:
            states = dict(self._states)
            unflushed = set(self.status.unflushed_ids())
            pooled_ids, reserved, in_flight = self.pool._check()
            self.status._check()
        by_state: dict[LogState, set[int]] = {s: set() for s in LogState}
        for log_id, state in states.items():
            by_state[state].add(log_id)
        assert not any(by_state[s] for s in LogState if not tracked(s)), "a final state kept"
        if not self._closed:
            assert by_state[LogState.ACTIVE] == active_ids, (by_state, active_ids)
            assert set(self._writers) == active_ids | kept | pre, (
                sorted(self._writers),
                sorted(active_ids),
                sorted(kept),
                pre,
            )
        else:
            assert not pooled_ids, pooled_ids
            assert not reserved, reserved
            assert not by_state[LogState.ACTIVE], by_state
        assert by_state[LogState.PREALLOCATED] == pre, (by_state, pre)
        assert by_state[LogState.ROTATED] == set(self._rotated), by_state
        assert by_state[LogState.POOLED] == pooled_ids, (by_state, pooled_ids)
        assert reserved <= by_state[LogState.RESERVED]
        assert len(by_state[LogState.RESERVED]) == len(reserved) + in_flight, by_state
        assert set(self._dir_of) == set(self._writers)
        for log_id, writer in self._writers.items():
            assert writer.log_id == log_id
            assert not writer.closed, writer
            assert writer.path.parent == self.current_dirs[self._dir_of[log_id]]
        for writer in active:
            assert self._writers[writer.log_id] is writer
            assert not writer.sealed, writer
            assert writer.failed is None, writer
        if self._preallocated is not None:
            assert self._preallocated.position == self._preallocated.buffered_bytes == 1024
        per_dir = [0] * len(self.current_dirs)
        for writer in active:
            per_dir[self._dir_of[writer.log_id]] += 1
        assert per_dir == self._active_in_dir, (per_dir, self._active_in_dir)
        # Every tracked log pins leastUnflushedLogId (the closed logger's rotated ones too).
        for log_id in states:
            assert log_id in unflushed, f"log {log_id} is {states[log_id]} but not unflushed"
        for log_id, record in self._rotated.items():
            assert record.log_id == log_id
            if record.writer is not None:
                assert record.writer.fspath == record.fspath
