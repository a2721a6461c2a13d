"""Journal files: writing ``<journalDir>/current/<hex id>.txn`` (scanning and replay: ``.scan``).

Why this module exists: it is the I/O edge around ``records`` and ``decoder``
(which own every byte rule). The writer is shaped for group commit, the one thing that
makes a journal fast: many
records are appended to an in-memory buffer, one ``flush()`` hands them to the OS in a single
``pwrite`` (padding the file to a sector boundary, as upstream V5+ does), and one ``fsync()``
makes the whole group durable. Per record the writer only appends bytes to a ``bytearray``;
the server decides when to flush and sync (``journalMaxGroupWaitMSec`` and friends).

Upstream behaviours kept here (fact sheet §6):

* File ids: the first new file of a process is ``highest existing id + 1``, or
  ``now in ms + 1`` when the directory holds no journal; each roll takes the next id.
* A new file gets its header, is extended with zeros to ``journalPreAllocSizeMB`` and is
  fsynced before any record goes in; it is extended by the same amount whenever a flush
  would cross the end. A reader then stops at the first zero length instead of needing the
  file size. (Like upstream we extend by writing one sector of zeros at the new end, which
  leaves a sparse hole that reads as zeros. Unlike upstream, a new file is prepared under a
  temporary name and linked into place, and the directory is fsynced, so a crash can
  neither leave a ``.txn`` with a torn header nor lose a new file's name.)
* Roll when the flushed position exceeds ``journalMaxSizeMB``; the caller checks
  ``needs_roll`` after a sync, as upstream's journal thread does.
* After a checkpoint, journals older than its mark are deleted, keeping
  ``maxBackupJournals``.
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
from typing import TYPE_CHECKING, Final

from bookiesim.bookie.journal.log_mark import LogMark
from bookiesim.bookie.journal.records import (
    ALIGNMENT,
    CURRENT_VERSION,
    DataRecord,
    JournalRecord,
    encode_header,
    encode_record,
    padding,
)

# Reading lives in .scan; these names stay importable from here, where they always were.
from bookiesim.bookie.journal.scan import (
    MIB,
    JournalReplay,
    JournalScan,
    MissingJournalError,
    ReplayedRecord,
    journal_current_dir,
    journal_file_name,
    list_journal_ids,
    read_journal,
    replay,
)
from bookiesim.entrylog.writeback import fsync_directory

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import TracebackType

__all__ = [
    "DEFAULT_MAX_BACKUP_JOURNALS",
    "DEFAULT_MAX_SIZE",
    "DEFAULT_PREALLOC_SIZE",
    "JournalReplay",
    "JournalScan",
    "JournalWriter",
    "MissingJournalError",
    "ReplayedRecord",
    "TakenGroup",
    "delete_old_journals",
    "journal_current_dir",
    "journal_file_name",
    "list_journal_ids",
    "read_journal",
    "replay",
]

DEFAULT_PREALLOC_SIZE: Final = 16 * MIB  # journalPreAllocSizeMB
DEFAULT_MAX_SIZE: Final = 2048 * MIB  # journalMaxSizeMB
DEFAULT_MAX_BACKUP_JOURNALS: Final = 5  # maxBackupJournals
# Bound method of a precompiled Struct: the cheapest way to encode a length per record.
_pack_int: Final = struct.Struct(">i").pack


def _pwrite_all(fd: int, data: bytes | bytearray, offset: int) -> None:
    n = os.pwrite(fd, data, offset)
    if n == len(data):
        return  # the usual case for a regular file: no memoryview, so nothing stays exported
    with memoryview(data) as view:
        while n < len(view):
            n += os.pwrite(fd, view[n:], offset + n)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class TakenGroup:
    """A group of records detached from a :class:`JournalWriter` by ``take()``: its bytes
    as one padded write, and the buffered parts they came from (put back if a synchronous
    ``flush()`` fails)."""

    __slots__ = ("buffered", "data", "parts")

    def __init__(self, data: bytes, parts: list[bytes], buffered: int) -> None:
        self.data = data
        self.parts = parts
        self.buffered = buffered


class JournalWriter:
    """Appends records to the journal of one journal directory, rolling files as they fill.

    Not thread-safe, with two deliberate exceptions: ``fsync()`` may run in a worker thread
    (``trio.to_thread.run_sync``) while the owner keeps calling ``append()`` and ``flush()``,
    because it only touches the file descriptor and a snapshot of ``flushed_position``; and
    so may ``write_taken()`` (with ``fsync()`` after it, :meth:`write_taken_and_sync`) of a
    group the owner detached with ``take()``, while the owner appends the next group: the
    detached bytes are no longer the owner's, and only one taken group is written at a time.
    ``roll()``, ``close()`` and another ``take()`` must not overlap either.

    An ``OSError`` from ``flush()`` or ``fsync()`` (disk full, I/O error) leaves the file in
    an unknown state: like upstream, whose journal thread dies on it, the owner must stop
    acknowledging and close the writer rather than retry.
    """

    def __init__(
        self,
        journal_dir: str | os.PathLike[str],
        *,
        prealloc_size: int = DEFAULT_PREALLOC_SIZE,
        max_size: int = DEFAULT_MAX_SIZE,
        alignment: int = ALIGNMENT,
        now_ms: Callable[[], int] = _now_ms,
    ) -> None:
        if alignment < 8 or alignment % 8:
            raise ValueError(f"alignment {alignment} must be a positive multiple of 8")
        if prealloc_size < alignment:
            raise ValueError(f"prealloc_size {prealloc_size} is below the alignment {alignment}")
        self.journal_dir = os.fspath(journal_dir)
        self.current_dir = journal_current_dir(journal_dir)
        self.prealloc_size = prealloc_size
        self.max_size = max_size
        self.alignment = alignment
        os.makedirs(self.current_dir, exist_ok=True)
        existing = list_journal_ids(journal_dir)
        # Upstream Journal.run: start from the newest journal on disk, else from the clock.
        self._last_id = existing[-1] if existing else now_ms()
        # Records wait as a list of byte strings joined once per flush: growing one bytearray
        # by 1 KiB appends cost ~1 us each here (its reallocations copy the group again and
        # again), against ~0.13 us for a list append plus the join.
        self._parts: list[bytes] = []
        self._buffered = 0
        self._fd = -1
        self.file_id = 0
        self.path = ""
        self.flushed_position = 0
        self.synced_mark = LogMark(0, 0)
        self._prealloc_end = 0
        self._zeros = bytes(alignment)
        self._open_next()

    # -- state --------------------------------------------------------------------------

    @property
    def position(self) -> int:
        """Offset in the current file where the next appended record will start."""
        return self.flushed_position + self._buffered

    @property
    def buffered_bytes(self) -> int:
        """Bytes appended but not yet flushed (for ``journalBufferedWritesThreshold``)."""
        return self._buffered

    @property
    def needs_roll(self) -> bool:
        """The current file is over ``max_size``: the owner should ``roll()`` after a sync."""
        return self.flushed_position > self.max_size

    @property
    def closed(self) -> bool:
        return self._fd < 0

    # -- writing ------------------------------------------------------------------------

    def append(self, records: Iterable[JournalRecord]) -> int:
        """Buffer ``records`` in order; return the offset just past the last of them.

        Nothing reaches the OS until ``flush()``. A record is durable once a ``fsync()``
        that started after the ``flush()`` covering it returns, i.e. once
        ``synced_mark >= LogMark(file_id, returned offset)``.
        """
        if self._fd < 0:
            raise ValueError("journal writer is closed")
        parts = self._parts
        pack = _pack_int
        for rec in records:
            # Entries are nearly every record: inline their encoding (length + body) to
            # keep the per-add cost to two list appends.
            if type(rec) is DataRecord:
                body = rec.body
                parts.append(pack(len(body)))
                parts.append(body)
                self._buffered += len(body) + 4
            else:
                data = encode_record(rec)
                parts.append(data)
                self._buffered += len(data)
        return self.flushed_position + self._buffered

    def append_entry(self, body: bytes) -> int:
        """Buffer one data record given as its body (the add path: no record object).

        Same bytes as ``append([DataRecord.from_body(body)])``; returns the bytes buffered.
        """
        if self._fd < 0:
            raise ValueError("journal writer is closed")
        n = len(body) + 4
        parts = self._parts
        parts.append(_pack_int(n - 4))
        parts.append(body)
        self._buffered += n
        return n

    def flush(self) -> int:
        """Pad to the sector boundary and hand the buffer to the OS in one write.

        Returns the new ``flushed_position``. A no-op when nothing is buffered (the file is
        then already aligned: the header and every earlier flush end on a boundary). A write
        that fails leaves what was buffered buffered, so a retry writes the same bytes.
        """
        taken = self.take()
        if taken is None:
            return self.flushed_position
        try:
            return self.write_taken(taken)
        except OSError:
            self._parts[:0] = taken.parts
            self._buffered += taken.buffered
            raise

    def take(self) -> TakenGroup | None:
        """Detach what is buffered as one padded write (None when nothing is): the owner's
        half of a flush, done on its thread; :meth:`write_taken` is the other half, on any
        thread, and must come before the next ``take()``."""
        if self._fd < 0:
            raise ValueError("journal writer is closed")
        parts = self._parts
        if not parts:
            return None
        buffered = self._buffered
        parts.append(padding(self.flushed_position + buffered, self.alignment))
        data = b"".join(parts)
        parts.pop()
        self._parts = []
        self._buffered = 0
        return TakenGroup(data, parts, buffered)

    def write_taken(self, taken: TakenGroup) -> int:
        """Write a group :meth:`take` detached at ``flushed_position`` (growing the file's
        preallocation first when it would pass it); returns the new ``flushed_position``."""
        if self._fd < 0:
            raise ValueError("journal writer is closed")
        data = taken.data
        end = self.flushed_position + len(data)
        if end > self._prealloc_end:
            chunks = -(-(end - self._prealloc_end) // self.prealloc_size)
            self._extend(self._prealloc_end + chunks * self.prealloc_size)
        _pwrite_all(self._fd, data, self.flushed_position)
        # Publish the new position only after the bytes are in the OS, so that a concurrent
        # fsync() never claims more than it can make durable.
        self.flushed_position = end
        return end

    def write_taken_and_sync(self, taken: TakenGroup) -> LogMark:
        """:meth:`write_taken`, then :meth:`fsync`: a group commit's disk work in one call,
        for one hop to a worker thread."""
        self.write_taken(taken)
        return self.fsync()

    def fsync(self) -> LogMark:
        """Make everything flushed so far durable (fdatasync); return that position.

        The returned mark is what upstream calls ``lastLogMark``: the position a checkpoint
        may persist once ledger storage holds everything before it.
        """
        fd = self._fd
        if fd < 0:
            raise ValueError("journal writer is closed")
        mark = LogMark(self.file_id, self.flushed_position)
        # fdatasync is enough: preallocation keeps the size constant between extensions,
        # and when an extension did change it, fdatasync still flushes the size because
        # the data cannot be read back without it.
        os.fdatasync(fd)
        if mark > self.synced_mark:
            self.synced_mark = mark
        return mark

    def roll(self) -> LogMark:
        """Flush, sync and close the current file, then open the next id.

        Returns the synced end of the closed file.
        """
        self.flush()
        mark = self.fsync()
        os.close(self._fd)
        self._fd = -1
        self._open_next()
        return mark

    def close(self, *, sync: bool = True, flush: bool = True) -> None:
        """Flush what is buffered (unless ``flush=False``: it is dropped), fsync unless
        ``sync=False``, and close. Idempotent."""
        if self._fd < 0:
            return
        try:
            if flush:
                self.flush()
            else:
                self._parts.clear()
                self._buffered = 0
            if sync:
                self.fsync()
        finally:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- files --------------------------------------------------------------------------

    def _open_next(self) -> None:
        file_id = self._last_id + 1
        path = os.path.join(self.current_dir, journal_file_name(file_id))
        # The file is born complete: header and preallocation are written and fsynced under
        # a temporary name, then linked to its real name. A crash during creation therefore
        # never leaves a .txn with a torn header, which no reader could tell from junk.
        tmp = path + ".tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # left by a crash during an earlier creation of this id
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            header = encode_header(CURRENT_VERSION)
            _pwrite_all(fd, header, 0)
            self._fd = fd
            self._prealloc_end = 0
            self._extend(max(self.prealloc_size, len(header)))
            os.fsync(fd)  # once per file, with metadata (upstream forceWrite(true))
            # link, not rename: it fails if the name exists. A journal is never reopened for
            # writing; a collision is a bug or a second bookie on this directory.
            os.link(tmp, path)
            os.unlink(tmp)
            fsync_directory(self.current_dir)  # the name survives a crash before the first sync
        except BaseException:
            os.close(fd)
            self._fd = -1
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._last_id = file_id
        self.file_id = file_id
        self.path = path
        self.flushed_position = len(header)
        self.synced_mark = max(self.synced_mark, LogMark(file_id, len(header)))

    def _extend(self, new_end: int) -> None:
        # One sector of zeros ending at new_end: the file grows to new_end as a sparse hole
        # that reads back as zeros, i.e. as the "length 0 = end of journal" a reader expects.
        _pwrite_all(self._fd, self._zeros, new_end - len(self._zeros))
        self._prealloc_end = new_end


def delete_old_journals(
    journal_dir: str | os.PathLike[str],
    mark: LogMark,
    keep: int = DEFAULT_MAX_BACKUP_JOURNALS,
) -> list[int]:
    """After a checkpoint at ``mark``: delete journals older than it, keeping the ``keep``
    newest of those as backups (upstream ``maxBackupJournals``). Returns the deleted ids.

    Never touches ``mark.file_id`` or anything newer, so a running writer's file is safe.
    """
    older = [i for i in list_journal_ids(journal_dir) if i < mark.file_id]
    doomed = older[: max(0, len(older) - keep)]
    current = journal_current_dir(journal_dir)
    for file_id in doomed:
        # Already gone (a concurrent cleanup) is fine: the goal is reached.
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(current, journal_file_name(file_id)))
    return doomed
