"""Which entry log a ledger writes to: upstream's ``EntryLogManager`` and its two implementations.

Theory of operation
-------------------
Two layers, as upstream (``EntryLogManagerBase`` + ``EntryLoggerAllocator``):

* :class:`LogFiles` owns the *files*: ids (through
  :class:`~bookiesim.entrylog.allocator.EntryLogIdAllocator`), the choice of ledger dir,
  preallocation, every :class:`~bookiesim.entrylog.writer.EntryLogWriter` open for writing,
  the queue of rotated logs waiting for a checkpoint, and the registration of every new log
  with :class:`~bookiesim.entrylog.recent_logs.RecentEntryLogsStatus` (leastUnflushedLogId).
* A *manager* owns the *policy*: which log each ledger's next entry goes to, and when a log
  is rotated. :class:`EntryLogManagerForEntryLogPerLedger` gives every ledger its own log;
  :class:`EntryLogManagerForSingleEntryLog` interleaves all ledgers in one log. Both satisfy
  :class:`EntryLogManager`; the entry logger picks one from ``entryLogPerLedgerEnabled``.

Life of a log::

    preallocated --new_log--> active --rotate--> rotated --checkpoint--> flushed (closed)
      (created,                (one ledger,      (map appended,          (leastUnflushedLogId
       unflushed)               or all, in        fd closed, waiting      may pass it)
                                single mode)      for its fsync)

Rotation (upstream "roll" in the size path, "eviction" in the cache's removal listener, and
BP-32's write-close/fence/write-error/replication) always does the same thing: append the
ledgers map (patching the header), hand the buffer to the OS, and queue the log. The log is
fsynced at the next checkpoint and only then marked flushed.

One deliberate difference from upstream: a rotated log's file descriptor is closed at
rotation, not at the next checkpoint; the checkpoint fsyncs it by path (``open``, ``fsync``,
``close``: fsync persists the file's dirty pages whichever descriptor wrote them, and since
Linux 4.16 a write-back error nobody has seen is reported to a new descriptor too). Why: under
churn (10,000 ledgers, 500 active) nearly every add rotates a log, so upstream's "rotated
but not yet checkpointed" descriptors, each holding a 64 KiB write buffer, grow with the add
rate times ``flushInterval`` — hundreds of thousands at 40,000 adds/s. Closing at rotation
bounds write descriptors by ``maximumNumberOfActiveEntryLogs + 1`` (the preallocated log).
The one exception is a log whose buffer cannot reach the OS (a write error): it stays open,
since closing it would drop entries that are only in memory, until a checkpoint manages to
flush it.

Preallocation (``entryLogFilePreallocationEnabled``): each new log is the one created on the
previous call, and the next one is created right away — synchronously here, so the point is
upstream's observable behaviour rather than latency: ids advance one ahead, and the
preallocated log is registered as unflushed, so it **pins leastUnflushedLogId** until it is
used, rotated and checkpointed, exactly as upstream's. Ledger dir choice: the dir with the
fewest active logs, ties to the preallocated log's dir and then to the first dir. If the
preallocated log sits in a dir that is not among the least loaded, it is moved (it was never
written to: close, unlink, create again with the same id), so logs spread evenly with
preallocation on as well as off (upstream keeps the preallocated log where it was made).

Everything runs on one thread (the bookie's trio thread). The only exception is the
checkpoint's fsync pass (see :mod:`bookiesim.entrylog.logger`); descriptors are closed under
:attr:`LogFiles.io_lock` so that pass never fsyncs a descriptor that was closed (and maybe
reused) under it.
"""

from __future__ import annotations

import enum
import logging
import os
import struct
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bookiesim.entrylog.allocator import EntryLogIdAllocator
from bookiesim.entrylog.recent_logs import RecentEntryLogsStatus
from bookiesim.entrylog.writer import DEFAULT_WRITE_BUFFER_SIZE, EntryLogWriter

__all__ = [
    "EntryLogManager",
    "EntryLogManagerForEntryLogPerLedger",
    "EntryLogManagerForSingleEntryLog",
    "LogFiles",
    "RotatedLog",
    "RotationEvent",
    "RotationReason",
]

_log = logging.getLogger(__name__)

_LEDGER_ID = struct.Struct(">q").unpack_from


class RotationReason(enum.Enum):
    """Why a log stopped being written (the ``reason`` label of the rotation metrics)."""

    SIZE = "size"
    """The next entry would take the log past ``logSizeLimit`` (upstream "roll")."""
    EXPIRY = "expiry"
    """No write for ``entrylogMapAccessExpiryTimeInSeconds`` (per-ledger mode)."""
    MAX_ACTIVE = "max_active"
    """Evicted to make room: ``maximumNumberOfActiveEntryLogs`` were active (per-ledger)."""
    WRITE_CLOSE = "write_close"
    """BP-32: the client closed its write handle and told us so."""
    FENCE = "fence"
    """BP-32: a fencing read (recovery) — nobody will write this ledger again."""
    WRITE_ERROR = "write_error"
    """BP-32: a write to the log failed; the next entry goes to a fresh log."""
    REPLICATION = "replication"
    """BP-32: the replicator finished re-replicating a fragment of the ledger."""


@dataclass(frozen=True, slots=True)
class RotationEvent:
    """One rotation: ``ledger_id`` is None in single-log mode (the log holds many ledgers)."""

    log_id: int
    ledger_id: int | None
    reason: RotationReason


@dataclass(slots=True)
class RotatedLog:
    """A rotated log waiting for the checkpoint that fsyncs it and marks it flushed.

    ``writer`` is None once the log's bytes are all in the OS and its descriptor is closed
    (the normal case); it stays set only for a log whose buffer could not be written out.
    """

    log_id: int
    path: Path
    ledger_id: int | None
    reason: RotationReason
    writer: EntryLogWriter | None


class LogFiles:
    """The entry log files under both managers (upstream ``EntryLoggerAllocator`` and the
    file half of ``EntryLogManagerBase``).

    Attributes the entry logger reads directly, kept public to keep its paths short:
    ``writers`` (log id -> writer open for writing: active, preallocated, and rotated logs
    that could not be closed), ``rotated`` (log id -> :class:`RotatedLog`, in rotation
    order), ``status``, ``rotations``, ``io_lock``, ``dir_creations``.
    """

    def __init__(
        self,
        ledger_dirs: Sequence[str | os.PathLike[str]],
        *,
        preallocation: bool = True,
        write_buffer_size: int = DEFAULT_WRITE_BUFFER_SIZE,
        flush_entrylog_bytes: int = 0,
        on_rotate: Callable[[RotationEvent], None] | None = None,
    ) -> None:
        self.allocator = EntryLogIdAllocator(ledger_dirs, last_id_in_place=True)
        self.current_dirs: tuple[Path, ...] = self.allocator.current_dirs
        # §2.7: leastUnflushedLogId starts one above the last id found at startup, so every
        # log of an earlier run counts as flushed (they are closed files).
        self.status = RecentEntryLogsStatus(self.allocator.recovered_last_id + 1)
        self.writers: dict[int, EntryLogWriter] = {}
        self.rotated: dict[int, RotatedLog] = {}
        self.rotations: Counter[RotationReason] = Counter()
        self.io_lock = threading.Lock()
        self.preallocated: EntryLogWriter | None = None
        self.dir_creations = [0] * len(self.current_dirs)
        """Files created per dir; the checkpoint fsyncs a dir whose count moved."""
        self._active_in_dir = [0] * len(self.current_dirs)
        self._dir_of: dict[int, int] = {}  # log id -> dir index, for every writer
        self._preallocation = preallocation
        self._write_buffer_size = write_buffer_size
        self._unpersisted_bound = max(0, flush_entrylog_bytes)
        self._on_rotate = on_rotate
        self._closed = False

    # ---------------------------------------------------------------- creating logs

    @property
    def closed(self) -> bool:
        return self._closed

    def new_log(self) -> EntryLogWriter:
        """A log to become active: the preallocated one (moved if need be) or a new one.

        The caller installs it; it counts as active in its dir from now on.
        """
        if self._closed:
            raise ValueError("the entry logger is closed")
        loads = self._active_in_dir
        least = min(loads)
        writer = self.preallocated
        if writer is not None:
            self.preallocated = None
            if loads[self._dir_of[writer.log_id]] != least:
                writer = self._relocate(writer, loads.index(least))
        else:
            writer = self._allocate(loads.index(least))
        loads[self._dir_of[writer.log_id]] += 1
        if self._preallocation:
            try:
                self.preallocated = self._allocate(loads.index(min(loads)))
            except OSError:
                # Upstream reports a failed preallocation at the next creation; here the next
                # creation simply allocates synchronously (and fails there if it must).
                _log.warning("could not preallocate an entry log", exc_info=True)
        return writer

    def _allocate(self, dir_index: int) -> EntryLogWriter:
        while True:
            log_id = self.allocator.next_id()
            try:
                writer = EntryLogWriter(
                    self.current_dirs[dir_index],
                    log_id,
                    write_buffer_size=self._write_buffer_size,
                    unpersisted_bytes_bound=self._unpersisted_bound,
                )
            except FileExistsError:
                continue  # appeared after the allocator looked; its next id skips it
            break
        self.dir_creations[dir_index] += 1
        self._register(writer, dir_index)
        self.status.created(log_id)
        return writer

    def _register(self, writer: EntryLogWriter, dir_index: int) -> None:
        self.writers[writer.log_id] = writer
        self._dir_of[writer.log_id] = dir_index

    def _relocate(self, writer: EntryLogWriter, dir_index: int) -> EntryLogWriter:
        """Move a preallocated (never written, 0-byte) log to another dir, keeping its id."""
        log_id = writer.log_id
        self._close_writer(writer)
        os.unlink(writer.path)
        try:
            moved = EntryLogWriter(
                self.current_dirs[dir_index],
                log_id,
                write_buffer_size=self._write_buffer_size,
                unpersisted_bytes_bound=self._unpersisted_bound,
            )
        except FileExistsError:
            # A stray file with this id appeared in the target dir: give the id up.
            self.status.forget(log_id)
            return self._allocate(dir_index)
        self.dir_creations[dir_index] += 1
        self._register(moved, dir_index)
        return moved

    def dir_index(self, log_id: int) -> int:
        """The ledger dir of a log open for writing (index into :attr:`current_dirs`)."""
        return self._dir_of[log_id]

    def active_in_dir(self) -> list[int]:
        """Active logs per ledger dir (a copy)."""
        return list(self._active_in_dir)

    # ---------------------------------------------------------------- rotating

    def rotate(
        self, writer: EntryLogWriter, ledger_id: int | None, reason: RotationReason
    ) -> RotationEvent:
        """Seal an active log, close its descriptor and queue it for the next checkpoint.

        Errors while sealing are logged, not raised, as upstream's removal listener does:
        a log without its ledgers map is still correct (GC scans it). The writer has
        already been removed from its manager.
        """
        log_id = writer.log_id
        self._active_in_dir[self._dir_of[log_id]] -= 1
        if writer.failed is None and not writer.sealed:
            try:
                writer.append_ledgers_map()
            except OSError:
                _log.warning("could not seal entry log %x", log_id, exc_info=True)
        try:
            writer.flush()
        except OSError:
            _log.warning(
                "entry log %x keeps %d buffered bytes after a write error; it stays open "
                "until a checkpoint can write them",
                log_id,
                writer.buffered_bytes,
                exc_info=True,
            )
            kept: EntryLogWriter | None = writer
        else:
            self._close_writer(writer)
            kept = None
        self.rotated[log_id] = RotatedLog(log_id, writer.path, ledger_id, reason, kept)
        self.rotations[reason] += 1
        event = RotationEvent(log_id, ledger_id, reason)
        if self._on_rotate is not None:
            self._on_rotate(event)
        return event

    def _close_writer(self, writer: EntryLogWriter) -> None:
        """Close under the io lock (see the module docstring) and forget the writer."""
        log_id = writer.log_id
        try:
            with self.io_lock:
                writer.close()
        finally:
            del self.writers[log_id]
            del self._dir_of[log_id]

    def retire_rotated(self, log_id: int) -> bool:
        """A checkpoint fsynced rotated log ``log_id``: drop it from the queue, mark it flushed.

        False (and nothing changes) if the log is not queued, or if it is a log kept open
        after a write error that still holds bytes not yet durable.
        """
        record = self.rotated.get(log_id)
        if record is None:
            return False
        writer = record.writer
        if writer is not None:
            if writer.buffered_bytes or writer.unpersisted_bytes:
                return False
            self._close_writer(writer)
        del self.rotated[log_id]
        self.status.flushed(log_id)
        return True

    # ---------------------------------------------------------------- closing

    def close(self) -> None:
        """Close every writer (flush, no fsync, no ledgers map) and drop the preallocated log.

        The unused preallocated log is deleted rather than left as a header-only file for
        every restart; its id is never reused (``lastId`` already names it).
        """
        if self._closed:
            return
        self._closed = True
        error: OSError | None = None
        pre = self.preallocated
        self.preallocated = None
        if pre is not None:
            try:
                self._close_writer(pre)
                os.unlink(pre.path)
            except OSError as e:
                error = error or e
            self.status.forget(pre.log_id)
        for writer in list(self.writers.values()):
            try:
                self._close_writer(writer)
            except OSError as e:
                error = error or e
        for record in self.rotated.values():
            record.writer = None
        self._active_in_dir = [0] * len(self.current_dirs)
        if error is not None:
            raise error

    # ---------------------------------------------------------------- checking

    def _check(self, active: Sequence[EntryLogWriter]) -> None:
        """Assert every invariant, given the manager's active writers. O(open + rotated)."""
        active_ids = {w.log_id for w in active}
        assert len(active_ids) == len(active), "a log is active twice"
        kept = {lid for lid, rec in self.rotated.items() if rec.writer is not None}
        pre = {self.preallocated.log_id} if self.preallocated is not None else set()
        if not self._closed:
            assert set(self.writers) == active_ids | kept | pre, (
                sorted(self.writers),
                sorted(active_ids),
                sorted(kept),
                pre,
            )
        assert not (active_ids & set(self.rotated)), "an active log is also rotated"
        assert set(self._dir_of) == set(self.writers)
        for log_id, writer in self.writers.items():
            assert writer.log_id == log_id
            assert not writer.closed, writer
            assert writer.path.parent == self.current_dirs[self._dir_of[log_id]]
        for writer in active:
            assert self.writers[writer.log_id] is writer
            assert not writer.sealed, writer
            assert writer.failed is None, writer
        if self.preallocated is not None:
            assert self.preallocated.position == self.preallocated.buffered_bytes == 1024
        per_dir = [0] * len(self.current_dirs)
        for writer in active:
            per_dir[self._dir_of[writer.log_id]] += 1
        assert per_dir == self._active_in_dir, (per_dir, self._active_in_dir)
        unflushed = set(self.status.unflushed_ids())
        for log_id in active_ids | set(self.rotated) | pre:
            assert log_id in unflushed, f"log {log_id} is open or queued but not unflushed"
        for log_id, record in self.rotated.items():
            assert record.log_id == log_id
            if record.writer is not None:
                assert record.writer.path == record.path
        self.status._check()


class EntryLogManager(Protocol):
    """Which log each ledger writes to, and when a log is rotated (upstream
    ``EntryLogManager``). All methods run on the owner thread."""

    def add_entry(self, ledger_id: int, body: bytes) -> int:
        """Append ``body`` (whose first 8 bytes are ``ledger_id``); return its location."""
        ...

    def create_new_log(self, ledger_id: int) -> EntryLogWriter:
        """Give the ledger a fresh log now (upstream ``createNewLog``): a held log is rotated
        with :attr:`RotationReason.SIZE`, as upstream's roll."""
        ...

    def rotate_ledger(self, ledger_id: int, reason: RotationReason) -> bool:
        """Rotate the ledger's active log; False if it has none (or in single-log mode)."""
        ...

    def expire_idle(self, now: float) -> list[RotationEvent]:
        """Rotate every log idle for at least the expiry time; [] where nothing expires."""
        ...

    def next_expiry_deadline(self) -> float | None:
        """Clock time at which the next log expires; None if none will."""
        ...

    def current_log(self, ledger_id: int) -> EntryLogWriter | None:
        """The ledger's active log, without counting as an access."""
        ...

    def active_writers(self) -> list[EntryLogWriter]:
        """Every active log (a copy), least recently written first."""
        ...

    def active_logs(self) -> dict[int, int]:
        """Ledger id -> id of the active log it writes to."""
        ...

    @property
    def active_log_count(self) -> int: ...

    def close(self) -> None:
        """Forget the active logs (the caller closes the files)."""
        ...

    def _check(self) -> None: ...


class _ActiveLog:
    """A ledger's active log and when it was last written (the per-ledger map's value)."""

    __slots__ = ("last_write", "ledger_id", "writer")

    def __init__(self, ledger_id: int, writer: EntryLogWriter, last_write: float) -> None:
        self.ledger_id = ledger_id
        self.writer = writer
        self.last_write = last_write


class EntryLogManagerForEntryLogPerLedger:
    """Every ledger writes to a log of its own (upstream ``EntryLogManagerForEntryLogPerLedger``).

    The ledger -> log map is an ``OrderedDict`` kept in write order: an add moves its ledger
    to the end, so the front is always the least recently written ledger. That one structure
    answers both of upstream's Guava cache policies in O(1): ``maximumSize`` evicts the front
    (:attr:`RotationReason.MAX_ACTIVE`), and ``expireAfterAccess`` pops from the front while
    the front has been idle long enough (:attr:`RotationReason.EXPIRY`) — on a timer through
    :meth:`expire_idle` (ours), or, with ``lazy_expiry`` (upstream behaviour), only when an
    add touches the map, which is when Guava cleans up; a bookie that stops writing then
    never rotates its logs. Only adds count as accesses: reads, checkpoints and every query
    here leave the order alone (upstream's ``replicaOfCurrentLogChannels`` serves those).
    """

    def __init__(
        self,
        files: LogFiles,
        *,
        log_size_limit: int,
        expiry_seconds: float,
        max_active_logs: int,
        clock: Callable[[], float],
        lazy_expiry: bool = False,
        fsync_before_roll: bool = False,
    ) -> None:
        if max_active_logs < 1:
            raise ValueError(f"max_active_logs must be at least 1, not {max_active_logs}")
        self._files = files
        self._size_limit = log_size_limit
        self._expiry = expiry_seconds
        self._max_active = max_active_logs
        self._clock = clock
        self._lazy_expiry = lazy_expiry
        self._fsync_before_roll = fsync_before_roll
        self._slots: OrderedDict[int, _ActiveLog] = OrderedDict()

    # ---------------------------------------------------------------- the add path

    def add_entry(self, ledger_id: int, body: bytes) -> int:
        """Append to the ledger's log: one dict look-up and a move to the end, then the write.

        Rolls first if the entry would pass ``logSizeLimit`` (upstream's ``position + size +
        4 > limit``); a ledger without a log gets one, evicting the least recently written
        ledger's log when ``max_active_logs`` are active. An ``OSError`` from the write
        rotates the log (BP-32: before the error reaches the client) and propagates.
        """
        try:
            if _LEDGER_ID(body)[0] != ledger_id:
                raise ValueError(
                    f"entry of ledger {_LEDGER_ID(body)[0]} added as ledger {ledger_id}: a log "
                    "must never hold two ledgers"
                )
        except struct.error:
            raise ValueError(f"entry of {len(body)} bytes has no ledger id") from None
        now = self._clock()
        if self._lazy_expiry:
            self._expire(now)
        slot = self._slots.get(ledger_id)
        if slot is None or slot.writer.position + len(body) + 4 > self._size_limit:
            slot = self._install(ledger_id, slot, now)
        else:
            self._slots.move_to_end(ledger_id)
            slot.last_write = now
        try:
            return slot.writer.append(body)
        except OSError:
            self.rotate_ledger(ledger_id, RotationReason.WRITE_ERROR)
            raise

    def _install(self, ledger_id: int, slot: _ActiveLog | None, now: float) -> _ActiveLog:
        if slot is not None:
            if self._fsync_before_roll:
                slot.writer.fsync()  # upstream: with flushEntrylogBytes > 0, before a roll
            self.rotate_ledger(ledger_id, RotationReason.SIZE)
        else:
            slots = self._slots
            while len(slots) >= self._max_active:
                self.rotate_ledger(next(iter(slots)), RotationReason.MAX_ACTIVE)
        slot = _ActiveLog(ledger_id, self._files.new_log(), now)
        self._slots[ledger_id] = slot
        return slot

    def create_new_log(self, ledger_id: int) -> EntryLogWriter:
        slot = self._slots.get(ledger_id)
        return self._install(ledger_id, slot, self._clock()).writer

    # ---------------------------------------------------------------- rotation

    def rotate_ledger(self, ledger_id: int, reason: RotationReason) -> bool:
        slot = self._slots.pop(ledger_id, None)
        if slot is None:
            return False
        self._files.rotate(slot.writer, ledger_id, reason)
        return True

    def expire_idle(self, now: float) -> list[RotationEvent]:
        return [] if self._lazy_expiry else self._expire(now)

    def _expire(self, now: float) -> list[RotationEvent]:
        slots = self._slots
        expiry = self._expiry
        events: list[RotationEvent] = []
        while slots:
            slot = next(iter(slots.values()))
            # Compared as next_expiry_deadline() computes it, so that a timer woken exactly
            # at the deadline always finds the log expired (now - last_write could come out
            # an ulp short of the expiry and leave the timer spinning).
            if slot.last_write + expiry > now:
                break
            del slots[slot.ledger_id]
            events.append(self._files.rotate(slot.writer, slot.ledger_id, RotationReason.EXPIRY))
        return events

    def next_expiry_deadline(self) -> float | None:
        if self._lazy_expiry or not self._slots:
            return None
        return next(iter(self._slots.values())).last_write + self._expiry

    # ---------------------------------------------------------------- queries (no access)

    def current_log(self, ledger_id: int) -> EntryLogWriter | None:
        slot = self._slots.get(ledger_id)
        return None if slot is None else slot.writer

    def active_writers(self) -> list[EntryLogWriter]:
        return [slot.writer for slot in self._slots.values()]

    def active_logs(self) -> dict[int, int]:
        return {lid: slot.writer.log_id for lid, slot in self._slots.items()}

    def last_write_time(self, ledger_id: int) -> float | None:
        """When the ledger last wrote to its active log (None without one)."""
        slot = self._slots.get(ledger_id)
        return None if slot is None else slot.last_write

    @property
    def active_log_count(self) -> int:
        return len(self._slots)

    def close(self) -> None:
        self._slots.clear()

    def _check(self) -> None:
        """Assert every invariant. O(active logs)."""
        assert len(self._slots) <= self._max_active, (len(self._slots), self._max_active)
        previous = float("-inf")
        seen_logs: set[int] = set()
        for ledger_id, slot in self._slots.items():
            assert slot.ledger_id == ledger_id
            assert slot.last_write >= previous, "write order and write times disagree"
            previous = slot.last_write
            writer = slot.writer
            assert writer.log_id not in seen_logs, f"log {writer.log_id} serves two ledgers"
            seen_logs.add(writer.log_id)
            assert set(writer.ledger_sizes) <= {ledger_id}, (
                f"log {writer.log_id} of ledger {ledger_id} holds {dict(writer.ledger_sizes)}"
            )
        for record in self._files.rotated.values():
            if record.writer is not None:
                assert set(record.writer.ledger_sizes) <= {record.ledger_id}


class EntryLogManagerForSingleEntryLog:
    """All ledgers interleave in one active log (upstream ``EntryLogManagerForSingleEntryLog``).

    The log is created lazily by the first add (``testDeferCreateNewLog``) and rotated on
    size and on a write error. Nothing expires and nothing is evicted. BP-32's per-ledger
    rotations (write-close, fence, replication) do not apply: rotating the shared log
    because one ledger is done would cut every other ledger's log short, so
    :meth:`rotate_ledger` is a no-op that returns False.
    """

    def __init__(
        self,
        files: LogFiles,
        *,
        log_size_limit: int,
        fsync_before_roll: bool = False,
    ) -> None:
        self._files = files
        self._size_limit = log_size_limit
        self._fsync_before_roll = fsync_before_roll
        self._current: EntryLogWriter | None = None

    def add_entry(self, ledger_id: int, body: bytes) -> int:
        """Append to the shared log, rolling it first if the entry would pass the limit."""
        writer = self._current
        if writer is None or writer.position + len(body) + 4 > self._size_limit:
            writer = self._roll()
        try:
            return writer.append(body)
        except OSError:
            self._rotate_current(RotationReason.WRITE_ERROR)
            raise

    def _roll(self) -> EntryLogWriter:
        if self._current is not None:
            if self._fsync_before_roll:
                self._current.fsync()
            self._rotate_current(RotationReason.SIZE)
        writer = self._current = self._files.new_log()
        return writer

    def _rotate_current(self, reason: RotationReason) -> None:
        writer = self._current
        if writer is not None:
            self._current = None
            self._files.rotate(writer, None, reason)

    def create_new_log(self, ledger_id: int) -> EntryLogWriter:
        return self._roll()

    def rotate_ledger(self, ledger_id: int, reason: RotationReason) -> bool:
        return False

    def expire_idle(self, now: float) -> list[RotationEvent]:
        return []

    def next_expiry_deadline(self) -> float | None:
        return None

    def current_log(self, ledger_id: int) -> EntryLogWriter | None:
        return self._current

    def active_writers(self) -> list[EntryLogWriter]:
        return [] if self._current is None else [self._current]

    def active_logs(self) -> dict[int, int]:
        """Every ledger with entries in the shared log -> its id."""
        current = self._current
        if current is None:
            return {}
        return dict.fromkeys(current.ledger_sizes, current.log_id)

    @property
    def active_log_count(self) -> int:
        return 0 if self._current is None else 1

    def close(self) -> None:
        self._current = None

    def _check(self) -> None:
        """Assert every invariant. O(1)."""
        current = self._current
        if current is not None:
            assert self._files.writers.get(current.log_id) is current
