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

Preallocation (``entryLogFilePreallocationEnabled``): each new log is the one opened on the
previous call, and the next one is opened right away, so ids advance one ahead and the
preallocated log is registered as unflushed: it **pins leastUnflushedLogId** until it is
used, rotated and checkpointed, exactly as upstream's. Ledger dir choice: the dir with the
fewest active logs, ties to the preallocated log's dir and then to the first dir. If the
preallocated log sits in a dir that is not among the least loaded, it is swapped for a pooled
log of that dir (going back to its own dir's pool) or, with none, moved (it was never written
to: close, unlink, create again with the same id), so logs spread evenly with preallocation
on as well as off (upstream keeps the preallocated log where it was made).

The pool (``entryLogPreallocationPoolSize``, bookiesim): where the preallocated log comes
from. Under churn (10,000 ledgers, 500 active) nearly every add needs a new log, and creating
a file (``O_CREAT`` plus the ``lastId`` rewrite: 25 us to over 1 ms on these disks) on the
add path capped the bookie at a few thousand adds/s. So files are created ahead of need, off
the owner thread: :meth:`LogFiles.preallocate_some` (blocking, thread-safe) allocates a batch
of ids — one ``lastId`` write for the batch — registers them unflushed, and creates each file
empty with ``mknod`` (never opened): pooled logs hold no descriptor and no buffer, so the
bound on write descriptors stays ``maximumNumberOfActiveEntryLogs + 1``. Taking one costs an
``open`` of an existing file. The bookie runs :meth:`~LogFiles.preallocate_some` in a worker
thread from a trio task that :meth:`~LogFiles.notify_when_preallocation_needed` wakes when
the pool falls to half its size. With no pooled log at hand the owner creates the log itself,
as before (correctness first): under an id of the batch being made if there is one (no
``lastId`` write then), else under a new one. Nobody refilling is fine too (pool size 0,
tests). Pooled and reserved logs are registered unflushed like upstream's single
preallocated log, so they pin leastUnflushedLogId the same way: the pointer stays at or
below the oldest of them, up to ``pool size + 1`` ids behind the newest log even on an idle
bookie. :meth:`LogFiles.close` deletes the pooled files. After a crash they stay behind as
empty ``.log`` files; restart never reuses their ids (the allocator skips existing files,
and ``lastId`` named the whole batch before any file of it was made).

What the pool cannot do: raise the file system's creation rate (on these VMs it swings
between ~1,000 and ~50,000 files/s, and sustained churn needs one file per add), or give the
worker thread the GIL while the trio thread is saturated (CPython hands it over at most
every switch interval, 5 ms, so a busy bookie still creates most logs on the add path). It
takes creation latency off adds when the trio thread has slack, and overlaps creations that
block in the kernel.

Everything runs on one thread (the bookie's trio thread). The exceptions are the
checkpoint's fsync pass (see :mod:`bookiesim.entrylog.logger`) and
:meth:`LogFiles.preallocate_some`; descriptors are closed under :attr:`LogFiles.io_lock` so
that the fsync pass never duplicates a descriptor that was closed (and maybe reused) under
it, and the allocator, the pool and ``RecentEntryLogsStatus`` are only touched under it.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import stat
import struct
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bookiesim.entrylog.allocator import EntryLogIdAllocator, list_log_ids
from bookiesim.entrylog.format import log_file_name
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
_SPARE_BUFFERS = 4
"""Write buffers of closed writers kept for new ones (allocating 64 KiB costs more)."""


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
    fspath: str
    ledger_id: int | None
    reason: RotationReason
    writer: EntryLogWriter | None

    @property
    def path(self) -> Path:
        return Path(self.fspath)


class LogFiles:
    """The entry log files under both managers (upstream ``EntryLoggerAllocator`` and the
    file half of ``EntryLogManagerBase``).

    Attributes the entry logger reads directly, kept public to keep its paths short:
    ``writers`` (log id -> writer open for writing: active, preallocated, and rotated logs
    that could not be closed), ``rotated`` (log id -> :class:`RotatedLog`, in rotation
    order), ``status``, ``rotations``, ``io_lock``, ``dir_creations``.

    Threads: everything belongs to the owner thread except :meth:`preallocate_some` (and the
    checkpoint's fsync pass, see :mod:`bookiesim.entrylog.logger`). ``io_lock`` guards what
    they share — closing descriptors, the allocator, ``status``, the pool and
    ``dir_creations`` — and is only ever held for microseconds: never across an fsync, and
    on the worker's side never across a file creation.
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
        self._pool_size = pool_size if preallocation else 0
        # The pool: per dir, ids of created, empty, closed logs registered unflushed, oldest
        # first. In flight: ids reserved by preallocate_some whose files are being created.
        self._pool: tuple[deque[int], ...] = tuple(deque() for _ in self.current_dirs)
        self._in_flight = [0] * len(self.current_dirs)
        self._reserved: deque[int] = deque()  # registered, lastId written, no file yet
        self._pool_listener: Callable[[], None] | None = None
        self._pool_paused = False
        self._spare_buffers: list[bytearray] = []
        # Whether the allocator stats every dir for an id's file before handing it out. With
        # one dir, creating the file exclusively is the same check for one syscall less, as
        # long as existing files are rare: after the first collision (typically after an id
        # wrap-around, with old logs about) ids are looked for again.
        self._look_ahead = len(self.current_dirs) > 1 or bool(above)
        self._write_buffer_size = write_buffer_size
        self._unpersisted_bound = max(0, flush_entrylog_bytes)
        self._writeback_bytes = max(0, writeback_bytes)
        self._on_rotate = on_rotate
        self._zero_headers = zero_headers
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
                writer = self._move_preallocated(writer, loads.index(least))
        else:
            writer = self._open_log(loads.index(least))
        loads[self._dir_of[writer.log_id]] += 1
        if self._preallocation:
            try:
                self.preallocated = self._open_log(loads.index(min(loads)))
            except OSError:
                # Upstream reports a failed preallocation at the next creation; here the next
                # creation simply allocates synchronously (and fails there if it must).
                _log.warning("could not preallocate an entry log", exc_info=True)
        return writer

    def _open_log(self, dir_index: int) -> EntryLogWriter:
        """A writer on the oldest pooled log of the dir, or on a log created now."""
        pool = self._pool[dir_index]
        while pool:
            with self.io_lock:
                log_id = pool.popleft() if pool else None
            if log_id is None:
                break
            try:
                writer = self._writer(dir_index, log_id, create=False)
            except (FileNotFoundError, FileExistsError):
                # Gone, or not empty: not the file we made. Never write to it; give the id up.
                _log.warning("preallocated entry log %x is unusable", log_id, exc_info=True)
                with self.io_lock:
                    self.status.discard(log_id)
                continue
            except BaseException:
                with self.io_lock:
                    pool.appendleft(log_id)
                raise
            self._register(writer, dir_index)
            self._pool_taken()
            return writer
        writer = self._create_reserved(dir_index) or self._allocate(dir_index)
        self._pool_taken()
        return writer

    def _create_reserved(self, dir_index: int) -> EntryLogWriter | None:
        """A log created now under an id preallocation reserved (None if there is none):
        the pool ran dry while its files are still being made; ``lastId`` already names
        the id, so this costs the file creation alone."""
        while self._reserved:
            with self.io_lock:
                log_id = self._reserved.popleft() if self._reserved else None
            if log_id is None:
                return None
            try:
                writer = self._writer(dir_index, log_id, create=True)
            except BaseException as e:
                with self.io_lock:
                    self.status.discard(log_id)
                if isinstance(e, FileExistsError):
                    self._look_ahead = True
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
        while True:
            with self.io_lock:
                batch = max(1, self._pool_size - self._pool_level())
                log_id, *rest = self._reserve(batch, skip_existing=self._look_ahead)
                self._reserved.extend(rest)
            try:
                writer = self._writer(dir_index, log_id, create=True)
            except BaseException as e:
                with self.io_lock:
                    self.status.discard(log_id)
                if isinstance(e, FileExistsError):
                    self._look_ahead = True
                    continue  # not ours; the next id (looked for from now on) skips it
                raise
            break
        with self.io_lock:
            self.dir_creations[dir_index] += 1
        self._register(writer, dir_index)
        return writer

    def _reserve(self, count: int, *, skip_existing: bool = True) -> list[int]:
        """Allocate ids and register them unflushed, before any file exists. Under io_lock.

        Registering first means a log file of this run is never seen unregistered (which
        reads as flushed to GC). The allocator hands out ids in increasing order until it
        wraps around, so an id not above the one before it starts a new round in ``status``
        (equal only if it came all the way round).
        """
        previous = self.allocator.last_allocated_id
        ids = self.allocator.reserve(count, skip_existing=skip_existing)
        created = self.status.created
        for log_id in ids:
            created(log_id, wrapped=log_id <= previous)
            previous = log_id
        return ids

    def _register(self, writer: EntryLogWriter, dir_index: int) -> None:
        self.writers[writer.log_id] = writer
        self._dir_of[writer.log_id] = dir_index

    def _move_preallocated(self, writer: EntryLogWriter, dir_index: int) -> EntryLogWriter:
        """The preallocated log is not in the least loaded dir: take a pooled log from that
        dir (the preallocated one goes back to its dir's pool), or move it there."""
        if not self._pool[dir_index]:
            return self._relocate(writer, dir_index)
        log_id = writer.log_id
        home = self._dir_of[log_id]
        try:
            with self.io_lock:
                writer.close(discard_buffer=True)  # still 0 bytes on disk
        finally:
            del self.writers[log_id]
            del self._dir_of[log_id]
        with self.io_lock:
            self._pool[home].appendleft(log_id)
        return self._open_log(dir_index)

    def _relocate(self, writer: EntryLogWriter, dir_index: int) -> EntryLogWriter:
        """Move a preallocated (never written, 0-byte) log to another dir, keeping its id."""
        log_id = writer.log_id
        self._close_writer(writer)
        os.unlink(writer.fspath)
        try:
            moved = self._writer(dir_index, log_id, create=True)
        except FileExistsError:
            # A stray file with this id appeared in the target dir: give the id up.
            with self.io_lock:
                self.status.forget(log_id)
            return self._allocate(dir_index)
        with self.io_lock:
            self.dir_creations[dir_index] += 1
        self._register(moved, dir_index)
        return moved

    def dir_index(self, log_id: int) -> int:
        """The ledger dir of a log open for writing (index into :attr:`current_dirs`)."""
        return self._dir_of[log_id]

    def active_in_dir(self) -> list[int]:
        """Active logs per ledger dir (a copy)."""
        return list(self._active_in_dir)

    # ---------------------------------------------------------------- the pool

    @property
    def pool_size(self) -> int:
        """Target number of pooled logs (0: no pool, only upstream's preallocated log)."""
        return self._pool_size

    def pooled_log_ids(self) -> list[int]:
        """Ids in the pool, per dir in order of use, dirs in order."""
        with self.io_lock:
            return [log_id for pool in self._pool for log_id in pool]

    def is_pooled(self, log_id: int) -> bool:
        with self.io_lock:
            return any(log_id in pool for pool in self._pool)

    def _pool_level(self) -> int:
        return sum(map(len, self._pool)) + sum(self._in_flight) + len(self._reserved)

    def needs_preallocation(self) -> bool:
        """True if :meth:`preallocate_some` would create logs now (the pool is below its
        size, and the last attempt did not fail since a log was last taken)."""
        if self._pool_size == 0 or self._closed or self._pool_paused:
            return False
        with self.io_lock:
            return self._pool_level() < self._pool_size

    def notify_when_preallocation_needed(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, on the owner thread, as soon as the pool runs low: at or
        below half its size after a log is taken (at once if it is already needed).
        Replaces a callback given before. It must not raise."""
        if self.needs_preallocation():
            self._pool_listener = None
            callback()
        else:
            self._pool_listener = callback

    def _pool_taken(self) -> None:
        # Owner thread, after a log was taken from the pool or created for want of one.
        self._pool_paused = False
        listener = self._pool_listener
        if listener is not None and self._pool_level() <= self._pool_size // 2:
            self._pool_listener = None
            listener()

    def preallocate_some(self, count: int | None = None) -> int:
        """Create up to ``count`` pooled logs (default: as many as the pool lacks); return
        how many were created. Blocking I/O, safe on any thread.

        The ids are allocated (``lastId`` written once for all), registered unflushed and
        queued as *reserved* under the io lock. Then, one at a time, an id is taken off that
        queue under the lock, its file created without it (``mknod``: exclusively, and never
        opened, so pooled logs hold no descriptor), and the log joins the pool under the lock
        again. The owner thread may take reserved ids too, when it needs a log and the pool
        is empty (:meth:`_open_log`): it then creates the file itself, but is spared the
        ``lastId`` write. An id whose file exists already is given up. An ``OSError`` is
        logged, not raised, gives up the rest of the batch and pauses preallocation until a
        log is next taken (:meth:`needs_preallocation` is False meanwhile), so a full disk
        costs one attempt per new log, not a busy loop. If the logger closes meanwhile,
        files made after that are removed again.
        """
        limit = self._pool_size if count is None else count
        with self.io_lock:
            if self._closed or self._pool_size == 0 or limit <= 0:
                return 0
            self._pool_paused = False  # asked explicitly: try again
            want = min(self._pool_size - self._pool_level(), limit)
            if want > 0:
                try:
                    ids = self._reserve(want, skip_existing=self._look_ahead)
                except (OSError, RuntimeError):
                    self._pool_paused = True
                    _log.warning("could not allocate ids to preallocate logs", exc_info=True)
                    return 0
                self._reserved.extend(ids)
        # Ids reserved by an earlier call still under way are made by whichever gets them.
        reserved = self._reserved
        created = 0
        while created < limit:
            with self.io_lock:
                if not reserved:
                    break
                log_id = reserved.popleft()
                # Spread over the dirs: to the one with the fewest pooled logs.
                loads = [len(p) + n for p, n in zip(self._pool, self._in_flight, strict=True)]
                dir_index = loads.index(min(loads))
                self._in_flight[dir_index] += 1
            path = self._dir_strs[dir_index] + os.sep + log_file_name(log_id)
            try:
                # mknod: created (exclusively, as O_CREAT|O_EXCL) without being opened, so
                # one syscall rather than open + close, and no descriptor at any time.
                os.mknod(path, stat.S_IFREG | 0o644)
            except OSError as e:
                with self.io_lock:
                    self._in_flight[dir_index] -= 1
                    self.status.discard(log_id)
                    if isinstance(e, FileExistsError):
                        self._look_ahead = True
                        continue  # someone else's file; its id is given up
                    self._pool_paused = True
                    while reserved:  # give up the rest of the batch
                        self.status.discard(reserved.popleft())
                _log.warning("could not preallocate entry log %s", path, exc_info=True)
                break
            with self.io_lock:
                self._in_flight[dir_index] -= 1
                # (The property: another thread may have closed us since the check above.)
                closed = self.closed
                if closed:
                    self.status.forget(log_id)
                else:
                    self._pool[dir_index].append(log_id)
                    self.dir_creations[dir_index] += 1
                    created += 1
            if closed:  # closed while we were creating it: nobody will use it
                with contextlib.suppress(OSError):
                    os.unlink(path)
        return created

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
        kept: EntryLogWriter | None = None
        if writer.buffered_bytes:
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
                kept = writer
        if kept is None:
            self._close_writer(writer)
        self.rotated[log_id] = RotatedLog(log_id, writer.fspath, ledger_id, reason, kept)
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
        spare = self._spare_buffers
        if len(spare) < _SPARE_BUFFERS:
            buf = writer.release_buffer()
            if buf is not None:
                spare.append(buf)

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
        with self.io_lock:
            self.status.flushed(log_id)
        return True

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

    def close(self) -> None:
        """Close every writer (flush, no fsync, no ledgers map) and drop unused logs.

        The preallocated log and the pooled ones are deleted rather than left as empty files
        for every restart; their ids are never reused (``lastId`` already names them).
        """
        if self._closed:
            return
        error: OSError | None = None
        with self.io_lock:
            self._closed = True
            pooled = [(d, log_id) for d, pool in enumerate(self._pool) for log_id in pool]
            for pool in self._pool:
                pool.clear()
            while self._reserved:  # no files yet; lastId names them, so never reused
                self.status.discard(self._reserved.popleft())
        self._pool_listener = None
        pre = self.preallocated
        self.preallocated = None
        if pre is not None:
            try:
                self._close_writer(pre)
                os.unlink(pre.fspath)
            except OSError as e:
                error = error or e
            with self.io_lock:
                self.status.forget(pre.log_id)
        for dir_index, log_id in pooled:
            try:
                os.unlink(os.path.join(self._dir_strs[dir_index], log_file_name(log_id)))
            except FileNotFoundError:
                pass
            except OSError as e:
                error = error or e
            with self.io_lock:
                self.status.forget(log_id)
        for writer in list(self.writers.values()):
            try:
                self._close_writer(writer)
            except OSError as e:
                error = error or e
        for record in self.rotated.values():
            record.writer = None
        self._active_in_dir = [0] * len(self.current_dirs)
        self._spare_buffers.clear()
        if error is not None:
            raise error

    # ---------------------------------------------------------------- checking

    def _check(self, active: Sequence[EntryLogWriter]) -> None:
        """Assert every invariant, given the manager's active writers. O(open + rotated +
        pooled); stats every pooled file."""
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
        with self.io_lock:
            unflushed = set(self.status.unflushed_ids())
            pooled = {(d, log_id) for d, pool in enumerate(self._pool) for log_id in pool}
            reserved = set(self._reserved)
            self.status._check()
        assert len(reserved) == len(self._reserved), "an id is reserved twice"
        assert reserved <= unflushed, "a reserved id is not registered"
        assert not reserved & ({i for _, i in pooled} | set(self.writers) | set(self.rotated))
        pooled_ids = {log_id for _, log_id in pooled}
        assert len(pooled_ids) == len(pooled), "a log is pooled twice"
        assert not (pooled_ids & (set(self.writers) | set(self.rotated))), "pooled and in use"
        if self._closed:
            assert not pooled
        for dir_index, log_id in pooled:
            path = os.path.join(self._dir_strs[dir_index], log_file_name(log_id))
            assert os.stat(path).st_size == 0, f"pooled log {path} is not empty"
        for log_id in active_ids | set(self.rotated) | pre | pooled_ids:
            assert log_id in unflushed, f"log {log_id} is open or queued but not unflushed"
        for log_id, record in self.rotated.items():
            assert record.log_id == log_id
            if record.writer is not None:
                assert record.writer.fspath == record.fspath


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
