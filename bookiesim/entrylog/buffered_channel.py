"""A file written through a fixed in-memory buffer: upstream's ``BufferedChannel``.

:class:`BufferedChannel` is the part of an entry log's writer that knows nothing of entries:
bytes are copied into a write buffer (``writeBufferSizeBytes``) that reaches the OS in one
``pwrite`` each time it fills, on :meth:`BufferedChannel.flush` and before sealing; reads see
the buffered bytes too. :class:`~bookiesim.entrylog.writer.EntryLogWriter` builds the log's
format on it (header, entries, ledgers map), as upstream's ``BufferedLogChannel`` extends its
``BufferedChannel``.

Deferred writes: a caller appending many bytes at once (the sorted storage's flush) may ask
that the buffers it fills be kept rather than written (``defer_writes``); they stay readable
here, :meth:`BufferedChannel.take_pending` hands them to a :class:`PendingWrite` made by a
worker thread, and :meth:`BufferedChannel.finish_pending` records the outcome. Every write is
at an explicit offset, so the owner may write the same bytes again meanwhile (a flush, a seal,
a close): harmless by construction, no lock.

Write errors: an ``OSError`` from a write leaves the file holding every earlier byte (in the
file or still in memory, where reads find it) and possibly a torn start of what was being
written. The channel then counts as failed (:attr:`BufferedChannel.failed`); it can still be
read, flushed and closed.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from bookiesim.entrylog.writeback import start_writeback

if TYPE_CHECKING:
    from bookiesim.proto.frames import Buffer

__all__ = ["BufferedChannel", "PendingWrite"]

_PAGE = 4096
_IOV_MAX = 1024
"""Buffers one ``pwritev`` takes (Linux's ``IOV_MAX``)."""


class BufferedChannel:
    """A file open for writing through a buffer, readable while written (module docstring).

    Sharing with another thread: only :meth:`sync_flushed`, :meth:`PendingWrite.write`, or
    :meth:`dup_for_sync` under a lock that the owner also holds to :meth:`close`.
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
        "_limit",
        "_persisted",
        "_pieces",
        "_taken_end",
        "_writeback_bytes",
        "_writeback_pos",
    )

    def __init__(
        self,
        fd: int,
        fspath: str,
        *,
        write_buffer_size: int,
        writeback_bytes: int = 0,
        buffer: bytearray | None = None,
    ) -> None:
        """Write ``fd`` (open on ``fspath``, empty) from offset 0. ``writeback_bytes > 0``
        starts the kernel's writeback (without waiting) of every that many bytes handed to
        the OS (:mod:`.writeback`). ``buffer``: a write buffer to reuse (of
        ``write_buffer_size`` bytes; its content does not matter)."""
        if write_buffer_size <= 0:
            raise ValueError(f"write buffer size must be positive, not {write_buffer_size}")
        self._fd = fd
        self._fspath = fspath
        self._capacity = write_buffer_size
        self._align = _PAGE if write_buffer_size >= 2 * _PAGE else 1
        self._writeback_bytes = writeback_bytes
        self._writeback_pos = 0
        self._closed = False
        self._failed: OSError | None = None
        if buffer is None or len(buffer) != write_buffer_size:
            buffer = bytearray(write_buffer_size)
        self._buf = buffer
        self._fill = 0  # bytes of _buf in use
        self._limit = write_buffer_size  # the buffer is written out when _fill reaches this
        self._file_pos = 0  # bytes handed to the OS (a prefix of the file)
        self._pieces: list[tuple[int, Buffer]] = []
        """Deferred writes: (offset, bytes) of full buffers not yet known to be in the file,
        contiguous from ``_file_pos``; readable here until written (:class:`PendingWrite`)."""
        self._buf_pos = 0  # the file offset of the buffer's first byte
        self._taken_end = 0  # deferred writes before this offset were taken already
        self._persisted = 0  # position known to be durable (fsynced)

    # ---------------------------------------------------------------- introspection

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
    def failed(self) -> OSError | None:
        """The write error that stopped this channel, if any (see the module docstring)."""
        return self._failed

    @property
    def closed(self) -> bool:
        return self._closed

    # ---------------------------------------------------------------- writing

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
        writer: BufferedChannel,
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
