"""Writing one entry log: upstream's ``BufferedLogChannel``.

A writer owns one new ``<dir>/<hex id>.log``. Records are copied into a fixed in-memory write
buffer (``writeBufferSizeBytes``, 64 KiB by default) that reaches the OS in one ``write`` call
each time it fills, on :meth:`EntryLogWriter.flush` and before sealing — upstream's
``BufferedChannel`` design. Nothing is fsynced unless asked (:meth:`EntryLogWriter.fsync`, or
``unpersisted_bytes_bound`` as upstream's ``flushEntrylogBytes``). The header itself starts in
the buffer, as upstream: a freshly created log is a 0-byte file until its first flush.

The per-entry path is deliberately small (a copy into the buffer, a dict update, a few
comparisons): the bookie's add path pays it for every entry. A caller with many entries of
one ledger at once (the sorted storage's flush) appends them as a run
(:meth:`EntryLogWriter.append_run`), which does that work once per run, in C loops. A writer
belongs to one thread (one trio task at a time); only :meth:`EntryLogWriter.sync_flushed`
may run elsewhere, so that fsyncs can go to a worker thread.

Write errors: an ``OSError`` from a write leaves the file holding every earlier entry (in the
file or still in the buffer, where reads find it) and possibly a torn start of the entry being
appended. The writer then refuses appends and sealing; it can still be read, flushed and
closed, and its log scans like a crashed one. The caller rotates to a new log.
"""

from __future__ import annotations

import errno
import os
import struct
from itertools import accumulate, repeat
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING

from bookiesim.entrylog.buffered_channel import BufferedChannel, PendingWrite
from bookiesim.entrylog.errors import EntryLogFullError
from bookiesim.entrylog.format import (
    HEADER_SIZE,
    LEDGERS_MAP_OFFSET_POSITION,
    MAX_LOG_SIZE,
    MIN_SANE_ENTRY_SIZE,
    LogHeader,
    encode_ledgers_map,
    log_file_name,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from bookiesim.proto.frames import Buffer

__all__ = ["DEFAULT_WRITE_BUFFER_SIZE", "EntryLogFullError", "EntryLogWriter", "PendingWrite"]

DEFAULT_WRITE_BUFFER_SIZE = 65536
"""Upstream's ``writeBufferSizeBytes`` default."""

_SIZE = struct.Struct(">i").pack
_PUT_SIZE = struct.Struct(">i").pack_into
_LEDGER_ID = struct.Struct(">q").unpack_from
_LEDGER_PREFIX = struct.Struct(">q").pack
_NEW_HEADER = LogHeader()
_NEW_HEADER_BYTES = _NEW_HEADER.encode()


def _run_sizes(ledger_id: int, bodies: Sequence[Buffer]) -> list[int]:
    """The sizes of a run of ``ledger_id``'s entry bodies, once the run is checked as
    :meth:`EntryLogWriter.append` checks one body: ``ValueError`` for a negative ledger id,
    a body shorter than 16 bytes, or one whose first 8 bytes name another ledger (a log of
    one ledger must never hold another's entry).

    Checked in C loops (``map``), tens of nanoseconds per body: the sorted storage's flush
    writes whole runs so as not to pay Python's per-entry overhead.
    """
    if ledger_id < 0:
        raise ValueError(f"entry has negative ledger id {ledger_id}")
    try:
        prefix = _LEDGER_PREFIX(ledger_id)
    except struct.error:
        raise ValueError(f"ledger id {ledger_id} does not fit a long") from None
    sizes = list(map(len, bodies))
    if sizes and min(sizes) < MIN_SANE_ENTRY_SIZE:
        n = min(sizes)
        raise ValueError(f"entry of {n} bytes is shorter than {MIN_SANE_ENTRY_SIZE}")
    try:
        # bytes.startswith refuses other buffers: the fallback below takes them.
        same_ledger = all(map(bytes.startswith, bodies, repeat(prefix)))  # type: ignore[arg-type]
    except TypeError:  # a bytearray or memoryview body, which append() takes too
        same_ledger = all(bytes(b[:8]) == prefix for b in bodies)
    if not same_ledger:
        other = next(b for b in bodies if bytes(b[:8]) != prefix)
        raise ValueError(
            f"entry of ledger {_LEDGER_ID(other)[0]} in a run of ledger {ledger_id}: a log "
            "must never hold two ledgers"
        )
    return sizes


class EntryLogWriter(BufferedChannel):
    """Append-only writer of one entry log, readable while it is being written.

    ::

        w = EntryLogWriter(directory, log_id)         # creates <directory>/<hex>.log
        location = w.append(body)                     # (log_id << 32) | pos
        w.read_at(pos, n)                             # sees buffered bytes too
        w.append_ledgers_map(); w.fsync(); w.close()  # seal, persist, close

    Sharing with another thread: only :meth:`sync_flushed`, or :meth:`dup_for_sync` under a
    lock that the owner also holds to :meth:`close`.
    """

    __slots__ = ("_header", "_ledgers", "_log_id", "_path", "_sealed", "_unpersisted_bound")

    def __init__(
        self,
        directory: str | os.PathLike[str],
        log_id: int,
        *,
        write_buffer_size: int = DEFAULT_WRITE_BUFFER_SIZE,
        unpersisted_bytes_bound: int = 0,
        writeback_bytes: int = 0,
        create: bool = True,
        buffer: bytearray | None = None,
        zero_header: bool = True,
    ) -> None:
        """Create ``<directory>/<hex log_id>.log``; it must not exist yet.

        ``create=False`` instead opens that file, which must exist and be empty: a log
        preallocated earlier (``FileExistsError`` if it holds any byte, so that a log with
        data is never written over). ``unpersisted_bytes_bound > 0`` fsyncs whenever that
        many bytes were appended since the last fsync (upstream ``flushEntrylogBytes``).
        ``writeback_bytes > 0`` starts the kernel's writeback (without waiting) of every
        that many bytes handed to the OS (:mod:`.writeback`), so that fsyncs find little left.
        ``buffer``: a write buffer to reuse (of ``write_buffer_size`` bytes; its content does
        not matter), e.g. from :meth:`release_buffer` of a closed writer.
        ``zero_header=False`` re-creates the bug fixed by upstream PR #4607, for fault
        campaigns only: of the header only magic and version are written into the buffer,
        so a reused buffer's old bytes stay where the ledgers-map offset and count live
        until the log is sealed.
        """
        if write_buffer_size <= 0:
            raise ValueError(f"write buffer size must be positive, not {write_buffer_size}")
        # A plain string: pathlib costs microseconds per log, and under churn (a new log for
        # nearly every add) that shows. :attr:`path` builds the Path when asked.
        fspath = os.fspath(directory) + os.sep + log_file_name(log_id)
        if create:
            # O_EXCL: never overwrite a log (the allocator skips existing ids; this makes sure).
            fd = os.open(fspath, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        else:
            fd = os.open(fspath, os.O_RDWR)
            try:
                size = os.fstat(fd).st_size
            except BaseException:
                os.close(fd)
                raise
            if size:
                os.close(fd)
                raise FileExistsError(
                    errno.EEXIST, f"entry log holds {size} bytes; not a preallocated log", fspath
                )
        super().__init__(
            fd,
            fspath,
            write_buffer_size=write_buffer_size,
            writeback_bytes=writeback_bytes,
            buffer=buffer,
        )
        self._path: Path | None = None
        self._log_id = log_id
        self._unpersisted_bound = unpersisted_bytes_bound
        self._sealed = False
        self._header = _NEW_HEADER
        buffer = self._buf
        self._ledgers: dict[int, int] = {}
        if write_buffer_size > HEADER_SIZE:
            if zero_header:
                buffer[:HEADER_SIZE] = _NEW_HEADER_BYTES
            else:
                at = LEDGERS_MAP_OFFSET_POSITION
                buffer[:at] = _NEW_HEADER_BYTES[:at]
            self._fill = HEADER_SIZE
        else:
            self._copy_in(_NEW_HEADER_BYTES)

    # ---------------------------------------------------------------- introspection

    @property
    def log_id(self) -> int:
        return self._log_id

    @property
    def path(self) -> Path:
        path = self._path
        if path is None:
            path = self._path = Path(self._fspath)
        return path

    @property
    def fspath(self) -> str:
        """:attr:`path` as a string (cheaper)."""
        return self._fspath

    @property
    def ledger_sizes(self) -> Mapping[int, int]:
        """Ledger id -> bytes in this log (sum of ``size + 4`` over its entries), read-only."""
        return MappingProxyType(self._ledgers)

    @property
    def header(self) -> LogHeader:
        """The header as it is (or will be) on disk."""
        return self._header

    @property
    def sealed(self) -> bool:
        """True once the ledgers map was appended; no more entries are accepted."""
        return self._sealed

    def __repr__(self) -> str:
        if self._closed:
            state = "closed"
        elif self._failed:
            state = "failed"
        else:
            state = "sealed" if self._sealed else "open"
        return f"<EntryLogWriter {self._fspath} {state} position={self.position}>"

    # ---------------------------------------------------------------- writing

    def append(self, body: Buffer) -> int:
        """Append one entry; return its location ``(log_id << 32) | pos``.

        ``body`` is the entry as the client packaged it: its first 8 bytes are the ledger id,
        which keys the per-ledger byte count. Raises ``ValueError`` for a body shorter than
        16 bytes or with a negative ledger id (the ledgers map and the scanner reserve
        negative ids), ``EntryLogFullError`` if the log would pass ``MAX_LOG_SIZE``.
        """
        if self._sealed or self._closed or self._failed:
            raise ValueError(f"{self!r} does not accept entries")
        n = len(body)
        if n < MIN_SANE_ENTRY_SIZE:
            raise ValueError(f"entry of {n} bytes is shorter than {MIN_SANE_ENTRY_SIZE}")
        (ledger_id,) = _LEDGER_ID(body)
        if ledger_id < 0:
            raise ValueError(f"entry has negative ledger id {ledger_id}")
        fill = self._fill
        pos = self._buf_pos + fill + 4
        if pos + n > MAX_LOG_SIZE:
            raise EntryLogFullError(
                f"{self._fspath}: entry of {n} bytes at {pos} would pass {MAX_LOG_SIZE} bytes"
            )
        ledgers = self._ledgers
        ledgers[ledger_id] = ledgers.get(ledger_id, 0) + n + 4
        end = fill + 4 + n
        if end < self._limit:
            buf = self._buf
            _PUT_SIZE(buf, fill, n)
            buf[fill + 4 : end] = body
            self._fill = end
        else:
            try:
                self._copy_in(_SIZE(n))
                self._copy_in(body)
            except OSError as e:
                self._failed = e
                raise
        if self._unpersisted_bound > 0 and pos + n - self._persisted >= self._unpersisted_bound:
            self.fsync()
        return (self._log_id << 32) | pos

    def append_run(
        self, ledger_id: int, bodies: Sequence[Buffer], *, defer_writes: bool = False
    ) -> list[int]:
        """Append ``ledger_id``'s entries in order; return their locations.

        The same bytes, locations and errors as :meth:`append` of each body in turn (bodies
        are checked by :func:`_run_sizes`), in one pass instead of a Python call per entry:
        one ledgers-map update, one ``join`` of the records copied into the buffer. Checked
        before anything is written, so an error leaves the log as it was; that includes
        ``EntryLogFullError`` if the run's end would pass ``MAX_LOG_SIZE`` (where
        :meth:`append` would have written the entries before the one that passes). With
        ``unpersisted_bytes_bound`` the fsync comes once, after the run.

        ``defer_writes``: each buffer this run fills is kept as a deferred write instead of
        being written here; :meth:`take_pending` hands them to a :class:`PendingWrite`,
        which writes them from another thread. Until then they are read from memory, and
        any :meth:`flush` writes them first.
        """
        if self._sealed or self._closed or self._failed:
            raise ValueError(f"{self!r} does not accept entries")
        sizes = _run_sizes(ledger_id, bodies)
        if not sizes:
            return []
        start = self._buf_pos + self._fill
        base = self._log_id << 32
        # Each body starts 4 bytes (its size) into its record; the last value is the end + 4.
        locations = list(accumulate([n + 4 for n in sizes], initial=base + start + 4))
        end = locations.pop() - base - 4
        if end > MAX_LOG_SIZE:  # so every pos < 2**31: base + pos is base | pos
            raise EntryLogFullError(
                f"{self._fspath}: {len(sizes)} entries ({end - start} bytes) at {start} "
                f"would pass {MAX_LOG_SIZE} bytes"
            )
        ledgers = self._ledgers
        ledgers[ledger_id] = ledgers.get(ledger_id, 0) + end - start
        records: list[Buffer] = [b""] * (2 * len(sizes))
        records[::2] = map(_SIZE, sizes)
        records[1::2] = bodies
        try:
            self._copy_in(b"".join(records), defer_writes)
        except OSError as e:
            self._failed = e
            raise
        if self._unpersisted_bound > 0 and end - self._persisted >= self._unpersisted_bound:
            self.fsync()
        return locations

    def append_ledgers_map(self) -> LogHeader:
        """Seal the log: append its ledgers map and patch the header; return the new header.

        Upstream's ``appendLedgersMap``: the map batches are written at the current end, the
        channel is flushed so that the map is in the file before the header points at it,
        then bytes 8..20 get (offset, count) by a positional write. A log without entries
        gets no map and a header of (offset = end, count = 0). Nothing is fsynced.

        Cheaper here when nothing of the log reached the OS yet (the usual case under churn:
        a log with a few small entries rotated to make room): the header is patched in the
        buffer and header, entries and map go out in one ``write``. The bytes on disk are
        the same; neither order is durable before the next fsync anyway, and a header that
        points at a map that is not (all) there makes readers scan the log.
        """
        self._check_open()
        if self._sealed:
            raise ValueError(f"{self!r} already has its ledgers map")
        if self._failed:
            raise ValueError(f"{self!r} cannot be sealed after a write error")
        offset = self._buf_pos + self._fill
        header = LogHeader(
            version=self._header.version,
            ledgers_map_offset=offset,
            ledgers_count=len(self._ledgers),
        )
        patch = header.encode_map_patch()
        ledgers_map = encode_ledgers_map(self._ledgers)
        in_buffer = (
            self._buf_pos == 0
            and self._fill >= HEADER_SIZE
            and self._fill + len(ledgers_map) < self._limit
        )
        if in_buffer:
            buf = self._buf
            at = LEDGERS_MAP_OFFSET_POSITION
            buf[at : at + len(patch)] = patch
            fill = self._fill
            buf[fill : fill + len(ledgers_map)] = ledgers_map
            self._fill = fill + len(ledgers_map)
        else:
            self._copy_in(ledgers_map)
        self.flush()
        if not in_buffer:
            os.pwrite(self._fd, patch, LEDGERS_MAP_OFFSET_POSITION)
        self._header = header
        self._sealed = True
        return header

    def __enter__(self) -> EntryLogWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
