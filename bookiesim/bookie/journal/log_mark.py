"""Journal positions (``LogMark``) and the ``lastMark`` checkpoint file.

Why this module exists: a checkpoint makes everything journaled before a position durable
in ledger storage, and the bookie records that position so that a restart replays only the
journal after it and old journal files can be deleted. Upstream keeps it as ``lastMark``:
16 bytes (long journal file id, long offset, big-endian) in ``current/`` of every ledger
directory, and reads back the largest one (fact sheet §6.4).

Two properties matter more than the bytes:

* **Monotonic** (upstream #4105). Journal files older than a persisted mark get deleted.
  If a late, older checkpoint then overwrote the mark, the next restart would look for a
  journal that no longer exists and refuse to start ("Recovery log ... is missing"). So a
  write never replaces a newer mark already in a directory.
* **Atomic.** Upstream rewrites the file in place, so a crash mid-write can leave it short.
  We write a temporary file, fsync it, rename it over ``lastMark`` and fsync the directory:
  a reader sees the old mark or the new one, never a torn one.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from bookiesim.entrylog.writeback import fsync_directory

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "LAST_MARK_FILE",
    "LAST_MARK_SIZE",
    "LastMarkFormatError",
    "LogMark",
    "has_last_mark",
    "last_mark_name",
    "mark_index",
    "read_last_mark",
    "write_last_mark",
]

LAST_MARK_FILE: Final = "lastMark"
LAST_MARK_SIZE: Final = 16
_MARK: Final = struct.Struct(">qq")


@dataclass(frozen=True, order=True, slots=True)
class LogMark:
    """A position in the journal: file id, then byte offset in that file (ordered so)."""

    file_id: int
    offset: int

    def encode(self) -> bytes:
        """The 16 bytes of a ``lastMark`` file."""
        return _MARK.pack(self.file_id, self.offset)

    @classmethod
    def decode(cls, data: bytes) -> LogMark:
        """Parse the 16 bytes of a ``lastMark`` file."""
        if len(data) != LAST_MARK_SIZE:
            raise ValueError(f"a log mark is {LAST_MARK_SIZE} bytes, got {len(data)}")
        file_id, offset = _MARK.unpack(data)
        return cls(file_id, offset)


class LastMarkFormatError(ValueError):
    """A ``lastMark`` file that is not 16 bytes: replaying from a guess could lose data."""

    def __init__(self, path: str, size: int) -> None:
        self.path = path
        super().__init__(
            f"{path}: lastMark must be {LAST_MARK_SIZE} bytes (long fileId, long offset), "
            f"found {size}; remove it only if you know the journal to replay from"
        )


def last_mark_name(journal_index: int | None = None) -> str:
    """``lastMark``, or ``lastMark.<i>`` for journal directory ``i`` when there are several."""
    return LAST_MARK_FILE if journal_index is None else f"{LAST_MARK_FILE}.{journal_index}"


def mark_index(journal: int, journals: int) -> int | None:
    """The ``journal_index`` of journal ``journal``'s mark among ``journals``: None
    (``lastMark``) when there is one journal, as upstream names it, else ``journal``."""
    return None if journals == 1 else journal


def _mark_path(ledger_dir: str | os.PathLike[str], journal_index: int | None) -> str:
    return os.path.join(os.fspath(ledger_dir), "current", last_mark_name(journal_index))


def has_last_mark(
    ledger_dirs: Iterable[str | os.PathLike[str]], journal_index: int | None = None
) -> bool:
    """Whether any ledger dir holds that journal's mark file (whatever it holds)."""
    return any(os.path.exists(_mark_path(d, journal_index)) for d in ledger_dirs)


def _read_one(path: str) -> LogMark | None:
    try:
        with open(path, "rb") as f:
            data = f.read(LAST_MARK_SIZE + 1)
    except FileNotFoundError:
        return None
    if len(data) != LAST_MARK_SIZE:
        raise LastMarkFormatError(path, os.path.getsize(path))
    return LogMark.decode(data)


def read_last_mark(
    ledger_dirs: Iterable[str | os.PathLike[str]], journal_index: int | None = None
) -> LogMark:
    """The newest mark over all ledger dirs; ``LogMark(0, 0)`` if none has one.

    Raises ``LastMarkFormatError`` (naming the file) if any of them is malformed: taking the
    max of the others could replay from a position past what the bad file protected.
    """
    best = LogMark(0, 0)
    for d in ledger_dirs:
        mark = _read_one(_mark_path(d, journal_index))
        if mark is not None and mark > best:
            best = mark
    return best


def write_last_mark(
    ledger_dirs: Iterable[str | os.PathLike[str]],
    mark: LogMark,
    journal_index: int | None = None,
) -> list[str]:
    """Persist ``mark`` in ``<dir>/current/`` of every ledger dir; return the files written.

    A directory that already holds a newer mark keeps it (monotonic). A malformed file is
    replaced: ``mark`` is a true statement about what is persisted, and a malformed file
    would stop the bookie from starting anyway. ``current/`` is created if missing.
    """
    data = mark.encode()
    written: list[str] = []
    for d in ledger_dirs:
        current = os.path.join(os.fspath(d), "current")
        path = os.path.join(current, last_mark_name(journal_index))
        try:
            old = _read_one(path)
        except LastMarkFormatError:
            old = None
        if old is not None and old >= mark:
            continue  # never move a mark backwards; equal needs no write either
        if not os.path.isdir(current):
            os.makedirs(current, exist_ok=True)
            fsync_directory(os.path.dirname(current) or ".")
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)  # 16 bytes to a regular file: one complete write
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_directory(current)
        written.append(path)
    return written
