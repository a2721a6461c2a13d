"""Which entry logs a pipeline reads, which bookie each belongs to, and how they are split.

Inputs are files or directories (searched recursively for ``<hex id>.log``). A log's bookie
is the ``bookie`` option when given, else read off its path: in a bookie's layout
``<bookie>/<ledger dir>/current/<id>.log`` it is ``<bookie>`` (``bookie-2`` for a
``bookiesim cluster`` dir, ``bk`` for ``/var/bk/ledgers/current/1a.log``); elsewhere it is the
file's directory name.

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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bookiesim.entrylog.format import HEADER_SIZE, EntryLogFormatError, parse_log_file_name
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.scanner import scan_entry_log_batches

__all__ = [
    "DEFAULT_MAX_PARTITION_BYTES",
    "DEFAULT_MAX_SPLIT_BYTES",
    "TASKS_PER_CORE",
    "InputError",
    "LogFile",
    "Split",
    "bookie_of",
    "find_log_files",
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


def bookie_of(path: Path) -> str:
    parent = path.parent
    if parent.name == "current" and len(parent.parents) >= 2:
        return parent.parent.parent.name or parent.parent.name
    return parent.name


def _candidates(paths: Iterable[str]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = []
            for root, _, names in os.walk(path):
                found += [Path(root) / n for n in names if parse_log_file_name(n) is not None]
            yield from sorted(found)
        elif path.exists():
            yield path
        else:
            raise InputError(path, "no such file or directory")


def find_log_files(
    paths: Iterable[str], *, bookie: str | None = None, skip_bad_files: bool = False
) -> tuple[list[LogFile], list[InputError]]:
    """Every entry log under ``paths``, its header checked; and the files skipped.

    Without ``skip_bad_files`` the first unreadable file raises :class:`InputError`.
    """
    files: list[LogFile] = []
    skipped: list[InputError] = []
    for path in _candidates(paths):
        try:
            log_id = parse_log_file_name(path.name)
            if log_id is None:
                raise InputError(path, "not an entry log name (<hex id>.log)")
            try:
                with EntryLogReader(path, log_id) as reader:
                    reader.read_header()
                    size = reader.size()
            except EntryLogFormatError as exc:
                raise InputError(path, str(exc).removeprefix(f"{path}: ")) from exc
            except OSError as exc:
                raise InputError(path, exc.strerror or str(exc)) from exc
        except InputError as exc:
            if not skip_bad_files:
                raise
            skipped.append(exc)
            continue
        files.append(LogFile(str(path), bookie or bookie_of(path), log_id, size))
    return files, skipped


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
