"""One ledger's index file: its header fields and entry locations, in memory until flushed.

The format is :mod:`~bookiesim.bookie.index_format`; why writes wait for a checkpoint, and
why a descriptor may close at any time, is told in :mod:`~bookiesim.bookie.ledger_index`.
Also here: :func:`pad_index_files`, for directories left by the previous bookiesim.
"""

from __future__ import annotations

import itertools
import os
import struct
import sys
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from bookiesim.bookie.index_format import (
    FENCED_BIT,
    HEADER_SIZE,
    LAC_METADATA_LENGTH,
    MAX_LOCATION,
    PAGE_SIZE,
    PAGE_SLOTS,
    IndexHeader,
    check_header_fits,
    decode_header,
    encode_header,
    index_path,
    parse_index_file_name,
)
from bookiesim.entrylog.writeback import fsync_directory

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

__all__ = [
    "WRITE_STEP_FILE_COST",
    "WRITE_STEP_LOCATIONS",
    "IndexFile",
    "OpenFileTracker",
    "pad_index_files",
    "subdirs",
]

_SLOT: Final = 8

WRITE_STEP_LOCATIONS: Final = 4096
"""Locations a checkpoint writes between chances for the owner to serve adds: with 10
ledgers at 20,000 adds/s, one checkpoint writes 200,000, which in one go held the trio thread
for 70-80 ms (BENCHMARKS.md); a step of 4096 takes well under a millisecond."""
WRITE_STEP_FILE_COST: Final = 64
"""A file's fixed cost in a checkpoint (descriptor, header, pwrite), in locations: so that
thousands of ledgers with one new entry each also let the owner in between."""
_LOCATION = struct.Struct(">q")
_LITTLE_ENDIAN: Final = sys.byteorder == "little"  # locations are big-endian on disk


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
        check_header_fits(master_key, None)
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
        check_header_fits(self._master_key, blob)
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

    def set_locations(self, entry_ids: Sequence[int], locations: Sequence[int]) -> None:
        """:meth:`set_location` of each pair in turn, checked by the extremes and stored by
        one dict update: a flush of the sorted storage indexes a ledger's run at once."""
        if len(entry_ids) != len(locations):
            raise ValueError(f"{len(entry_ids)} entry ids for {len(locations)} locations")
        if not entry_ids:
            return
        if min(entry_ids) < 0 or min(locations) <= 0 or max(locations) > MAX_LOCATION:
            raise ValueError(
                f"ledger {self.ledger_id}: entries {min(entry_ids)}..{max(entry_ids)} locations "
                f"{min(locations)}..{max(locations)}: ids >= 0, locations in 1..2**63-1"
            )
        self._dirty.update(zip(entry_ids, locations, strict=True))
        self._dirty_max = max(self._dirty_max, max(entry_ids))

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
            start = (end - 1) // PAGE_SLOTS * PAGE_SLOTS
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
        for page_start in range(0, slots, PAGE_SLOTS):
            count = min(PAGE_SLOTS, slots - page_start)
            data = _pread_full(self._io_fd(), _SLOT * count, HEADER_SIZE + _SLOT * page_start)
            # Up to the page's last location only (files are padded to whole pages); dirty
            # entries past it come out in order with the next page or at the end.
            used = (len(data.rstrip(b"\0")) + _SLOT - 1) // _SLOT
            if not used:
                continue
            values = struct.unpack_from(f">{used}q", data)
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
        for level2 in subdirs(subdirs(current)):
            with os.scandir(level2) as files:
                found = [(e.name, e.path) for e in files if e.is_file(follow_symlinks=False)]
            for name, path in sorted(found):
                ledger_id = parse_index_file_name(name)
                if ledger_id is None or Path(path) != index_path(index_dir, ledger_id):
                    continue
                data = os.stat(path).st_size - HEADER_SIZE
                if data > 0 and data % PAGE_SIZE:
                    os.truncate(path, HEADER_SIZE + -(-data // PAGE_SIZE) * PAGE_SIZE)
                    padded.append(Path(path))
    return padded


def subdirs(parents: Path | Iterable[Path]) -> Iterator[Path]:
    for parent in [parents] if isinstance(parents, Path) else parents:
        with os.scandir(parent) as children:
            subdirs = [Path(c.path) for c in children if c.is_dir()]
        yield from sorted(subdirs)
