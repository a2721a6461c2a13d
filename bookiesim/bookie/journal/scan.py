"""Reading journal files: their names, scanning one file, replaying all after a mark.

Why this module exists: it is the reading half of the I/O edge around ``records``,
``decoder`` and ``tail`` (which own every byte rule); ``files`` writes. Replay starts at the
checkpoint mark and reads every journal from there, in id order (upstream
``BookieImpl.replay``); in the last file that holds records it hands the records to a
:class:`~bookiesim.bookie.journal.tail.TailWindow`, so that a record a power loss tore in
the final write is dropped with everything after it, never replayed (see ``tail``).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Final, NamedTuple

from bookiesim.bookie.journal.decoder import END, NEED_DATA, JournalDecoder
from bookiesim.bookie.journal.log_mark import LogMark
from bookiesim.bookie.journal.records import (
    MAX_RECORD_SIZE,
    VERSION_HEADER_SIZE,
    DataRecord,
    JournalFormatError,
    JournalRecord,
    parse_header,
)
from bookiesim.bookie.journal.tail import Held, LedgerDigests, TailWindow, TornTail

if TYPE_CHECKING:
    import io
    from collections.abc import Generator, Iterable

    from bookiesim.bookie.journal.tail import StoredEntry

__all__ = [
    "DEFAULT_READ_CHUNK",
    "MIB",
    "JournalReplay",
    "JournalScan",
    "MissingJournalError",
    "ReplayedRecord",
    "is_tail_journal",
    "journal_current_dir",
    "journal_file_name",
    "list_journal_ids",
    "read_journal",
    "replay",
]

log = logging.getLogger(__name__)

MIB: Final = 1024 * 1024
DEFAULT_READ_CHUNK: Final = 1 * MIB
_SUFFIX: Final = ".txn"
_U64: Final = 1 << 64
_PEEK_CHUNK: Final = 4096  # enough for a V5+ header and a first length


def journal_current_dir(journal_dir: str | os.PathLike[str]) -> str:
    """``<journalDir>/current``, where the ``.txn`` files live."""
    return os.path.join(os.fspath(journal_dir), "current")


def journal_file_name(file_id: int) -> str:
    """``<hex id>.txn`` with Java's ``Long.toHexString`` spelling (lower case, unsigned)."""
    return f"{file_id % _U64:x}{_SUFFIX}"


def _parse_file_name(name: str) -> int | None:
    if not name.endswith(_SUFFIX):
        return None
    stem = name[: -len(_SUFFIX)]
    if not 0 < len(stem) <= 16 or stem.strip("0123456789abcdefABCDEF"):
        return None
    value = int(stem, 16)
    return value - _U64 if value >= 1 << 63 else value


def list_journal_ids(journal_dir: str | os.PathLike[str]) -> list[int]:
    """Ids of the ``<hex>.txn`` files in ``<journal_dir>/current``, ascending.

    Other names are ignored (upstream would fail on a non-hex ``.txn`` name; an editor's
    stray file is no reason to refuse to start). A missing directory has no journals.
    """
    try:
        names = os.listdir(journal_current_dir(journal_dir))
    except FileNotFoundError:
        return []
    ids = [i for i in map(_parse_file_name, names) if i is not None]
    ids.sort()
    return ids


class JournalScan:
    """Iterator over ``(offset, record)`` of one journal file, reading it in chunks.

    After exhaustion: ``version`` is the file's format version, ``end_offset`` where its
    valid records end, and ``torn`` whether a partly written record follows them, with
    ``torn_reason`` saying why and ``tear`` the details (:class:`TornTail`). While
    iterating, ``record_size`` is the length field of the record last yielded (a meta
    record may hold bytes past what its decoded fields cover; tools show the real size).
    Raises ``JournalFormatError`` (naming the file) on bytes that are not a journal.

    With ``tail=True`` the file is taken as the last of the journal: its final write is
    checked for a record torn by a power loss (``tail.TailWindow``), which ends the scan
    there, and the records of each write are yielded once the next write starts.
    ``digests`` carries what earlier files taught about each ledger's digest type.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        start_offset: int = 0,
        *,
        chunk_size: int = DEFAULT_READ_CHUNK,
        max_record_size: int = MAX_RECORD_SIZE,
        tail: bool = False,
        digests: LedgerDigests | None = None,
    ) -> None:
        if start_offset < 0:
            raise ValueError(f"start_offset {start_offset} is negative")
        self.path = os.fspath(path)
        self.start_offset = start_offset
        self.chunk_size = chunk_size
        self.max_record_size = max_record_size
        self.tail = tail
        self.digests = digests
        self.version: int | None = None
        self.end_offset: int | None = None
        self.torn = False
        self.torn_reason: str | None = None
        self.tear: TornTail | None = None
        self.record_size = 0
        self._it = self._scan()

    def __iter__(self) -> JournalScan:
        return self

    def __next__(self) -> tuple[int, JournalRecord]:
        return next(self._it)

    def close(self) -> None:
        """Stop early and close the file."""
        self._it.close()

    def _scan(self) -> Generator[tuple[int, JournalRecord], None, None]:
        try:
            with open(self.path, "rb", buffering=0) as f:
                yield from self._scan_file(f)
        except JournalFormatError as e:
            raise e.with_path(self.path) from None

    def _release(self, held: Iterable[Held]) -> Generator[tuple[int, JournalRecord], None, None]:
        for h in held:
            self.record_size = h.size
            yield h.offset, h.record

    def _torn_at(self, tear: TornTail) -> None:
        self.end_offset = tear.offset
        self.torn = True
        self.torn_reason = tear.reason
        self.tear = tear

    def _scan_file(self, f: io.FileIO) -> Generator[tuple[int, JournalRecord], None, None]:
        if self.start_offset == 0:
            dec = JournalDecoder(max_record_size=self.max_record_size)
        else:
            version = parse_header(f.read(VERSION_HEADER_SIZE) or b"")
            dec = JournalDecoder(
                version=version, offset=self.start_offset, max_record_size=self.max_record_size
            )
            f.seek(self.start_offset)
        self.version = dec.version
        digests = self.digests
        window: TailWindow | None = None
        while True:
            try:
                r = dec.next_record()
            except JournalFormatError as e:
                if window is None:
                    raise
                kept, tear = window.junk(e)
                yield from self._release(kept)
                if tear is None:
                    raise  # junk with no torn record before it: not a journal
                self._torn_at(tear)
                return
            if r is NEED_DATA:
                dec.receive_data(f.read(self.chunk_size) or b"")
            elif r is END:
                self.version = dec.version
                if window is not None:
                    kept, torn = window.finish()
                    yield from self._release(kept)
                    if torn is not None:
                        self._torn_at(torn)
                        return
                self.end_offset = dec.end_offset
                self.torn = dec.torn
                self.torn_reason = dec.torn_reason
                if dec.torn and dec.end_offset is not None:
                    self.tear = TornTail(dec.end_offset, dec.torn_reason or "torn", 0)
                return
            else:
                self.version = dec.version
                if self.tail:
                    if window is None:
                        assert dec.version is not None  # a record comes after the header
                        window = TailWindow(digests or LedgerDigests(), dec.version)
                    released = window.push(dec.record_offset, dec.record_size, r)
                    if released:  # once per write, not per record
                        yield from self._release(released)
                else:
                    if digests is not None and type(r) is DataRecord:
                        digests.learn(r)
                    self.record_size = dec.record_size
                    yield dec.record_offset, r


def read_journal(
    path: str | os.PathLike[str],
    start_offset: int = 0,
    *,
    chunk_size: int = DEFAULT_READ_CHUNK,
    max_record_size: int = MAX_RECORD_SIZE,
    tail: bool = False,
) -> JournalScan:
    """Scan one journal file from ``start_offset`` (0 = just after its header).

    Yields ``(offset of the record's length field, record)``; padding is skipped; a torn
    tail ends the scan (see ``JournalScan.torn``); ``tail=True`` also checks the final
    write for a record torn by a power loss. Never reads the whole file at once.
    """
    return JournalScan(
        path, start_offset, chunk_size=chunk_size, max_record_size=max_record_size, tail=tail
    )


def _holds_records(path: str, start_offset: int) -> bool:
    """The file has a record from ``start_offset`` on (junk counts: the real scan says so)."""
    scan = JournalScan(path, start_offset, chunk_size=_PEEK_CHUNK)
    try:
        next(scan)
    except StopIteration:
        return False
    except JournalFormatError:
        return True
    finally:
        scan.close()
    return True


def is_tail_journal(path: str | os.PathLike[str]) -> bool:
    """No later ``<hex>.txn`` beside ``path`` holds a record: the journal ends in ``path``.

    A file not named like a journal counts as a journal of its own. (A bookie opens a new,
    empty file at every start, so the journal's last file is not always the newest.)
    """
    path = os.fspath(path)
    directory, name = os.path.split(path)
    file_id = _parse_file_name(name)
    if file_id is None:
        return True
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return True
    later = sorted((i, n) for n in names if (i := _parse_file_name(n)) is not None and i > file_id)
    return not any(_holds_records(os.path.join(directory, n), 0) for _, n in later)


class MissingJournalError(FileNotFoundError):
    """The journal a checkpoint mark points into is gone: replay cannot be complete."""


class ReplayedRecord(NamedTuple):
    file_id: int
    offset: int
    record: JournalRecord


class JournalReplay:
    """Iterator over every record after a checkpoint mark, across journal files.

    After exhaustion, ``end_mark`` is the end of the valid records of the last journal (where
    upstream sets the in-memory mark before its post-replay checkpoint), or the starting
    mark when there was nothing to scan; ``torn`` lists the ids of files with a torn tail.
    ``tail_file_id`` is the last file holding records after the mark (None if none does):
    its final write is checked for a record torn by a power loss, and ``tear`` says what
    was dropped there. Every torn tail is logged as one WARNING line. ``stored_entry``
    reads an entry from ledger storage (None if absent): a ledger whose entries before
    the mark are all in storage has its digest type learned from there.
    """

    def __init__(
        self,
        journal_dir: str | os.PathLike[str],
        mark: LogMark,
        *,
        chunk_size: int = DEFAULT_READ_CHUNK,
        max_record_size: int = MAX_RECORD_SIZE,
        stored_entry: StoredEntry | None = None,
    ) -> None:
        self.journal_dir = os.fspath(journal_dir)
        self.mark = mark
        ids = [i for i in list_journal_ids(journal_dir) if i >= mark.file_id]
        # Upstream: "last log mark may be missed due to no sync up before" — with a real
        # mark, its file must still exist, or the records between it and the next file
        # would be skipped silently.
        if mark.file_id > 0 and (not ids or ids[0] != mark.file_id):
            raise MissingJournalError(
                f"Recovery log {mark.file_id} ({journal_file_name(mark.file_id)}) is missing "
                f"in {journal_current_dir(journal_dir)}"
            )
        self.journal_ids = ids
        self.end_mark = mark
        self.torn: list[int] = []
        self.tear: TornTail | None = None
        self._chunk_size = chunk_size
        self._max_record_size = max_record_size
        self._stored_entry = stored_entry
        current = journal_current_dir(self.journal_dir)
        self.tail_file_id: int | None = next(
            (i for i in reversed(ids) if _holds_records(self._path(current, i), self._start(i))),
            None,
        )
        self._it = self._replay()

    def __iter__(self) -> JournalReplay:
        return self

    def __next__(self) -> ReplayedRecord:
        return next(self._it)

    def _start(self, file_id: int) -> int:
        return self.mark.offset if file_id == self.mark.file_id else 0

    @staticmethod
    def _path(current: str, file_id: int) -> str:
        return os.path.join(current, journal_file_name(file_id))

    def _replay(self) -> Generator[ReplayedRecord, None, None]:
        current = journal_current_dir(self.journal_dir)
        digests = LedgerDigests(self._stored_entry)
        for file_id in self.journal_ids:
            is_tail = file_id == self.tail_file_id
            scan = JournalScan(
                self._path(current, file_id),
                self._start(file_id),
                chunk_size=self._chunk_size,
                max_record_size=self._max_record_size,
                tail=is_tail,
                digests=digests,
            )
            for offset, rec in scan:
                yield ReplayedRecord(file_id, offset, rec)
            assert scan.end_offset is not None
            self.end_mark = LogMark(file_id, scan.end_offset)
            if scan.torn:
                self.torn.append(file_id)
                tear = scan.tear
                assert tear is not None
                if is_tail:
                    self.tear = tear
                log.warning(
                    "%s: torn journal tail at offset %d (%s); replay ends there in this "
                    "file, dropping %d record(s) a power loss left unfinished, never "
                    "acknowledged",
                    scan.path,
                    tear.offset,
                    tear.reason,
                    tear.dropped,
                )


def replay(
    journal_dir: str | os.PathLike[str],
    mark: LogMark,
    *,
    chunk_size: int = DEFAULT_READ_CHUNK,
    max_record_size: int = MAX_RECORD_SIZE,
    stored_entry: StoredEntry | None = None,
) -> JournalReplay:
    """Records of the journals at or after ``mark`` (upstream ``BookieImpl.replay``).

    Raises ``MissingJournalError`` ("Recovery log <id> is missing") at once if ``mark``
    names a file that is gone, before yielding anything. A record torn by a power loss in
    the final write of the last file holding records is dropped with everything after it
    (module ``tail``), with one WARNING line naming the file and offset.
    """
    return JournalReplay(
        journal_dir,
        mark,
        chunk_size=chunk_size,
        max_record_size=max_record_size,
        stored_entry=stored_entry,
    )
