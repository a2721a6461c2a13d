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
from bookiesim.entrylog.writeback import start_writeback

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from bookiesim.proto.frames import Buffer

__all__ = ["DEFAULT_WRITE_BUFFER_SIZE", "EntryLogFullError", "EntryLogWriter", "PendingWrite"]

DEFAULT_WRITE_BUFFER_SIZE = 65536
"""Upstream's ``writeBufferSizeBytes`` default."""

_PAGE = 4096
_IOV_MAX = 1024
"""Buffers one ``pwritev`` takes (Linux's ``IOV_MAX``)."""
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


class EntryLogWriter:
    """Append-only writer of one entry log, readable while it is being written.

    ::

        w = EntryLogWriter(directory, log_id)         # creates <directory>/<hex>.log
        location = w.append(body)                     # (log_id << 32) | pos
        w.read_at(pos, n)                             # sees buffered bytes too
        w.append_ledgers_map(); w.fsync(); w.close()  # seal, persist, close

    Sharing with another thread: only :meth:`sync_flushed`, or :meth:`dup_for_sync` under a
    lock that the owner also holds to :meth:`close`.
    """

    __slots__ = (
        "_align",
        "_buf",
        "_buf_pos",
        "_capacity",
        "_closed",
        "_failed",
        "_fd",
        "_file_pos",
        "_fill",
        "_fspath",
        "_header",
        "_ledgers",
        "_limit",
        "_log_id",
        "_path",
        "_persisted",
        "_pieces",
        "_sealed",
        "_taken_end",
        "_unpersisted_bound",
        "_writeback_bytes",
        "_writeback_pos",
    )

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
        fspath = self._fspath = os.fspath(directory) + os.sep + log_file_name(log_id)
        self._path: Path | None = None
        self._log_id = log_id
        self._capacity = write_buffer_size
        self._align = _PAGE if write_buffer_size >= 2 * _PAGE else 1
        self._unpersisted_bound = unpersisted_bytes_bound
        self._writeback_bytes = writeback_bytes
        self._writeback_pos = 0
        if create:
            # O_EXCL: never overwrite a log (the allocator skips existing ids; this makes sure).
            self._fd = os.open(fspath, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
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
            self._fd = fd
        self._closed = False
        self._sealed = False
        self._failed: OSError | None = None
        self._header = _NEW_HEADER
        if buffer is None or len(buffer) != write_buffer_size:
            buffer = bytearray(write_buffer_size)
        self._buf = buffer
        self._fill = 0  # bytes of _buf in use
        self._limit = write_buffer_size  # the buffer is written out when _fill reaches this
        self._file_pos = 0  # bytes handed to the OS (a prefix of the log)
        self._pieces: list[tuple[int, Buffer]] = []
        """Deferred writes: (offset, bytes) of full buffers not yet known to be in the file,
        contiguous from ``_file_pos``; readable here until written (:class:`PendingWrite`)."""
        self._buf_pos = 0  # the log offset of the buffer's first byte
        self._taken_end = 0  # deferred writes before this offset were taken already
        self._persisted = 0  # position known to be durable (fsynced)
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
    def position(self) -> int:
        """Logical end of the log: bytes handed to the OS plus bytes still buffered."""
        return self._buf_pos + self._fill

    def size(self) -> int:
        """Same as :attr:`position` (the log-source protocol of the reader and scanner)."""
        return self._buf_pos + self._fill

    @property
    def os_position(self) -> int:
        """Bytes handed to the OS so far: what an fsync started now makes durable."""
        return self._file_pos

    @property
    def unpersisted_bytes(self) -> int:
        """Bytes appended (header and ledgers map included) since the last fsync."""
        return self._buf_pos + self._fill - self._persisted

    @property
    def buffered_bytes(self) -> int:
        """Bytes not yet handed to the OS (deferred writes and the buffer)."""
        return self._buf_pos - self._file_pos + self._fill

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

    @property
    def failed(self) -> OSError | None:
        """The write error that stopped this writer, if any (see the module docstring)."""
        return self._failed

    @property
    def closed(self) -> bool:
        return self._closed

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

    # Why a fixed buffer written whole: measured here (2 cores, 64 KiB entries), writing
    # full 64 KiB buffers at page-aligned offsets costs ~15 us per entry against ~13.5 us
    # for raw 64 KiB writes, while handing each body to writev() uncopied (with the 4-byte
    # size in front, so at unaligned offsets) cost ~20 us: the copy is cheaper than the
    # misaligned write. After a partial flush the next buffer is cut short so that full
    # writes end on a page boundary again.

    def _copy_in(self, data: Buffer, defer_writes: bool = False) -> None:
        """Copy ``data`` into the buffer, writing the buffer out (or keeping it as a deferred
        write) each time it fills."""
        if defer_writes:
            self._defer_in(data)
            return
        buf = self._buf
        with memoryview(data) as view:
            off = 0
            total = len(view)
            while off < total:
                fill = self._fill
                k = min(self._limit - fill, total - off)
                if k > 0:
                    buf[fill : fill + k] = view[off : off + k]
                    self._fill = fill + k
                    off += k
                if self._fill >= self._limit:
                    self._write_buffer()

    def _defer_in(self, data: Buffer) -> None:
        """:meth:`_copy_in` with deferred writes, for a run's records joined into one
        ``bytes``: the buffer is topped up and kept, then the bulk of ``data`` becomes a
        deferred write of its own, a view of ``data`` (no copy: it is immutable), ending on
        a page boundary; the tail goes to the buffer. Copying a run into the buffer and then
        each full buffer into a deferred write cost two copies of every byte flushed."""
        view = memoryview(data)
        total = len(view)
        fill = self._fill
        off = min(self._limit - fill, total)
        self._buf[fill : fill + off] = view[:off]
        self._fill = fill + off
        if self._fill < self._limit:
            return
        self._defer_buffer()
        bulk = total - off
        bulk -= (self._buf_pos + bulk) % self._align
        if bulk >= self._capacity:
            self._pieces.append((self._buf_pos, view[off : off + bulk]))
            self._buf_pos += bulk
            self._limit = self._capacity - self._buf_pos % self._align
            off += bulk
        buf = self._buf
        while off < total:
            fill = self._fill
            k = min(self._limit - fill, total - off)
            buf[fill : fill + k] = view[off : off + k]
            self._fill = fill + k
            off += k
            if self._fill >= self._limit:
                self._defer_buffer()

    def _defer_buffer(self) -> None:
        """Keep the full buffer as a deferred write (a copy: the buffer is reused)."""
        fill = self._fill
        with memoryview(self._buf) as view:
            self._pieces.append((self._buf_pos, bytes(view[:fill])))
        self._buf_pos += fill
        self._fill = 0
        self._limit = self._capacity - self._buf_pos % self._align

    def _write_pieces(self) -> None:
        """Write the deferred writes not yet known written, in order (again, if a
        :class:`PendingWrite` has them in flight: the same bytes at the same offsets)."""
        pieces = self._pieces
        while pieces:
            offset, data = pieces[0]
            done = self._file_pos - offset  # > 0 after a short write
            with memoryview(data) as view:
                while done < len(view):
                    written = os.pwrite(self._fd, view[done:], offset + done)
                    done += written
                    self._file_pos = offset + done
            del pieces[0]

    def _write_buffer(self) -> None:
        """Hand the deferred writes and the buffered bytes to the OS; on an error keep what
        was not written."""
        if self._pieces:
            self._write_pieces()
        buf = self._buf
        fill = self._fill
        written = 0
        try:
            with memoryview(buf) as view:
                while written < fill:
                    written += os.pwrite(self._fd, view[written:fill], self._buf_pos + written)
        finally:
            if written:
                self._file_pos += written
                self._buf_pos = self._file_pos
                if written < fill:
                    buf[: fill - written] = buf[written:fill]
                self._fill = fill - written
                self._limit = self._capacity - self._file_pos % self._align
        if self._writeback_bytes and self._file_pos - self._writeback_pos >= self._writeback_bytes:
            start_writeback(self._fd, self._writeback_pos, self._file_pos - self._writeback_pos)
            self._writeback_pos = self._file_pos

    def flush(self) -> None:
        """Hand deferred writes and buffered bytes to the OS (no fsync)."""
        self._check_open()
        if self._fill or self._pieces:
            self._write_buffer()

    # ---------------------------------------------------------------- deferred writes

    @property
    def pending_bytes(self) -> int:
        """Bytes of deferred writes not yet known to be in the file."""
        return self._buf_pos - self._file_pos

    def take_pending(self) -> PendingWrite | None:
        """The deferred writes not taken yet, for :meth:`PendingWrite.write` in another
        thread (None if there are none). They stay readable here until
        :meth:`finish_pending` hears they are written; the writer may meanwhile append,
        flush (writing them again: the same bytes at the same offsets) or close.
        """
        end = self._buf_pos
        if end <= self._taken_end or self._closed:
            return None
        taken = self._taken_end
        pieces = [piece for piece in self._pieces if piece[0] >= taken]
        self._taken_end = end
        if not pieces:
            return None
        writeback = None
        if self._writeback_bytes and end - self._writeback_pos >= self._writeback_bytes:
            writeback = (self._writeback_pos, end - self._writeback_pos)
            self._writeback_pos = end
        return PendingWrite(self, os.dup(self._fd), pieces, writeback)

    def finish_pending(self, pending: PendingWrite) -> None:
        """Owner thread, after ``pending.write()``: what it wrote is in the file; if it
        failed, this writer stops as after any write error, the unwritten rest stays
        readable (and is written by the next :meth:`flush`, if it can be), and the error
        is raised. Pending writes of one writer are best finished in the order taken: one
        finished before an earlier one stays in memory until a flush writes it again."""
        if pending.start <= self._file_pos < pending.written_end:
            self._file_pos = pending.written_end
            pieces = self._pieces
            while pieces and pieces[0][0] + len(pieces[0][1]) <= self._file_pos:
                del pieces[0]
        error = pending.error
        if error is not None:
            if self._failed is None and not self._closed:
                self._failed = error
            raise error

    def fsync(self, *, metadata: bool = True) -> None:
        """Flush, then ``fsync`` (``fdatasync`` when ``metadata`` is False)."""
        self.flush()
        self.mark_persisted(self.sync_flushed(metadata=metadata))

    def sync_flushed(self, *, metadata: bool = True) -> int:
        """``fsync`` what was already flushed; return the position now durable.

        Touches neither the buffer nor the counters, so it may run in a worker thread
        (``trio.to_thread.run_sync``) while the owning thread keeps appending and flushing;
        the owner then calls :meth:`mark_persisted` with the result. The owner must not
        :meth:`close` the writer while such a call is in flight (:meth:`dup_for_sync` lifts
        that restriction).
        """
        durable = self._file_pos
        if metadata:
            os.fsync(self._fd)
        else:
            os.fdatasync(self._fd)
        return durable

    def dup_for_sync(self) -> tuple[int, int]:
        """A duplicate of the descriptor and the position flushed so far, for an fsync
        elsewhere: ``os.fsync(fd)`` then makes that position durable (a duplicate shares the
        open file), and the owner may close the writer meanwhile. The caller closes ``fd``.

        Call it under the lock the owner holds to :meth:`close`; that lock is then held for
        a ``dup``, not for an fsync that may take milliseconds.
        """
        self._check_open()
        return os.dup(self._fd), self._file_pos

    def mark_persisted(self, position: int) -> None:
        """Record that everything before ``position`` is durable (see :meth:`sync_flushed`)."""
        self._persisted = max(self._persisted, position)

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

    def release_buffer(self) -> bytearray | None:
        """Once closed with every byte handed to the OS: give up the write buffer for another
        writer to reuse (None otherwise, or if it was released already)."""
        if not self._closed or self._fill or self._pieces or not self._buf:
            return None
        buf = self._buf
        self._buf = bytearray()
        return buf

    def close(self, *, discard_buffer: bool = False) -> None:
        """Flush buffered bytes to the OS and close the file (no fsync). Idempotent.

        ``discard_buffer=True`` drops the buffered bytes instead: for a log that was never
        used (the header alone, still in the buffer), which stays an empty file.
        """
        if self._closed:
            return
        try:
            if discard_buffer:
                self._fill = 0
                self._pieces.clear()
                self._buf_pos = self._file_pos
            else:
                self.flush()
        finally:
            self._closed = True
            os.close(self._fd)

    def __enter__(self) -> EntryLogWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---------------------------------------------------------------- reading

    def read_at(self, pos: int, n: int) -> bytes:
        """Up to ``n`` bytes from offset ``pos``, whether still buffered or in the file.

        Fewer than ``n`` bytes come back only at the end of the log.
        """
        self._check_open()
        if pos < 0 or n < 0:
            raise ValueError(f"cannot read {n} bytes at {pos}")
        buf_pos = self._buf_pos
        fill = self._fill
        if pos >= buf_pos:  # the usual case while a log is written: all in the buffer
            start = min(pos - buf_pos, fill)
            return bytes(self._buf[start : min(start + n, fill)])
        file_end = self._file_pos
        if pos >= file_end or pos + n > file_end:
            return self._read_unwritten(pos, n)
        return os.pread(self._fd, n, pos)

    def _read_unwritten(self, pos: int, n: int) -> bytes:
        """:meth:`read_at` of a range that is not all in the file: the file's part, then
        the deferred writes', then the buffer's."""
        end = min(pos + n, self._buf_pos + self._fill)
        parts: list[bytes] = []
        file_end = self._file_pos
        if pos < file_end:
            head = os.pread(self._fd, file_end - pos, pos)
            if len(head) < file_end - pos:
                return head  # the file is shorter than written: return what it has
            parts.append(head)
        for offset, data in self._pieces:
            stop = offset + len(data)
            if stop > pos and offset < end:
                parts.append(bytes(data[max(pos, offset) - offset : min(end, stop) - offset]))
        if end > self._buf_pos:
            parts.append(bytes(self._buf[max(pos - self._buf_pos, 0) : end - self._buf_pos]))
        return b"".join(parts)

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self!r} is closed")


class PendingWrite:
    """A writer's deferred writes, taken to be written in another thread.

    Upstream's ``SortedLedgerStorage`` flushes its table on a thread of its own; here the
    flush's bookkeeping (locations, the index) stays on the owner's thread and only the
    copies to the OS move: :meth:`write` touches nothing of the writer but its own
    duplicate of the descriptor, so it may run while the owner appends, reads, flushes or
    closes (a flush by the owner writes the same bytes at the same offsets: harmless).
    The owner then calls :meth:`EntryLogWriter.finish_pending`.
    """

    __slots__ = ("_fd", "_pieces", "_writeback", "error", "start", "writer", "written_end")

    def __init__(
        self,
        writer: EntryLogWriter,
        fd: int,
        pieces: list[tuple[int, Buffer]],
        writeback: tuple[int, int] | None,
    ) -> None:
        self.writer = writer
        self._fd = fd
        self._pieces = pieces
        self._writeback = writeback
        self.start = pieces[0][0]
        """The log offset of the first byte to write."""
        self.written_end = self.start
        """The log offset up to which this write is known to be in the file."""
        self.error: OSError | None = None

    @property
    def nbytes(self) -> int:
        return sum(len(data) for _, data in self._pieces)

    def write(self) -> None:
        """Write the pieces (contiguous) with one ``pwritev`` (a short write continues where
        it stopped), then start the kernel's writeback if due; closes the duplicate
        descriptor. Never raises: an ``OSError`` is kept in :attr:`error`. Any thread; once.

        One system call, not one per piece: a worker thread takes the GIL back after each,
        and while the trio thread is busy that wait, and the switch it forces, cost more CPU
        than the write itself (measured: the write on the trio thread cost it 1.9 s per
        million adds; the same writes a piece a call cost the worker and the journal's thread
        4.9 s more)."""
        fd = self._fd
        try:
            pieces = self._pieces
            first = 0  # the first piece not wholly written
            skip = 0  # bytes of it written
            while first < len(pieces):
                offset, data = pieces[first]
                buffers: list[Buffer] = [memoryview(data)[skip:]]
                buffers += [data for _, data in pieces[first + 1 : first + _IOV_MAX]]
                written = os.pwritev(fd, buffers, offset + skip)
                while written > 0:
                    offset, data = pieces[first]
                    left = len(data) - skip
                    if written < left:
                        skip += written
                        break
                    written -= left
                    first += 1
                    skip = 0
                    self.written_end = offset + len(data)
            if self._writeback is not None:
                start_writeback(fd, *self._writeback)
        except OSError as exc:
            self.error = exc
        finally:
            os.close(fd)
