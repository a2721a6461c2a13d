"""Which entry logs a pipeline reads, which bookie each belongs to, and how they are split.

Inputs are files or directories (searched recursively for ``<hex id>.log``); a file reached
twice (the same input given twice, or inside two inputs) is read once. A log's bookie is the
``bookie`` option when given, else its ledger dir's name (:mod:`bookiesim.pipeline.bookies`):
the bookie id in the dir's cookie, else read off its path (``A/bookie-1/current/0.log`` →
``bookie-1``, ``/var/bk/ledgers/current/1a.log`` → ``bk``), and two dirs never share a
name unless their cookies say they are one bookie's.

A log with no header — 0 bytes, or a header cut short — was created and never written (an
upstream bookie always leaves one, opened just before it stopped): it holds no entries, so it
is counted as empty, not as a bad file.

Splits: a log up to ``max_split_bytes`` is one split. A bigger one is cut at record offsets,
because a record can only be found by walking the chain of size fields from the header: the
driver walks it once without reading bodies (a scan, as fast as reading the file) and cuts at
the first record at or after every ``max_split_bytes``; each split then scans
``[start, stop)`` (:func:`~bookiesim.entrylog.scanner.scan_entry_log_batches`), and the
splits of a log together see exactly the records one scan sees.

Partitions (Spark tasks): splits are cut, in order, into ``partitions`` groups of similar
size, at most ``max_partition_bytes`` each (:func:`pack_splits`), because a task has a fixed
cost and per-ledger logs are many and small.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bookiesim.entrylog.format import (
    HEADER_SIZE,
    MAGIC,
    EntryLogFormatError,
    parse_log_file_name,
)
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.scanner import scan_entry_log_batches
from bookiesim.pipeline.bookies import (
    BookieNameError,
    LedgerDir,
    ledger_dir_of,
    name_ledger_dirs,
    path_name,
    read_cookie,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

__all__ = [
    "DEFAULT_MAX_PARTITION_BYTES",
    "DEFAULT_MAX_SPLIT_BYTES",
    "TASKS_PER_CORE",
    "BookieNameError",
    "FoundLogs",
    "InputError",
    "LogFile",
    "Split",
    "bookie_of",
    "find_log_files",
    "find_logs",
    "pack_splits",
    "plan_splits",
]

MIN_PARTITION_BYTES = 8 << 20
"""Smaller inputs are not spread over more tasks than this many bytes each."""
DEFAULT_MAX_SPLIT_BYTES = 256 << 20
"""Logs bigger than this are split (Spark's own file splits default to 128 MiB; a log's
boundary walk costs a read of the file, so we cut less often)."""
DEFAULT_MAX_PARTITION_BYTES = 1 << 30
"""A task reads at most this much unless one split is bigger (:func:`pack_splits`)."""
TASKS_PER_CORE = 2
"""Spark tasks per core by default (:func:`pack_splits` says why so few)."""


class InputError(Exception):
    """An input that cannot be read as an entry log; the message names the file."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class LogFile:
    path: str
    bookie: str
    log_id: int
    size: int


@dataclass(frozen=True)
class Split:
    """Records of ``path`` that start in ``[start, stop)`` (``stop`` None: to the end).

    ``error`` set means the file could not be read (only with skip-bad-files): the split
    yields no entries, only the problem.
    """

    path: str
    bookie: str
    log_id: int
    start: int = HEADER_SIZE
    stop: int | None = None
    error: str | None = None
    nbytes: int = 0
    """Bytes of the file the split covers (for packing splits into partitions)."""


@dataclass(frozen=True)
class FoundLogs:
    """What :func:`find_logs` found under the inputs."""

    files: list[LogFile]
    skipped: list[InputError]
    """Unreadable files (only with skip-bad-files)."""
    empty: list[LogFile]
    """Logs created and never written (no header): no entries, not an error."""
    notes: list[str]
    """Ledger dirs renamed so that two bookies' logs are not counted as one."""


def bookie_of(path: Path) -> str:
    """The bookie a log's path names (its cookie and the other inputs aside)."""
    return path_name(ledger_dir_of(path)[0])


def _candidates(paths: Iterable[str]) -> Iterator[Path]:
    seen: set[str] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = []
            for root, _, names in os.walk(path):
                found += [Path(root) / n for n in names if parse_log_file_name(n) is not None]
            found.sort()
        elif path.exists():
            found = [path]
        else:
            raise InputError(path, "no such file or directory")
        for f in found:
            if (real := os.path.realpath(f)) not in seen:
                seen.add(real)
                yield f


def _never_written(path: Path) -> bool:
    """A log shorter than its header that holds zeros or the start of a header: a bookie
    created it and stopped (or crashed) before writing anything after the header."""
    with open(path, "rb") as f:
        head = f.read(HEADER_SIZE)
    if len(head) >= HEADER_SIZE:
        return False
    return not head.strip(b"\0") or head.startswith(MAGIC) or MAGIC.startswith(head)


def _read_log(path: Path) -> tuple[int, int]:
    """``(log id, size)`` of a log whose header is good; :class:`InputError` otherwise."""
    log_id = parse_log_file_name(path.name)
    if log_id is None:
        raise InputError(path, "not an entry log name (<hex id>.log)")
    try:
        with EntryLogReader(path, log_id) as reader:
            size = reader.size()
            if size < HEADER_SIZE and _never_written(path):
                return log_id, size
            reader.read_header()
    except EntryLogFormatError as exc:
        raise InputError(path, str(exc).removeprefix(f"{path}: ")) from exc
    except OSError as exc:
        raise InputError(path, exc.strerror or str(exc)) from exc
    return log_id, size


def find_logs(
    paths: Iterable[str], *, bookie: str | None = None, skip_bad_files: bool = False
) -> FoundLogs:
    """Every entry log under ``paths``, its header checked and its bookie named.

    Without ``skip_bad_files`` the first unreadable file raises :class:`InputError`; two
    ledger dirs that cannot be told apart raise :class:`BookieNameError` (naming both).
    """
    found: list[tuple[Path, int, int]] = []
    skipped: list[InputError] = []
    for path in _candidates(paths):
        try:
            log_id, size = _read_log(path)
        except InputError as exc:
            if not skip_bad_files:
                raise
            skipped.append(exc)
            continue
        found.append((path, log_id, size))
    names: dict[Path, str] = {}
    notes: list[str] = []
    if bookie is None:
        dirs: dict[Path, LedgerDir] = {}
        for path, _, _ in found:
            ledger_dir, logs = ledger_dir_of(path)
            if ledger_dir not in dirs or logs.name == "current":
                dirs[ledger_dir] = LedgerDir(ledger_dir, logs, read_cookie(logs))
        names, notes = name_ledger_dirs(dirs.values())
    files: list[LogFile] = []
    empty: list[LogFile] = []
    for path, log_id, size in found:
        name = bookie if bookie is not None else names[ledger_dir_of(path)[0]]
        (files if size >= HEADER_SIZE else empty).append(LogFile(str(path), name, log_id, size))
    return FoundLogs(files, skipped, empty, notes)


def find_log_files(
    paths: Iterable[str], *, bookie: str | None = None, skip_bad_files: bool = False
) -> tuple[list[LogFile], list[InputError]]:
    """:func:`find_logs`' logs with entries to read, and the files it skipped."""
    found = find_logs(paths, bookie=bookie, skip_bad_files=skip_bad_files)
    return found.files, found.skipped


def record_boundaries(path: str, log_id: int, every: int) -> list[int]:
    """Offsets of the first record at or after each multiple of ``every`` bytes (past the
    header): where the splits of a big log start."""
    cuts: list[int] = []
    target = HEADER_SIZE + every
    with EntryLogReader(path, log_id) as reader:
        for batch in scan_entry_log_batches(reader, read_bodies=False):
            for record in batch:
                if record[0] >= target:
                    cuts.append(record[0])
                    target = record[0] + every
    return cuts


def plan_splits(
    files: Iterable[LogFile], max_split_bytes: int = DEFAULT_MAX_SPLIT_BYTES
) -> list[Split]:
    splits: list[Split] = []
    for f in files:
        if f.size <= max_split_bytes:
            splits.append(Split(f.path, f.bookie, f.log_id, nbytes=f.size))
            continue
        bounds: list[int | None] = [
            HEADER_SIZE,
            *record_boundaries(f.path, f.log_id, max_split_bytes),
            None,
        ]
        for start, stop in itertools.pairwise(bounds):
            assert start is not None
            end = f.size if stop is None else stop
            begin = 0 if start == HEADER_SIZE else start  # the first split reads the header
            splits.append(Split(f.path, f.bookie, f.log_id, start, stop, nbytes=end - begin))
    return splits


def pack_splits(
    splits: Sequence[Split],
    partitions: int,
    max_bytes: int = DEFAULT_MAX_PARTITION_BYTES,
) -> list[list[Split]]:
    """Splits cut, in order, into ``partitions`` groups of about equal bytes, each group one
    Spark task: fewer groups for small inputs (not under ``MIN_PARTITION_BYTES`` each, nor
    more than there are splits), more where a group would hold over ``max_bytes`` (only a
    single split bigger than that makes a bigger group).

    A task costs Spark about 0.1 s whatever it reads (measured on the inventory job,
    BENCHMARKS.md), and a bookie with a log per ledger has thousands of small logs, so tasks
    are few and large: as many as asked (by default :data:`TASKS_PER_CORE` per core), not
    one per log. A split goes to the group its middle byte falls in, so equal splits share
    out evenly however the byte counts round.
    """
    if not splits:
        return []
    if partitions <= 0 or max_bytes <= 0:
        raise ValueError(f"partitions ({partitions}) and max_bytes ({max_bytes}) must be > 0")
    total = sum(s.nbytes for s in splits)
    count = min(partitions, max(1, -(-total // MIN_PARTITION_BYTES)))
    count = min(len(splits), max(count, -(-total // max_bytes)))
    groups: list[list[Split]] = [[] for _ in range(count)]
    before = 0
    for split in splits:
        middle = before + split.nbytes / 2
        groups[min(count - 1, int(middle * count / total)) if total else 0].append(split)
        before += split.nbytes
    capped: list[list[Split]] = []
    for group in groups:
        # Middles can put a little more than total / count in a group: cut again at the cap.
        held = 0
        for i, split in enumerate(group):
            if i == 0 or held + split.nbytes > max_bytes:
                capped.append([])
                held = 0
            capped[-1].append(split)
            held += split.nbytes
    return capped
