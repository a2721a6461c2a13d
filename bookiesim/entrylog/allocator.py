"""Entry log ids: recovery at startup and allocation (upstream ``EntryLoggerAllocator``).

Every ledger dir ``D`` keeps its logs in ``D/current/`` together with a ``lastId`` file (the
last allocated id, lower-case hex and a newline). Ids are Java ints: after ``2**31 - 1`` the
next id is 0, and an id whose ``<hex>.log`` exists in any ledger dir is skipped, so wrapping
around never overwrites a live log.

Startup, per dir: ``lastId`` if it parses to a value > 0, else the largest ``*.log`` id; then
the directory listing's opinion (``*.log`` and ``*.log.<hex>.compacted`` ids, read through the
largest-gap rule so that ids which wrapped around to small numbers still count as newest);
the larger of the two wins. The bookie resumes after the largest value over all dirs. This
survives a deleted or stale ``lastId`` (upstream tests ``testMissingLogId`` and
``testLastIdCompatibleBetweenDefaultAndDirectEntryLogger``).

File creation is the writer's job; a log manager that preallocates simply asks for the next
id early and creates that writer ahead of time.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bookiesim.entrylog.format import MAX_LOG_ID, log_file_name, parse_log_file_name

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "CURRENT_DIR",
    "LAST_ID_FILE",
    "EntryLogIdAllocator",
    "find_largest_gap",
    "last_log_id_from_file",
    "last_log_id_in_dir",
    "list_log_ids",
    "read_last_id",
    "recover_last_log_id",
]

CURRENT_DIR = "current"
LAST_ID_FILE = "lastId"

_COMPACTED_FILE = re.compile(r"([0-9a-fA-F]+)\.log\.([0-9a-fA-F]+)\.compacted")
_JAVA_HEX_LONG = re.compile(r"[+-]?[0-9a-fA-F]+")


def find_largest_gap(ids: Iterable[int]) -> tuple[int, int]:
    """The widest run of unused ids in ``0..MAX_LOG_ID``: ``(first free id, next used id)``.

    The run before the smallest id counts as starting at 0; the one after the largest ends
    at ``MAX_LOG_ID``. With no ids at all: ``(0, MAX_LOG_ID)``. Ties go to the lowest run
    (upstream ``LedgerDirUtil.findLargestGap``). When ids wrapped around, the gap sits between
    the old high ids and the new low ones, so ``first free id - 1`` is the newest id.
    """
    used = sorted(ids)
    if not used:
        return 0, MAX_LOG_ID
    best_start, best_end = 0, used[0]
    best = best_end - best_start
    for i, log_id in enumerate(used):
        start = log_id + 1
        end = used[i + 1] if i + 1 < len(used) else MAX_LOG_ID
        if end - start > best:
            best, best_start, best_end = end - start, start, end
    return best_start, best_end


def read_last_id(current_dir: str | os.PathLike[str]) -> int:
    """The id in ``<current_dir>/lastId``, or -1 if it is missing or does not parse.

    Parsed as Java's ``Long.parseLong(firstLine, 16)``: an optional sign and hex digits, no
    surrounding blanks.
    """
    try:
        with open(Path(current_dir) / LAST_ID_FILE, "rb") as f:
            line = f.readline()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return -1
    text = line.rstrip(b"\n").rstrip(b"\r").decode("ascii", errors="replace")
    if _JAVA_HEX_LONG.fullmatch(text) is None:
        return -1
    value = int(text, 16)
    return value if -(2**63) <= value < 2**63 else -1


_LISTINGS: dict[str, tuple[int | None, list[str], list[int]]] = {}
"""Directory → (its mtime when listed, the names in it then, their log ids). GC lists the
ledger dirs on every pass; with thousands of logs that listing, unchanged, was most of an
idle bookie's work. While the mtime is racy the directory is listed again, but the same
names (compared as a list: cheap) are not parsed again."""
_RACY_NS = 1_000_000_000
"""A directory changed this recently may change again within its file system's timestamp
granularity without a new mtime (git's "racy" entries): its listing is not kept."""
_RACY_FINE_NS = 50_000_000
"""The same for an mtime with a sub-second part: the file system keeps fine timestamps
(ext4, xfs, btrfs, tmpfs), which Linux takes from its coarse clock, a tick of at most 10 ms.
Only a whole-second mtime (a coarse file system, or one chance in 10**9) waits a second."""


def _racy_window(mtime_ns: int) -> int:
    return _RACY_NS if mtime_ns % 1_000_000_000 == 0 else _RACY_FINE_NS


def _log_ids(current_dir: Path) -> list[int]:
    key = os.fspath(current_dir)
    try:
        mtime = os.stat(key).st_mtime_ns
    except FileNotFoundError:
        return []
    cached = _LISTINGS.get(key)
    if cached is not None and cached[0] == mtime:
        return list(cached[2])
    try:
        names = os.listdir(current_dir)
    except FileNotFoundError:
        return []
    if cached is not None and cached[1] == names:
        ids = list(cached[2])  # the same names: the ids are a function of them
    else:
        ids = []
        for name in names:
            log_id = parse_log_file_name(name)
            if log_id is not None:
                ids.append(log_id)
    if time.time_ns() - mtime > _racy_window(mtime):
        _LISTINGS[key] = (mtime, names, list(ids))
    elif cached is None or cached[1] != names:
        # Not to be trusted by its mtime (None never matches one), only by its names.
        _LISTINGS[key] = (None, names, list(ids))
    return ids


def _compacted_log_ids(current_dir: Path) -> list[int]:
    ids = []
    try:
        names = os.listdir(current_dir)
    except FileNotFoundError:
        return []
    for name in names:
        m = _COMPACTED_FILE.fullmatch(name)
        if m is not None:
            log_id = int(m.group(1), 16)
            if log_id <= MAX_LOG_ID:
                ids.append(log_id)
    return ids


def last_log_id_from_file(current_dir: str | os.PathLike[str]) -> int:
    """``lastId`` if it is > 0, else the largest ``*.log`` id, else -1."""
    last = read_last_id(current_dir)
    if last > 0:
        return last
    ids = _log_ids(Path(current_dir))
    return max(ids) if ids else -1


def last_log_id_in_dir(current_dir: str | os.PathLike[str]) -> int:
    """The newest id by the directory listing and the largest-gap rule; -1 if none."""
    d = Path(current_dir)
    ids = _log_ids(d) + _compacted_log_ids(d)
    if not ids:
        return -1
    return find_largest_gap(ids)[0] - 1


def recover_last_log_id(current_dirs: Iterable[str | os.PathLike[str]]) -> int:
    """The id to resume after: per dir the larger of both opinions, then the max; -1 if none."""
    last = -1
    for d in current_dirs:
        last = max(last, last_log_id_from_file(d), last_log_id_in_dir(d))
    return last


def list_log_ids(current_dirs: Iterable[str | os.PathLike[str]]) -> set[int]:
    """Ids of the ``*.log`` files in all dirs (upstream ``getEntryLogsSet``)."""
    ids: set[int] = set()
    for d in current_dirs:
        ids.update(_log_ids(Path(d)))
    return ids


class EntryLogIdAllocator:
    """Hands out entry log ids for a set of ledger dirs.

    Not thread-safe: :class:`~bookiesim.entrylog.log_files.LogFiles` calls it under its io
    lock, from the owner thread and from the preallocation worker.
    """

    __slots__ = (
        "_current_dirs",
        "_dir_prefixes",
        "_last",
        "_last_id_in_place",
        "_last_id_sizes",
        "_recovered",
    )

    def __init__(
        self,
        ledger_dirs: Iterable[str | os.PathLike[str]],
        *,
        last_id_in_place: bool = False,
    ) -> None:
        """Recover the last id from ``<D>/current`` of every ledger dir ``D`` (created if
        missing).

        ``last_id_in_place=True`` rewrites ``lastId`` in place (as upstream does) instead of
        writing a temporary file and renaming it over the old one. Why it exists: on ext4
        (``auto_da_alloc``) a rename over an existing file forces the new file's data out,
        measured at ~180 us per dir here against ~7 us in place, and the per-ledger log
        managers allocate an id for every new log. A torn in-place write is tolerated at
        startup because the directory listing is consulted too.
        """
        dirs = tuple(Path(d) / CURRENT_DIR for d in ledger_dirs)
        if not dirs:
            raise ValueError("at least one ledger dir is needed")
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
        self._current_dirs = dirs
        # Plain strings: existence checks run for every id and pathlib costs more than stat.
        self._dir_prefixes = tuple(os.fspath(d) + os.sep for d in dirs)
        self._recovered = recover_last_log_id(dirs)
        self._last = self._recovered
        self._last_id_in_place = last_id_in_place
        # In-place mode: the size each lastId file has after our last write (None: not known,
        # look), so that a rewrite is open + pwrite + close and truncates only when it must.
        self._last_id_sizes: list[int | None] = [None] * len(dirs)

    @property
    def current_dirs(self) -> tuple[Path, ...]:
        """``<D>/current`` for every ledger dir, where logs and ``lastId`` live."""
        return self._current_dirs

    @property
    def recovered_last_id(self) -> int:
        """The last id found at startup (-1 on an empty bookie); ``leastUnflushedLogId``
        starts one above it."""
        return self._recovered

    @property
    def last_allocated_id(self) -> int:
        """The most recent id handed out, or :attr:`recovered_last_id` before the first."""
        return self._last

    def log_exists(self, log_id: int) -> bool:
        name = log_file_name(log_id)
        return any(os.path.exists(prefix + name) for prefix in self._dir_prefixes)

    def next_id(self) -> int:
        """Allocate the next id: +1, wrapping after ``MAX_LOG_ID`` to 0, skipping ids whose
        ``.log`` exists in any dir; then rewrite ``lastId`` in every dir."""
        return self.reserve(1)[0]

    def reserve(self, count: int, *, skip_existing: bool = True) -> list[int]:
        """Allocate ``count`` ids as :meth:`next_id` would, in allocation order, writing
        ``lastId`` once (with the last of them) before returning.

        ``skip_existing=False`` hands out the next ids without looking for their files: for
        a caller that creates each file exclusively (``O_EXCL``) and gives up an id whose
        file exists, which with a single ledger dir is the same check for one syscall less.

        ``lastId`` then names ids whose files do not exist yet; that only wastes them if the
        bookie stops before creating the files, and it is what keeps an id from being handed
        out twice when a crash comes between creating a file and a later ``lastId`` write.
        An id wrapped around iff it is not larger than the one allocated before it.
        """
        if count < 1:
            raise ValueError(f"cannot reserve {count} ids")
        ids: list[int] = []
        candidate = self._last
        exists = self.log_exists
        for _ in range(count):
            for _ in range(MAX_LOG_ID + 1):
                candidate = 0 if candidate >= MAX_LOG_ID else candidate + 1
                if not skip_existing or not exists(candidate):
                    break
            else:
                raise RuntimeError("every entry log id is in use")
            ids.append(candidate)
        if self._last_id_in_place:
            sizes = self._last_id_sizes
            for i, prefix in enumerate(self._dir_prefixes):
                known, sizes[i] = sizes[i], None  # unknown until the write below succeeds
                sizes[i] = _write_last_id_in_place(prefix + LAST_ID_FILE, candidate, known)
        else:
            for d in self._current_dirs:
                _write_last_id(d, candidate)
        self._last = candidate
        return ids


def _write_last_id(current_dir: Path, log_id: int) -> None:
    # Written aside and renamed so that a crash never leaves a torn lastId (upstream writes
    # in place; startup tolerates either because the directory listing is consulted too).
    tmp = current_dir / (LAST_ID_FILE + ".tmp")
    with open(tmp, "wb") as f:
        f.write(f"{log_id:x}\n".encode("ascii"))
    os.replace(tmp, current_dir / LAST_ID_FILE)


def _write_last_id_in_place(path: str, log_id: int, size: int | None) -> int:
    """Overwrite ``lastId`` at ``path`` from offset 0, cutting what is left of a longer old
    value (ids shrink only on wrap-around or after a hand edit); return the file's size.

    ``size`` is the file's size if known (it is after our own previous write), which saves
    an ``fstat``. No O_TRUNC: truncating to zero is what makes ext4 flush on close, the cost
    this variant avoids.
    """
    data = f"{log_id:x}\n".encode("ascii")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, 0)
        if size is None:
            size = os.fstat(fd).st_size
        if size > len(data):
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
    return len(data)
