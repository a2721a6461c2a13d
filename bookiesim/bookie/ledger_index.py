"""Per-ledger index files in upstream's ``BKLE`` layout (reference §2.8, upstream ``FileInfo``).

Why this module exists: for every entry the bookie must remember where the entry log put it
(``location = (logId << 32) | pos``), plus three facts per ledger that must survive a restart:
the master key (EUA checks), the fenced bit (EFENCED after recovery started) and the explicit
LAC blob of WriteLac. Upstream's interleaved storage keeps them in one file per ledger, and we
write the same files so upstream tools can read ours and the other way round::

    <indexDir>/current/<hex((lid >> 8) & 0xff)>/<hex(lid & 0xff)>/<hex lid>.idx

    offset  size  field (big-endian)
    0       4     b"BKLE"
    4       4     int version (1; version 0 files have no explicit-LAC fields)
    8       4     int masterKey length K
    12      K     master key
    12+K    4     int stateBits (0x1 = fenced)
    16+K    4     int explicitLac length L (version >= 1; 0 = none, else >= 16)
    20+K    L     explicit LAC blob (ledgerId, lac, digest: see client.digest.package_lac)
    ...           zero fill up to 1024
    1024+8e 8     long location of entry e (0 = no entry)

After the header the file holds whole pages of 1024 locations (8192 bytes), zero-filled
where there is no entry, as upstream's ``IndexPersistenceMgr`` writes them: upstream reads an
entry's page whole, so a file that ends inside a page is a short read (EIO) for the entries
of that page. Every write here pads the last page (files of the previous bookiesim, which
ended at the last location, are read as they are and padded by their next write, or by
:func:`pad_index_files` when the bookie adopts their directories).

Theory of operation. The bookie calls :meth:`LedgerIndex.set_location` on its add path, once
per entry, so that call is a dict assignment and nothing else: locations and header changes
stay in memory ("dirty") until :meth:`LedgerIndex.flush`, which writes each ledger's dirty
locations as one ``pwrite`` per run of consecutive entry ids; :meth:`LedgerIndex.fsync` then
makes them durable. (The journal covers what is not flushed yet: the checkpoint flushes and
fsyncs the index before the journal mark moves.)

A bookie may hold far more ledgers than it may hold open files, so the index keeps at most
``max_open_files`` descriptors open, closing the least recently used one to open another
(upstream's ``openFileLimit``, 900 by default). A file only needs a descriptor to read an entry
that is not dirty, to flush, and to fsync; each :class:`IndexFile` asks its tracker before it
opens one, so the cap holds at every instant, not just between calls. Closing a file for room
only closes the descriptor: its dirty state stays in memory until the next flush. (Upstream
writes an evicted page out at once. Here that page could point at entry-log bytes still in
the log writer's buffer, and a kill -9 would then leave the index pointing past the end of
the log, at entries the journal never synced and replay cannot repair.)

A checkpoint goes further: an index page may reach the OS only once the log bytes it points
at are durable, because the kernel may write any page back on its own before an fsync is
asked for, and a power loss would then leave a durable index pointing at log bytes that are
gone. So :meth:`LedgerIndex.detach_dirty` sets the dirty locations aside when the logs'
buffers go to the OS, reads keep seeing them, and :meth:`LedgerIndex.write_detached` writes
them after the logs' fsync; what was added in between stays dirty for the next checkpoint.
:meth:`LedgerIndex.write_detached` returns the paths to sync, and a worker reopens the files
to sync them; that is safe because fsync acts on the inode, not the descriptor, and current
Linux kernels (errseq_t) report a writeback error that nobody has seen yet to a later opener
too.

A ledger's in-memory state (key, fence bit, explicit LAC, dirty locations, last entry id)
stays loaded while its descriptor comes and goes; it is read from the header on first access
after startup and dropped when the ledger is deleted.

Nothing here is thread-safe: call it from one thread (the trio thread). Even ``fsync()``
may open, evict and flush files, so it must not run in a worker while adds continue; to keep
fdatasync off the trio thread, :meth:`LedgerIndex.write_detached` writes on the caller's
thread and returns the paths to sync, which a worker syncs with descriptors of its own.
"""

from __future__ import annotations

import itertools
import os
import struct
import sys
from array import array
from collections import OrderedDict, deque
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from bookiesim.entrylog.writeback import fsync_directory

__all__ = [
    "FENCED_BIT",
    "HEADER_SIZE",
    "HEADER_VERSION",
    "PAGE_SIZE",
    "SIGNATURE",
    "IndexFile",
    "IndexFormatError",
    "IndexHeader",
    "LedgerExistsError",
    "LedgerIndex",
    "NoSuchLedgerError",
    "decode_header",
    "encode_header",
    "index_path",
    "pad_index_files",
    "parse_index_file_name",
]

SIGNATURE: Final = b"BKLE"
HEADER_VERSION: Final = 1
HEADER_SIZE: Final = 1024
"""Upstream's ``START_OF_DATA``: entry locations start here."""
FENCED_BIT: Final = 0x1
LAC_METADATA_LENGTH: Final = 16
"""An explicit LAC blob holds at least ledgerId and lac (upstream rejects 1..15 bytes)."""
MAX_LOCATION: Final = 2**63 - 1
DEFAULT_MAX_OPEN_FILES: Final = 900
"""Upstream's ``openFileLimit`` default."""
_DELETION_HISTORY: Final = 65536
"""Ledger deletions remembered for :meth:`LedgerIndex.deleted_since`; beyond that its
caller falls back to checking every ledger."""
_INDEX_EPOCHS = itertools.count(1)
"""Gives every :class:`LedgerIndex` an epoch of its own, so that a deletion cursor taken
on one index never matches another's count."""

_SLOT: Final = 8

WRITE_STEP_LOCATIONS: Final = 4096
"""Locations a checkpoint writes between chances for the owner to serve adds: with 10
ledgers at 20,000 adds/s, one checkpoint writes 200,000, which in one go held the trio thread
for 70-80 ms (BENCHMARKS.md); a step of 4096 takes well under a millisecond."""
WRITE_STEP_FILE_COST: Final = 64
"""A file's fixed cost in a checkpoint (descriptor, header, pwrite), in locations: so that
thousands of ledgers with one new entry each also let the owner in between."""
_PAGE_SLOTS: Final = 1024  # upstream's pageSize of 8192 bytes; our unit for scanning reads
PAGE_SIZE: Final = _PAGE_SLOTS * 8
"""Upstream's ``pageSize``: an index file is the header plus a whole number of these."""
_FIXED_HEADER: Final = 4 + 4 + 4 + 4 + 4  # signature, version, key length, state, lac length
_INT = struct.Struct(">i")
_LOCATION = struct.Struct(">q")
_LITTLE_ENDIAN: Final = sys.byteorder == "little"  # locations are big-endian on disk


# -- errors ---------------------------------------------------------------------------------


class IndexFormatError(ValueError):
    """A file is not a valid BKLE index; says which file, where, and what was found."""

    def __init__(self, path: str | os.PathLike[str], offset: int, reason: str) -> None:
        super().__init__(f"{os.fspath(path)}: {reason} (at offset {offset})")
        self.path = os.fspath(path)
        self.offset = offset
        self.reason = reason


class NoSuchLedgerError(LookupError):
    """The ledger has no index (the bookie answers ENOLEDGER)."""

    def __init__(self, ledger_id: int) -> None:
        super().__init__(f"ledger {ledger_id} has no index on this bookie")
        self.ledger_id = ledger_id


class LedgerExistsError(ValueError):
    """``create_ledger`` for a ledger that already has an index."""

    def __init__(self, ledger_id: int, path: Path) -> None:
        super().__init__(f"ledger {ledger_id} already has an index at {path}")
        self.ledger_id = ledger_id


# -- header (sans-IO) -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexHeader:
    """The decoded first 1024 bytes of an index file."""

    master_key: bytes
    state_bits: int = 0
    explicit_lac: bytes | None = None
    version: int = HEADER_VERSION

    @property
    def fenced(self) -> bool:
        return bool(self.state_bits & FENCED_BIT)


def _check_header_fits(master_key: bytes, explicit_lac: bytes | None) -> None:
    used = _FIXED_HEADER + len(master_key) + (len(explicit_lac) if explicit_lac else 0)
    if used > HEADER_SIZE:
        raise ValueError(
            f"master key ({len(master_key)} bytes) and explicit LAC "
            f"({len(explicit_lac) if explicit_lac else 0} bytes) need a {used}-byte header; "
            f"the index header has {HEADER_SIZE}"
        )


def encode_header(header: IndexHeader) -> bytes:
    """The 1024 header bytes, zero-filled, as upstream's ``FileInfo.writeHeader``."""
    _check_header_fits(header.master_key, header.explicit_lac)
    parts = [
        SIGNATURE,
        _INT.pack(header.version),
        _INT.pack(len(header.master_key)),
        header.master_key,
        _INT.pack(header.state_bits),
    ]
    if header.version >= 1:
        lac = header.explicit_lac or b""
        parts += [_INT.pack(len(lac)), lac]
    data = b"".join(parts)
    return data + bytes(HEADER_SIZE - len(data))


def decode_header(data: bytes, path: str | os.PathLike[str] = "<index>") -> IndexHeader:
    """Decode a header from the first ``min(file size, 1024)`` bytes of an index file.

    Like upstream's ``FileInfo.readHeader``, a file shorter than 1024 bytes is accepted if
    every field fits in it; a field that runs past the end is an :class:`IndexFormatError`
    naming the field and its offset (upstream would rewrite the header from memory, which
    hides the damage; we refuse and say so).
    """
    size = len(data)

    def take_int(offset: int, what: str) -> int:
        if offset + 4 > size:
            raise IndexFormatError(
                path,
                offset,
                f"truncated header: {what} needs 4 bytes but the file ends at {size}",
            )
        value: int = _INT.unpack_from(data, offset)[0]
        return value

    if data[:4] != SIGNATURE:
        found = data[:4].hex() if data else "an empty file"
        raise IndexFormatError(path, 0, f"not a BKLE index file: signature {found}")
    version = take_int(4, "version")
    if not 0 <= version <= HEADER_VERSION:
        raise IndexFormatError(path, 4, f"unsupported index header version {version}")
    key_length = take_int(8, "master key length")
    if key_length < 0 or 12 + key_length > size:
        raise IndexFormatError(
            path,
            8,
            f"master key length {key_length} is invalid: the header has {size - 12} bytes left",
        )
    master_key = bytes(data[12 : 12 + key_length])
    pos = 12 + key_length
    state_bits = take_int(pos, "state bits")
    pos += 4
    explicit_lac = None
    if version >= 1:
        lac_length = take_int(pos, "explicit LAC length")
        if lac_length != 0 and (lac_length < LAC_METADATA_LENGTH or pos + 4 + lac_length > size):
            raise IndexFormatError(
                path,
                pos,
                f"explicit LAC length {lac_length} is invalid (must be 0 or at least "
                f"{LAC_METADATA_LENGTH}; {size - pos - 4} header bytes left)",
            )
        if lac_length:
            explicit_lac = bytes(data[pos + 4 : pos + 4 + lac_length])
    return IndexHeader(master_key, state_bits, explicit_lac, version)


def index_path(index_dir: str | os.PathLike[str], ledger_id: int) -> Path:
    """Where upstream (``IndexPersistenceMgr.getLedgerName``) puts a ledger's index file."""
    if not 0 <= ledger_id <= MAX_LOCATION:
        raise ValueError(f"ledger id {ledger_id} is not a non-negative 64-bit long")
    return (
        Path(index_dir)
        / "current"
        / f"{(ledger_id >> 8) & 0xFF:x}"
        / f"{ledger_id & 0xFF:x}"
        / f"{ledger_id:x}.idx"
    )


def parse_index_file_name(name: str) -> int | None:
    """The ledger id of an index file name (``<lower-case hex id>.idx``), or None.

    Only names upstream writes count (no leading zeros, signs or upper case).
    """
    return _ledger_id_of(name)


# -- one file -------------------------------------------------------------------------------


class OpenFileTracker(Protocol):
    """What an :class:`IndexFile` tells whoever caps open descriptors (the LedgerIndex)."""

    def opening(self, index_file: IndexFile) -> None:
        """About to open a descriptor: make room now (the cap must hold at every instant)."""

    def used(self, index_file: IndexFile) -> None:
        """About to use an open descriptor: the file is now the most recently used."""

    def closed(self, index_file: IndexFile) -> None:
        """The descriptor is closed (or opening it failed)."""


def _pread_full(fd: int, length: int, offset: int) -> bytes:
    """Read up to ``length`` bytes; fewer only at end of file."""
    data = os.pread(fd, length, offset)
    if len(data) == length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _pwrite_full(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n


class IndexFile:
    """One ledger's index file: header fields plus entry locations.

    Changes are kept in memory until :meth:`flush`; :meth:`fsync` makes flushed data durable.
    The descriptor is opened lazily when I/O is needed and may be closed with :meth:`close`
    (or by the tracker) at any time; the object stays usable and reopens the file.
    """

    __slots__ = (
        "_dirty",
        "_dirty_max",
        "_disk_slots",
        "_explicit_lac",
        "_fd",
        "_file_size",
        "_header_dirty",
        "_last_on_disk",
        "_master_key",
        "_new_dirs",
        "_on_disk",
        "_open_flags",
        "_pending",
        "_pending_max",
        "_state_bits",
        "_tracker",
        "_unsynced",
        "_version",
        "ledger_id",
        "path",
    )

    def __init__(
        self,
        path: Path,
        ledger_id: int,
        header: IndexHeader,
        *,
        on_disk: bool,
        tracker: OpenFileTracker | None,
    ) -> None:
        # Use create() or open().
        self.path: Final = path
        self.ledger_id: Final = ledger_id
        self._version = header.version
        self._master_key = header.master_key
        self._state_bits = header.state_bits
        self._explicit_lac = header.explicit_lac
        self._header_dirty = not on_disk
        self._on_disk = on_disk
        self._tracker = tracker
        self._open_flags = os.O_RDWR
        self._fd: int | None = None
        self._dirty: dict[int, int] = {}
        self._dirty_max = -1
        # Locations set aside by detach() for the checkpoint in flight: they may reach the
        # OS only once the log bytes they point at are durable (write_detached()).
        self._pending: dict[int, int] = {}
        self._pending_max = -1
        self._disk_slots = 0  # complete 8-byte location slots in the file
        self._file_size = 0  # bytes in the file, as far as this object wrote or saw it
        self._last_on_disk: int | None = None if on_disk else -1  # None = not scanned yet
        self._unsynced = False  # written since the last fsync
        self._new_dirs: list[Path] = []  # directories whose entries must be fsynced

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        ledger_id: int,
        master_key: bytes,
        *,
        tracker: OpenFileTracker | None = None,
    ) -> IndexFile:
        """A new index in memory; the file and its directories are created by the first
        :meth:`flush`, so creating a ledger costs no descriptor."""
        path = Path(path)
        _check_header_fits(master_key, None)
        if path.exists():
            raise FileExistsError(f"index file {path} already exists")
        return cls(path, ledger_id, IndexHeader(bytes(master_key)), on_disk=False, tracker=tracker)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        ledger_id: int,
        *,
        tracker: OpenFileTracker | None = None,
        read_only: bool = False,
    ) -> IndexFile:
        """Read an existing index file's header (:class:`IndexFormatError` if it is not one).

        ``read_only`` opens the file ``O_RDONLY``, for tools that inspect files they must not
        (or cannot) write; a flush of such an index fails.
        """
        path = Path(path)
        index_file = cls(path, ledger_id, IndexHeader(b""), on_disk=True, tracker=tracker)
        if read_only:
            index_file._open_flags = os.O_RDONLY
        fd = index_file._io_fd()
        try:
            size = os.fstat(fd).st_size
            header = decode_header(_pread_full(fd, min(size, HEADER_SIZE), 0), path)
        except BaseException:
            index_file._close_fd()
            raise
        index_file._version = header.version
        index_file._master_key = header.master_key
        index_file._state_bits = header.state_bits
        index_file._explicit_lac = header.explicit_lac
        index_file._disk_slots = max(0, (size - HEADER_SIZE) // _SLOT)
        index_file._file_size = size
        return index_file

    # -- header fields --------------------------------------------------------------------

    @property
    def master_key(self) -> bytes:
        return self._master_key

    @property
    def fenced(self) -> bool:
        return bool(self._state_bits & FENCED_BIT)

    def set_fenced(self) -> bool:
        """Set the fenced bit (irreversible); True if it was not set before."""
        if self._state_bits & FENCED_BIT:
            return False
        self._state_bits |= FENCED_BIT
        self._header_dirty = True
        return True

    @property
    def explicit_lac(self) -> bytes | None:
        """The last WriteLac blob stored, verbatim."""
        return self._explicit_lac

    def set_explicit_lac(self, blob: bytes) -> None:
        if len(blob) < LAC_METADATA_LENGTH:
            raise ValueError(
                f"ledger {self.ledger_id}: explicit LAC blob of {len(blob)} bytes is shorter "
                f"than the {LAC_METADATA_LENGTH}-byte ledgerId + lac"
            )
        _check_header_fits(self._master_key, blob)
        self._explicit_lac = bytes(blob)
        # A version 0 header has no room for the blob; upgrading is what upstream's writer
        # does for new files, and upstream readers accept version 1.
        self._version = max(self._version, 1)
        self._header_dirty = True

    @property
    def header(self) -> IndexHeader:
        return IndexHeader(self._master_key, self._state_bits, self._explicit_lac, self._version)

    # -- locations -------------------------------------------------------------------------

    def set_location(self, entry_id: int, location: int) -> None:
        """Remember where ``entry_id`` lives; in memory only until :meth:`flush`."""
        if entry_id < 0 or not 0 < location <= MAX_LOCATION:
            raise ValueError(
                f"ledger {self.ledger_id}: entry {entry_id} location {location}: entry ids "
                f"are >= 0 and locations in 1..2**63-1 (0 means no entry)"
            )
        self._dirty[entry_id] = location
        if entry_id > self._dirty_max:
            self._dirty_max = entry_id

    def get_location(self, entry_id: int) -> int:
        """The location of ``entry_id``, or 0 if the index has none."""
        location = self._dirty.get(entry_id)
        if location is not None:
            return location
        if self._pending:
            location = self._pending.get(entry_id)
            if location is not None:
                return location
        if entry_id < 0:
            raise ValueError(f"ledger {self.ledger_id}: entry id {entry_id} is negative")
        if entry_id >= self._disk_slots:
            return 0
        data = _pread_full(self._io_fd(), _SLOT, HEADER_SIZE + _SLOT * entry_id)
        if len(data) < _SLOT:  # the file shrank under us; nothing there
            return 0
        value: int = _LOCATION.unpack(data)[0]
        return value

    def last_entry_id(self) -> int:
        """The highest entry id with a non-zero location, or -1."""
        if self._last_on_disk is None:
            self._last_on_disk = self._scan_last_on_disk()
        return max(self._last_on_disk, self._dirty_max, self._pending_max)

    def _scan_last_on_disk(self) -> int:
        # Read backwards a page at a time; rstrip finds the last non-zero byte in C.
        end = self._disk_slots
        while end > 0:
            start = (end - 1) // _PAGE_SLOTS * _PAGE_SLOTS
            data = _pread_full(self._io_fd(), _SLOT * (end - start), HEADER_SIZE + _SLOT * start)
            used = len(data[: len(data) // _SLOT * _SLOT].rstrip(b"\0"))
            if used:
                return start + (used - 1) // _SLOT
            end = start
        return -1

    def entries(self) -> Iterator[tuple[int, int]]:
        """``(entry_id, location)`` for every entry with a location, in entry id order.

        Dirty and detached locations are merged in as of the call; the file is read a page
        at a time.
        """
        unwritten = {**self._pending, **self._dirty} if self._pending else self._dirty
        dirty = sorted(unwritten.items())
        di = 0
        nd = len(dirty)
        slots = self._disk_slots
        for page_start in range(0, slots, _PAGE_SLOTS):
            count = min(_PAGE_SLOTS, slots - page_start)
            data = _pread_full(self._io_fd(), _SLOT * count, HEADER_SIZE + _SLOT * page_start)
            if data.count(0) == len(data):
                # Nothing on disk in this page; its dirty entries, if any, come out in order
                # with the next page or at the end.
                continue
            values = struct.unpack_from(f">{len(data) // _SLOT}q", data)
            for i, location in enumerate(values):
                entry_id = page_start + i
                while di < nd and dirty[di][0] < entry_id:
                    yield dirty[di]
                    di += 1
                if di < nd and dirty[di][0] == entry_id:
                    yield dirty[di]
                    di += 1
                elif location:
                    yield entry_id, location
        yield from dirty[di:]

    # -- persistence -----------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """True if there are changes :meth:`flush` has not written (detached ones too)."""
        return self._header_dirty or bool(self._dirty) or bool(self._pending)

    @property
    def needs_sync(self) -> bool:
        """True if :meth:`fsync` has work: written data or new directory entries."""
        return self._unsynced or bool(self._new_dirs)

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def flush(self) -> None:
        """Write the dirty header and locations (to the kernel; :meth:`fsync` for the disk).

        On an error the unwritten state is kept, so a later flush writes it again.
        """
        self.detach()
        self.write_detached()

    def detach(self) -> None:
        """Set the dirty locations aside for :meth:`write_detached`; changes made after this
        stay dirty for the next time. Reads see both. (A checkpoint detaches when it hands
        the logs' buffers to the OS and writes once they are durable.)"""
        if not self._dirty:
            return
        if self._pending:
            self._pending.update(self._dirty)  # a failed write's leftovers; newer wins
        else:
            self._pending = self._dirty
        self._pending_max = max(self._pending_max, self._dirty_max)
        self._dirty = {}
        self._dirty_max = -1

    def write_detached(self) -> None:
        """Write the dirty header and the detached locations to the kernel."""
        for _ in self.write_detached_steps():
            pass

    def write_detached_steps(self, step: int = WRITE_STEP_LOCATIONS) -> Iterator[int]:
        """:meth:`write_detached` in steps of at most ``step`` locations, yielding after each
        how many it wrote, so that the owner may serve others between steps. Nothing but the
        file changes until the last step: a step that raises (or a caller that stops early)
        leaves every detached location for the next checkpoint, and reads keep finding them.
        """
        if not (self._header_dirty or self._pending):
            return
        if self._header_dirty:
            # The header points into no log, so its newest state may go with any write.
            _pwrite_full(self._io_fd(), encode_header(self.header), 0)
            self._header_dirty = False
            self._unsynced = True
            self._file_size = max(self._file_size, HEADER_SIZE)
        if self._pending:
            pending = self._pending
            keys = list(pending)
            ids = sorted(keys)
            # Adds arrive in entry order, so the dict's own order is usually the sorted one
            # and its values are the locations in order: no lookup per id (about half of
            # this method's time in a checkpoint).
            if ids == keys:
                locations = list(pending.values())
            else:
                locations = list(map(pending.__getitem__, ids))
            for first in range(0, len(ids), step):
                part = ids[first : first + step]
                # Asked again each step: between steps the tracker may have closed ours.
                self._write_locations(self._io_fd(), part, locations[first : first + step])
                self._unsynced = True
                yield len(part)
            last = ids[-1]
            self._file_size = max(self._file_size, HEADER_SIZE + _SLOT * (last + 1))
            self._pad_last_page()  # before the state moves on: a failure leaves it pending
            self._disk_slots = max(self._disk_slots, last + 1)
            if self._last_on_disk is not None:
                self._last_on_disk = max(self._last_on_disk, last)
            self._pending = {}
            self._pending_max = -1
        else:
            self._pad_last_page()  # a header-only write pads a file of the previous version

    def _pad_last_page(self) -> None:
        """Extend the file to a whole last page, as upstream writes and expects it.

        One ftruncate when a write first reaches into a new page (every 1024 entries of an
        appending ledger), none otherwise: the size is tracked, not asked for. The extension
        reads as zeros, which is "no entry"."""
        data = self._file_size - HEADER_SIZE
        if data <= 0 or data % PAGE_SIZE == 0:
            return
        size = HEADER_SIZE + -(-data // PAGE_SIZE) * PAGE_SIZE
        os.ftruncate(self._io_fd(), size)
        self._file_size = size
        self._disk_slots = max(self._disk_slots, (size - HEADER_SIZE) // _SLOT)
        self._unsynced = True

    @staticmethod
    def _write_locations(fd: int, ids: list[int], locations: list[int]) -> None:
        """``locations[i]`` at slot ``ids[i]`` for sorted ``ids``, one pwrite per run of
        consecutive ids: appends are sequential, so a checkpoint usually writes each
        ledger's new entries with one call (and finds that out with one comparison)."""
        packed = array("q", locations)
        if _LITTLE_ENDIAN:
            packed.byteswap()
        raw = memoryview(packed).cast("B")
        if ids[-1] - ids[0] + 1 == len(ids):
            starts = [0, len(ids)]
        else:
            breaks = [i for i in range(1, len(ids)) if ids[i] != ids[i - 1] + 1]
            starts = [0, *breaks, len(ids)]
        for a, b in itertools.pairwise(starts):
            _pwrite_full(fd, raw[_SLOT * a : _SLOT * b], HEADER_SIZE + _SLOT * ids[a])

    def fsync(self) -> None:
        """Make everything flushed so far durable, including new directory entries."""
        self._sync_data()
        for directory in self._take_new_dirs():
            fsync_directory(directory)

    def _sync_data(self) -> None:
        if self._unsynced:
            os.fdatasync(self._io_fd())
            self._unsynced = False

    def _take_new_dirs(self) -> list[Path]:
        dirs, self._new_dirs = self._new_dirs, []
        return dirs

    def close(self) -> None:
        """Flush and close the descriptor (no fsync). The object stays usable."""
        try:
            self.flush()
        finally:
            self._close_fd()

    def release(self) -> None:
        """Close the descriptor without writing; dirty state stays for the next flush."""
        self._close_fd()

    def delete(self) -> None:
        """Close without flushing and remove the file. The object must not be used again."""
        self._close_fd()
        self._dirty = {}
        self._pending = {}
        self._header_dirty = False
        self._unsynced = False
        self._new_dirs = []
        if self._on_disk:
            self.path.unlink(missing_ok=True)
            self._on_disk = False

    # -- descriptor ------------------------------------------------------------------------

    def _io_fd(self) -> int:
        fd = self._fd
        if fd is not None:
            if self._tracker is not None:
                self._tracker.used(self)
            return fd
        if self._tracker is not None:
            self._tracker.opening(self)
        try:
            if self._on_disk:
                fd = os.open(self.path, self._open_flags | os.O_CLOEXEC)
            else:
                self._new_dirs.extend(self._make_parents())
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                self._on_disk = True
                self._new_dirs.append(self.path.parent)
        except BaseException:
            if self._tracker is not None:
                self._tracker.closed(self)
            raise
        self._fd = fd
        return fd

    def _make_parents(self) -> list[Path]:
        """Create missing parent directories; return the directories that gained entries."""
        missing: list[Path] = []
        directory = self.path.parent
        while not directory.exists():
            missing.append(directory)
            directory = directory.parent
        for d in reversed(missing):
            d.mkdir(exist_ok=True)
        return [d.parent for d in reversed(missing)]

    def _close_fd(self) -> None:
        fd = self._fd
        if fd is None:
            return
        self._fd = None
        try:
            os.close(fd)
        finally:
            if self._tracker is not None:
                self._tracker.closed(self)

    def _check(self) -> None:
        """Assert this file's invariants. Cost: O(dirty entries)."""
        assert self._dirty_max == max(self._dirty, default=-1)
        assert self._pending_max == max(self._pending, default=-1)
        for unwritten in (self._dirty, self._pending):
            assert all(e >= 0 and 0 < loc <= MAX_LOCATION for e, loc in unwritten.items())
        assert len(encode_header(self.header)) == HEADER_SIZE
        assert self._on_disk or (self._fd is None and self._disk_slots == 0)
        assert self._on_disk or self._header_dirty or not (self.dirty or self._unsynced)
        if self._last_on_disk is not None:
            assert self._last_on_disk < self._disk_slots

    def __repr__(self) -> str:
        state = "open" if self._fd is not None else "closed"
        return f"<IndexFile ledger {self.ledger_id} {self.path} {state}>"


# -- all ledgers ----------------------------------------------------------------------------


class LedgerIndex:
    """The bookie's ledger → index file map, with a cap on open descriptors.

    A new ledger goes to ``index_dirs[ledger_id % len(index_dirs)]``; existing ones are found
    in any directory by the scan at construction (if a ledger has files in several
    directories, the first directory wins, as upstream's lookup does).
    """

    def __init__(
        self,
        index_dirs: Iterable[str | os.PathLike[str]],
        max_open_files: int = DEFAULT_MAX_OPEN_FILES,
    ) -> None:
        self._dirs: Final = [Path(d) for d in index_dirs]
        if not self._dirs:
            raise ValueError("LedgerIndex needs at least one index directory")
        if max_open_files < 1:
            raise ValueError(f"max_open_files must be at least 1, got {max_open_files}")
        self.max_open_files: Final = max_open_files
        self._paths: dict[int, Path] = {}  # every ledger with an index, on disk or not yet
        self._files: dict[int, IndexFile] = {}  # loaded ledgers
        self._open: OrderedDict[int, IndexFile] = OrderedDict()  # open descriptors, LRU first
        self._touched: set[int] = set()
        """Ledgers changed since the last :meth:`detach_dirty`: only they can have anything
        to write or sync, so a checkpoint's cost follows what changed, not how many ledgers
        the bookie holds (an idle bookie with thousands of ledgers checkpoints every
        second)."""
        self._detached: set[int] = set()
        """Ledgers whose detached locations a checkpoint in flight has still to write."""
        # Deletions: how many so far, the most recent ids, and an epoch no other index
        # shares, so that a cursor of this index never matches another's count.
        self._epoch = next(_INDEX_EPOCHS)
        self._deletions = 0
        self._recent_deletions: deque[int] = deque(maxlen=_DELETION_HISTORY)
        self._scan()

    @property
    def directories(self) -> list[Path]:
        """The index directories, as configured."""
        return list(self._dirs)

    def _scan(self) -> None:
        for index_dir in self._dirs:
            current = index_dir / "current"
            if not current.is_dir():
                continue
            for level2 in _subdirs(_subdirs(current)):
                with os.scandir(level2) as files:
                    for entry in files:
                        ledger_id = _ledger_id_of(entry.name)
                        if ledger_id is None or ledger_id in self._paths:
                            continue
                        path = Path(entry.path)
                        # Only files where upstream would look count; a misplaced file is
                        # invisible to upstream too.
                        if path == index_path(index_dir, ledger_id):
                            self._paths[ledger_id] = path

    # -- OpenFileTracker -------------------------------------------------------------------

    def opening(self, index_file: IndexFile) -> None:
        while len(self._open) >= self.max_open_files:
            victim = next(iter(self._open.values()))
            victim.release()  # keeps its dirty state; the callback removes it from _open
        self._open[index_file.ledger_id] = index_file

    def used(self, index_file: IndexFile) -> None:
        if index_file.ledger_id in self._open:
            self._open.move_to_end(index_file.ledger_id)

    def closed(self, index_file: IndexFile) -> None:
        if self._open.get(index_file.ledger_id) is index_file:
            del self._open[index_file.ledger_id]

    # -- ledgers ---------------------------------------------------------------------------

    def _get(self, ledger_id: int) -> IndexFile:
        index_file = self._files.get(ledger_id)
        if index_file is None:
            path = self._paths.get(ledger_id)
            if path is None:
                raise NoSuchLedgerError(ledger_id)
            index_file = IndexFile.open(path, ledger_id, tracker=self)
            self._files[ledger_id] = index_file
        return index_file

    def exists(self, ledger_id: int) -> bool:
        return ledger_id in self._paths

    def ledger_ids(self) -> list[int]:
        """All ledgers with an index, sorted."""
        return sorted(self._paths)

    def create_ledger(self, ledger_id: int, master_key: bytes) -> None:
        """Record a new ledger and its master key (written to disk by the next flush)."""
        existing = self._paths.get(ledger_id)
        if existing is not None:
            raise LedgerExistsError(ledger_id, existing)
        path = index_path(self._dirs[ledger_id % len(self._dirs)], ledger_id)
        self._files[ledger_id] = IndexFile.create(path, ledger_id, master_key, tracker=self)
        self._paths[ledger_id] = path
        self._touched.add(ledger_id)

    def deletion_cursor(self) -> tuple[int, int]:
        """Where the deletions stand now, for :meth:`deleted_since`."""
        return self._epoch, self._deletions

    def deleted_since(self, cursor: tuple[int, int]) -> list[int] | None:
        """Ledgers deleted after ``cursor`` was taken (oldest first, maybe repeated), or
        None if that is no longer known (too many since, or the cursor is another
        index's). :meth:`delete_ledger` is the only way a ledger stops existing here
        (:meth:`exists` is membership in ``_paths``, which only it shrinks), so a ledger
        that existed when the cursor was taken and does not now is in the list."""
        epoch, count = cursor
        missed = self._deletions - count
        if epoch != self._epoch or not 0 <= missed <= len(self._recent_deletions):
            return None
        recent = self._recent_deletions
        return [recent[i] for i in range(len(recent) - missed, len(recent))]

    def delete_ledger(self, ledger_id: int) -> bool:
        """Forget the ledger and remove its file; False if there was none."""
        self._deletions += 1
        self._recent_deletions.append(ledger_id)
        path = self._paths.pop(ledger_id, None)
        index_file = self._files.pop(ledger_id, None)
        if index_file is not None:
            index_file.delete()
        elif path is not None:
            path.unlink(missing_ok=True)
        return path is not None

    def get_master_key(self, ledger_id: int) -> bytes:
        return self._get(ledger_id).master_key

    def set_fenced(self, ledger_id: int) -> bool:
        """Fence the ledger; True if it was not fenced before (then journal the fence)."""
        self._touched.add(ledger_id)
        return self._get(ledger_id).set_fenced()

    def is_fenced(self, ledger_id: int) -> bool:
        return self._get(ledger_id).fenced

    def set_explicit_lac(self, ledger_id: int, blob: bytes) -> None:
        self._touched.add(ledger_id)
        self._get(ledger_id).set_explicit_lac(blob)

    def get_explicit_lac(self, ledger_id: int) -> bytes | None:
        return self._get(ledger_id).explicit_lac

    def set_location(self, ledger_id: int, entry_id: int, location: int) -> None:
        """Hot path: a dict look-up and a dict assignment for a loaded ledger."""
        index_file = self._files.get(ledger_id)
        if index_file is None:
            index_file = self._get(ledger_id)
        self._touched.add(ledger_id)
        index_file.set_location(entry_id, location)

    def get_location(self, ledger_id: int, entry_id: int) -> int:
        """The entry's location, or 0 if the ledger has no such entry."""
        return self._get(ledger_id).get_location(entry_id)

    def last_entry_id(self, ledger_id: int) -> int:
        """Highest entry id with a location, or -1 if none."""
        return self._get(ledger_id).last_entry_id()

    def entries(self, ledger_id: int) -> Iterator[tuple[int, int]]:
        return self._get(ledger_id).entries()

    # -- persistence -----------------------------------------------------------------------

    @property
    def open_file_count(self) -> int:
        return len(self._open)

    def flush(self) -> None:
        """Write every ledger's dirty header and locations."""
        dirty = [f for f in self._files.values() if f.dirty]
        # Open ones first, so that flushing a closed one cannot evict a dirty open one
        # before its turn (it would be flushed by the eviction anyway, just out of order).
        dirty.sort(key=lambda f: not f.is_open)
        for index_file in dirty:
            index_file.flush()

    def fsync(self) -> None:
        """Make every flushed change durable: files first, then each new directory once."""
        pending = [f for f in self._files.values() if f.needs_sync]
        pending.sort(key=lambda f: not f.is_open)
        directories: dict[Path, None] = {}
        for index_file in pending:
            index_file._sync_data()
            directories.update(dict.fromkeys(index_file._take_new_dirs()))
        for directory in directories:
            fsync_directory(directory)

    def detach_dirty(self) -> list[IndexFile]:
        """A checkpoint's first index step: set aside every changed ledger's dirty
        locations (:meth:`IndexFile.detach`), to be written by :meth:`write_detached` once
        the log bytes they point at are durable. Changes made after this call belong to the
        next checkpoint."""
        touched = [f for lid in sorted(self._touched) if (f := self._files.get(lid)) is not None]
        for index_file in touched:
            index_file.detach()
        self._detached.update(self._touched)
        self._touched.clear()
        return touched

    def write_detached(self, files: list[IndexFile]) -> list[Path]:
        """Write what :meth:`detach_dirty` set aside, and hand over what needs an fsync,
        for a worker thread.

        Returns the index files written since their last sync, then each directory that
        gained an entry (a new file or subdirectory) once. Their sync flags are cleared: the
        caller now owns making them durable with descriptors of its own (fsync acts on the
        inode, so any descriptor will do; a path may be gone if the ledger is deleted
        meanwhile) and must treat a failed sync as a failed checkpoint, as upstream does.
        A write that raises leaves every ledger of ``files`` for the next checkpoint.
        """
        steps = self.write_detached_steps(files)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                paths: list[Path] = done.value
                return paths

    def write_detached_steps(
        self, files: list[IndexFile], step: int = WRITE_STEP_LOCATIONS
    ) -> Generator[int, None, list[Path]]:
        """:meth:`write_detached` a step at a time, for an owner that serves adds between
        steps: yields the work done since the last yield (locations written, plus
        ``WRITE_STEP_FILE_COST`` per file), and returns what :meth:`write_detached` returns.

        Between steps the owner may add entries (they go to the next checkpoint), read
        (detached locations stay visible until their file is fully written) and delete
        ledgers (a deleted ledger's remaining steps are skipped, so its file is not made
        again). A step that raises, or closing the generator early, counts as a failed write.
        """
        current = [f for f in files if self._files.get(f.ledger_id) is f]  # not deleted
        current.sort(key=lambda f: not f.is_open)  # as in flush()
        try:
            for index_file in current:
                yield WRITE_STEP_FILE_COST
                # After every yield: a ledger deleted meanwhile must not get its file back.
                if self._files.get(index_file.ledger_id) is not index_file:
                    continue
                for written in index_file.write_detached_steps(step):
                    yield written
                    if self._files.get(index_file.ledger_id) is not index_file:
                        break
        except BaseException:
            self._touched.update(f.ledger_id for f in current)
            raise
        finally:
            self._detached.difference_update(f.ledger_id for f in files)
        current = [f for f in current if self._files.get(f.ledger_id) is f]
        paths: list[Path] = []
        directories: dict[Path, None] = {}
        for index_file in current:
            if index_file._unsynced:
                paths.append(index_file.path)
                index_file._unsynced = False
            directories.update(dict.fromkeys(index_file._take_new_dirs()))
        return [*paths, *directories]

    def close(self) -> None:
        """Flush, fsync and close every descriptor (a clean shutdown)."""
        self.flush()
        self.fsync()
        for index_file in list(self._open.values()):
            index_file.close()

    def release(self) -> None:
        """Close every descriptor without writing anything: unwritten changes are dropped.
        For an owner that cannot vouch for what they point at (see the module docstring)."""
        for index_file in list(self._open.values()):
            index_file.release()

    def _check(self) -> None:
        """Assert the invariants. Cost: O(loaded ledgers + their dirty entries)."""
        assert len(self._open) <= self.max_open_files
        open_files = {lid for lid, f in self._files.items() if f.is_open}
        assert open_files == set(self._open), (open_files, set(self._open))
        for ledger_id, index_file in self._open.items():
            assert self._files[ledger_id] is index_file
        for ledger_id, index_file in self._files.items():
            assert index_file.ledger_id == ledger_id
            assert self._paths[ledger_id] == index_file.path
            if index_file.dirty or index_file.needs_sync:
                assert ledger_id in self._touched or ledger_id in self._detached, (
                    f"ledger {ledger_id} changed, not touched"
                )
            index_file._check()
        for ledger_id, path in self._paths.items():
            assert any(path == index_path(d, ledger_id) for d in self._dirs)


def pad_index_files(index_dirs: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Pad every index file under ``index_dirs`` that ends inside a page; return them.

    For directories of the previous bookiesim, whose files ended at their last location:
    an upstream bookie or shell reads those pages whole and fails on them. Extending only
    adds zeros (no entry), so a crash halfway leaves every file readable, and running it
    again finishes the job. Files that are not ledger indexes where upstream looks are left
    alone."""
    padded: list[Path] = []
    for index_dir in index_dirs:
        current = Path(index_dir) / "current"
        if not current.is_dir():
            continue
        for level2 in _subdirs(_subdirs(current)):
            with os.scandir(level2) as files:
                found = [(e.name, e.path) for e in files if e.is_file(follow_symlinks=False)]
            for name, path in sorted(found):
                ledger_id = _ledger_id_of(name)
                if ledger_id is None or Path(path) != index_path(index_dir, ledger_id):
                    continue
                data = os.stat(path).st_size - HEADER_SIZE
                if data > 0 and data % PAGE_SIZE:
                    os.truncate(path, HEADER_SIZE + -(-data // PAGE_SIZE) * PAGE_SIZE)
                    padded.append(Path(path))
    return padded


def _subdirs(parents: Path | Iterable[Path]) -> Iterator[Path]:
    for parent in [parents] if isinstance(parents, Path) else parents:
        with os.scandir(parent) as children:
            subdirs = [Path(c.path) for c in children if c.is_dir()]
        yield from sorted(subdirs)


def _ledger_id_of(name: str) -> int | None:
    """The ledger id of an index file name ``<hex>.idx`` (lower-case, as upstream writes)."""
    if not name.endswith(".idx"):
        return None
    stem = name[:-4]
    if not stem or len(stem) > 16 or stem != stem.lower():
        return None
    try:
        ledger_id = int(stem, 16)
    except ValueError:
        return None
    if f"{ledger_id:x}" != stem or not 0 <= ledger_id <= MAX_LOCATION:
        return None  # leading zeros, signs, underscores: not a name upstream writes
    return ledger_id
