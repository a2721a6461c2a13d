"""The ledger index: every ledger's :class:`~bookiesim.bookie.index_file.IndexFile`, in
upstream's ``BKLE`` files (:mod:`~bookiesim.bookie.index_format`, reference §2.8).

Theory of operation. The bookie calls :meth:`LedgerIndex.set_location` on its add path, once
per entry, so that call is a dict assignment and nothing else (the sorted storage's flush
calls :meth:`LedgerIndex.set_locations` once per run of a ledger's entries: one dict update).
Locations and header changes stay in memory ("dirty") until :meth:`LedgerIndex.flush`,
which writes each ledger's dirty locations as one ``pwrite`` per run of consecutive entry
ids; :meth:`LedgerIndex.fsync` then makes them durable. (The journal covers what is not
flushed yet: the checkpoint flushes and fsyncs the index before the journal mark moves.)

A bookie may hold far more ledgers than it may hold open files, so the index keeps at most
``max_open_files`` descriptors open, closing the least recently used one to open another
(upstream's ``openFileLimit``; a bookie process lowers it to fit the open-file limit, see
:mod:`bookiesim.bookie.descriptors`). A file only needs a descriptor to read an entry
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
import logging
import os
from collections import OrderedDict, deque
from pathlib import Path
from typing import TYPE_CHECKING, Final

from bookiesim.bookie.index_file import (
    WRITE_STEP_FILE_COST,
    WRITE_STEP_LOCATIONS,
    IndexFile,
    subdirs,
)
from bookiesim.bookie.index_format import (
    HEADER_SIZE,
    LedgerExistsError,
    NoSuchLedgerError,
    index_path,
    parse_index_file_name,
)
from bookiesim.entrylog.writeback import fsync_directory

if TYPE_CHECKING:
    from collections.abc import Generator, Iterable, Iterator, Sequence

__all__ = ["DEFAULT_MAX_OPEN_FILES", "LedgerIndex"]

log = logging.getLogger(__name__)

DEFAULT_MAX_OPEN_FILES: Final = 20000
"""Upstream's ``openFileLimit`` default (the configuration's too)."""
_DELETION_HISTORY: Final = 65536
"""Ledger deletions remembered for :meth:`LedgerIndex.deleted_since`; beyond that its
caller falls back to checking every ledger."""
_INDEX_EPOCHS = itertools.count(1)
"""Gives every :class:`LedgerIndex` an epoch of its own, so that a deletion cursor taken
on one index never matches another's count."""


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
            for level2 in subdirs(subdirs(current)):
                with os.scandir(level2) as files:
                    for entry in files:
                        ledger_id = parse_index_file_name(entry.name)
                        if ledger_id is None or ledger_id in self._paths:
                            continue
                        path = Path(entry.path)
                        # Only files where upstream would look count; a misplaced file is
                        # invisible to upstream too.
                        if path != index_path(index_dir, ledger_id):
                            continue
                        if _never_written(path, entry.stat().st_size):
                            _drop_headerless(path)
                            continue
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
        # Its changes go with it: left in the dirty sets, a deleted ledger would make every
        # later checkpoint look as if it had index work (and stay there for ever).
        self._touched.discard(ledger_id)
        self._detached.discard(ledger_id)
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

    def set_locations(
        self, ledger_id: int, entry_ids: Sequence[int], locations: Sequence[int]
    ) -> None:
        """:meth:`set_location` of each pair in turn, in one call (a flush of the sorted
        storage indexes a ledger's run at once)."""
        index_file = self._files.get(ledger_id)
        if index_file is None:
            index_file = self._get(ledger_id)
        self._touched.add(ledger_id)
        index_file.set_locations(entry_ids, locations)

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

    @property
    def has_changes(self) -> bool:
        """Whether a location changed since the last checkpoint set the changes aside, or a
        checkpoint is still writing them: False lets an idle bookie's checkpoint skip the
        index."""
        return bool(self._touched or self._detached)

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
        unknown = (self._touched | self._detached) - self._paths.keys()
        assert not unknown, f"changes kept for ledgers that are gone: {sorted(unknown)}"
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


def _never_written(path: Path, size: int) -> bool:
    """The file holds no byte that was ever written: empty, or zeros up to its header's
    size (what a power loss before the file's first fsync leaves). Only such files are
    read here; anything else is the index's to judge when the ledger is first used."""
    if size == 0:
        return True
    if size > HEADER_SIZE:
        return False
    with open(path, "rb") as f:
        return not any(f.read(HEADER_SIZE))


def _drop_headerless(path: Path) -> None:
    """An index file none of whose bytes reached the disk. Every flush writes the whole
    header first, so only a power loss before the file's first fsync leaves one (found by
    the lazy file system, docs/chaos.md). Nothing in it was durable, hence the checkpoint
    that created it never moved lastMark past the ledger's master-key record: the journal
    replay recreates the ledger from that record and its entries. Upstream rewrites such a
    header from the replayed key; we remove the file so the replay creates it anew."""
    log.warning(
        "index file %s holds nothing that reached the disk (a power loss before its first "
        "fsync): removed; the journal replay recreates the ledger",
        path,
    )
    path.unlink()
