"""Reading entries by location (upstream ``DefaultEntryLogger.readEntry``).

Reads go through a *log source*: anything with a ``log_id``, a ``path``, ``size()`` and a
positional ``read_at(pos, n)``. An :class:`EntryLogReader` is a source over one open file
descriptor; an :class:`~bookiesim.entrylog.writer.EntryLogWriter` is a source that also sees
its unflushed buffer. Whoever holds readers decides how many stay open (the cap on read
handles belongs to the log managers); nothing here caches descriptors.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from bookiesim.entrylog.format import (
    HEADER_SIZE,
    MIN_SANE_ENTRY_SIZE,
    EntryLogFormatError,
    LogHeader,
    log_file_name,
    parse_log_file_name,
    split_location,
)

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import TracebackType

__all__ = [
    "EntryLogReader",
    "EntryReadError",
    "InvalidEntryLengthError",
    "LogSource",
    "ShortReadError",
    "WrongEntryError",
    "find_log_file",
    "read_entry",
    "read_entry_by_location",
    "read_header",
]

_ENTRY_HEAD = struct.Struct(">iqq")  # size, ledgerId, entryId
_FIRST_READ = 4096
"""Bytes read at ``pos - 4`` in one go: most entries need no second read."""


class LogSource(Protocol):
    """One entry log, readable at any offset."""

    @property
    def log_id(self) -> int: ...

    @property
    def path(self) -> Path: ...

    def size(self) -> int:
        """Bytes in the log (including any still in a write buffer)."""
        ...

    def read_at(self, pos: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``pos``; fewer only at the end of the log."""
        ...


class EntryReadError(EntryLogFormatError):
    """The location does not hold a readable entry. ``offset`` is the entry's ``pos``."""


class ShortReadError(EntryReadError):
    """The log ends before the entry does: a torn tail, or a location past the end."""


class InvalidEntryLengthError(EntryReadError):
    """The size field before ``pos`` is smaller than ``MIN_SANE_ENTRY_SIZE``."""


class WrongEntryError(EntryReadError):
    """The location holds a different entry than the one asked for."""

    def __init__(
        self,
        reason: str,
        *,
        offset: int,
        path: str | None = None,
        found: tuple[int, int],
        expected: tuple[int, int],
    ) -> None:
        self.found = found
        self.expected = expected
        super().__init__(reason, offset=offset, path=path)


def _entry_pos(source: LogSource, location: int) -> int:
    log_id, pos = split_location(location)
    if log_id != source.log_id:
        raise ValueError(f"location {location:#x} is in log {log_id}, not in log {source.log_id}")
    if pos < HEADER_SIZE + 4:
        raise ValueError(f"location {location:#x} points into the entry log header")
    return pos


def _read(source: LogSource, pos: int, expect: tuple[int, int] | None) -> bytes:
    path = str(source.path)
    first = source.read_at(pos - 4, _FIRST_READ)
    if len(first) < _ENTRY_HEAD.size:
        raise ShortReadError(
            f"log {source.log_id} ends {len(first)} bytes after the entry's size field "
            f"(needs {_ENTRY_HEAD.size})",
            offset=pos,
            path=path,
        )
    size, ledger_id, entry_id = _ENTRY_HEAD.unpack_from(first)
    if size < MIN_SANE_ENTRY_SIZE:
        raise InvalidEntryLengthError(
            f"invalid entry length {size} (at least {MIN_SANE_ENTRY_SIZE})", offset=pos, path=path
        )
    if expect is not None and (ledger_id, entry_id) != expect:
        raise WrongEntryError(
            f"found entry {entry_id} of ledger {ledger_id}, expected entry {expect[1]} of "
            f"ledger {expect[0]}",
            offset=pos,
            path=path,
            found=(ledger_id, entry_id),
            expected=expect,
        )
    if size + 4 <= len(first):
        return first[4 : 4 + size]
    body = first[4:] + source.read_at(pos + len(first) - 4, size + 4 - len(first))
    if len(body) != size:
        raise ShortReadError(
            f"short read of entry {entry_id} of ledger {ledger_id}: the log holds "
            f"{len(body)} of its {size} bytes",
            offset=pos,
            path=path,
        )
    return body


def read_entry(source: LogSource, ledger_id: int, entry_id: int, location: int) -> bytes:
    """The body of entry ``(ledger_id, entry_id)`` at ``location``, checked.

    Reads ``size, ledgerId, entryId`` at ``pos - 4``: a size below 16 raises
    :class:`InvalidEntryLengthError`, other ids :class:`WrongEntryError`, a log that ends too
    early :class:`ShortReadError`. ``ValueError`` if the location is not in this log.
    """
    return _read(source, _entry_pos(source, location), (ledger_id, entry_id))


def read_entry_by_location(source: LogSource, location: int) -> bytes:
    """The body at ``location`` without checking its ids (upstream ``readEntry(location)``)."""
    return _read(source, _entry_pos(source, location), None)


def read_header(source: LogSource) -> LogHeader:
    """The source's header; :class:`EntryLogFormatError` naming the file if it is bad."""
    try:
        return LogHeader.decode(source.read_at(0, HEADER_SIZE))
    except EntryLogFormatError as e:
        raise e.with_path(str(source.path)) from None


def find_log_file(directories: Iterable[str | os.PathLike[str]], log_id: int) -> Path:
    """The first ``<dir>/<hex id>.log`` that exists; ``FileNotFoundError`` if none does."""
    name = log_file_name(log_id)
    for d in directories:
        candidate = Path(d) / name
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"no file for entry log {log_id:x}")


class EntryLogReader:
    """One entry log opened read-only: one file descriptor until :meth:`close`."""

    __slots__ = ("_fd", "_log_id", "_path")

    def __init__(self, path: str | os.PathLike[str], log_id: int | None = None) -> None:
        """Open ``path``; the log id comes from its name (``1f.log`` is 31) unless given."""
        self._path = Path(path)
        if log_id is None:
            log_id = parse_log_file_name(self._path.name)
            if log_id is None:
                raise ValueError(f"{self._path} is not named <hex id>.log; pass its log id")
        self._log_id = log_id
        self._fd = os.open(self._path, os.O_RDONLY)

    @classmethod
    def open_log(cls, directories: Iterable[str | os.PathLike[str]], log_id: int) -> EntryLogReader:
        """Open log ``log_id`` from whichever of ``directories`` holds it."""
        return cls(find_log_file(directories, log_id), log_id)

    @property
    def log_id(self) -> int:
        return self._log_id

    @property
    def path(self) -> Path:
        return self._path

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def fileno(self) -> int:
        self._check_open()
        return self._fd

    def size(self) -> int:
        self._check_open()
        return os.fstat(self._fd).st_size

    def read_at(self, pos: int, n: int) -> bytes:
        self._check_open()
        data = os.pread(self._fd, n, pos)
        if len(data) < n and data:
            # pread may stop early (signals, huge reads); only the end of file is final.
            parts = [data]
            got = len(data)
            while got < n:
                more = os.pread(self._fd, n - got, pos + got)
                if not more:
                    break
                parts.append(more)
                got += len(more)
            data = b"".join(parts)
        return data

    def read_header(self) -> LogHeader:
        return read_header(self)

    def read_entry(self, ledger_id: int, entry_id: int, location: int) -> bytes:
        return read_entry(self, ledger_id, entry_id, location)

    def read_entry_by_location(self, location: int) -> bytes:
        return read_entry_by_location(self, location)

    def close(self) -> None:
        """Close the descriptor. Idempotent."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __enter__(self) -> EntryLogReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<EntryLogReader {self._path}{' closed' if self.closed else ''}>"

    def _check_open(self) -> None:
        if self._fd < 0:
            raise ValueError(f"{self!r} is closed")
