"""The batch interface and the scanner's fast path: same walk as upstream, whatever the cuts.

The scanner runs whole records through a tight loop and hands entries over in batches of
``_BATCH_BYTES``; everything else goes through the rules one position at a time. These tests
pin down that neither the fast path nor where batches and chunks end changes anything a
consumer can see: the entries, the ``accept`` calls and their order, the summary, and when an
error from ``accept`` arrives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.entrylog import scanner
from bookiesim.entrylog.format import LogHeader, encode_ledgers_map
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.scanner import (
    DEFAULT_CHUNK_SIZE,
    RawRecord,
    ScannedRecord,
    ScanSummary,
    scan_entry_log,
    scan_entry_log_batches,
)
from bookiesim.entrylog.writer import EntryLogWriter

from .entries import scratch_dir, seeded_entry, upstream_entry, write_file
from .test_scanner import record, reference_scan, segments

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path


def summary_tuple(s: ScanSummary) -> tuple[int | None, ...]:
    return (
        s.file_size,
        s.entries,
        s.entry_bytes,
        s.skipped,
        s.skipped_bytes,
        s.padding_bytes,
        s.torn_offset,
        s.end_offset,
    )


def batches_of(
    path: Path,
    *,
    accept: Callable[[int], bool] | None = None,
    read_bodies: bool = True,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> tuple[list[list[RawRecord]], ScanSummary]:
    with EntryLogReader(path, 0) as r:
        scan = scan_entry_log_batches(
            r, accept=accept, read_bodies=read_bodies, chunk_size=chunk_size
        )
        return list(scan), scan.summary


def drain(scan: Iterable[ScannedRecord], bodies: list[bytes | None]) -> None:
    """Collect the bodies of a scan into ``bodies`` until it ends or raises."""
    bodies.extend(rec.body for rec in scan)  # appends one by one: a raise keeps the rest


def drain_batches(scan: Iterable[list[RawRecord]], bodies: list[bytes | None]) -> None:
    for batch in scan:
        bodies.extend(body for _, _, _, _, body in batch)


@given(
    parts=st.lists(segments, max_size=12),
    cut=st.none() | st.integers(0, 20_000),
    chunk=st.integers(28, 5000),
    batch_bytes=st.integers(1, 4000),
    read_bodies=st.booleans(),
    only_ledger_1=st.booleans(),
)
def test_batches_equal_upstream_algorithm(
    parts: list[bytes],
    cut: int | None,
    chunk: int,
    batch_bytes: int,
    read_bodies: bool,
    only_ledger_1: bool,
) -> None:
    data = LogHeader().encode() + b"".join(parts)
    if cut is not None:
        data = data[: 1024 + cut]
    ref_calls: list[int] = []
    calls: list[int] = []
    legacy_calls: list[int] = []

    def accepting(log: list[int]) -> Callable[[int], bool] | None:
        def accept(lid: int) -> bool:
            log.append(lid)
            return not only_ledger_1 or lid == 1

        return accept

    expected = [
        (off, lid, eid, size, body if read_bodies else None)
        for off, lid, eid, size, body in reference_scan(data, accepting(ref_calls))
    ]
    with scratch_dir() as d, mock.patch.object(scanner, "_BATCH_BYTES", batch_bytes):
        path = d / "0.log"
        write_file(path, data)
        with EntryLogReader(path, 0) as r:
            scan = scan_entry_log_batches(
                r, accept=accepting(calls), read_bodies=read_bodies, chunk_size=chunk
            )
            batches = list(scan)
            legacy = scan_entry_log(
                r, accept=accepting(legacy_calls), read_bodies=read_bodies, chunk_size=chunk
            )
            records = list(legacy)
    assert all(batches)  # no empty batch is ever handed over
    assert [rec for batch in batches for rec in batch] == expected
    assert [tuple(rec) for rec in records] == expected
    assert all(type(rec) is ScannedRecord for rec in records)
    # upstream calls accept once per record with a positive size and ledger id != -1, in order
    assert calls == ref_calls == legacy_calls
    assert summary_tuple(scan.summary) == summary_tuple(legacy.summary)
    s = scan.summary
    assert s.entry_bytes + s.skipped_bytes + s.padding_bytes + s.torn_bytes == s.file_size - 1024


def test_batches_of_a_big_log_of_small_entries(tmp_path: Path) -> None:
    # Several chunks of the default size, several batches per chunk, entries across every
    # chunk boundary; bodies are bytes taken whole.
    bodies = [seeded_entry(e % 3, e, 1000 + e % 50, seed=e % 7) for e in range(5000)]
    data = LogHeader().encode() + b"".join(record(b) for b in bodies)
    path = tmp_path / "0.log"
    write_file(path, data)
    assert len(data) > 4 * DEFAULT_CHUNK_SIZE
    batches, summary = batches_of(path)
    assert len(batches) > len(data) // DEFAULT_CHUNK_SIZE
    flat = [rec for batch in batches for rec in batch]
    assert flat == reference_scan(data)
    assert all(type(rec[4]) is bytes for rec in flat)
    assert (summary.entries, summary.entry_bytes, summary.end_offset) == (
        5000,
        len(data) - 1024,
        len(data),
    )
    # ...and with a filter, without bodies
    batches, summary = batches_of(path, accept=lambda lid: lid == 2, read_bodies=False)
    flat = [rec for batch in batches for rec in batch]
    assert [(off, eid) for off, _, eid, _, _ in flat] == [
        (off, eid) for off, lid, eid, _, _ in reference_scan(data) if lid == 2
    ]
    assert summary.skipped == 5000 - len(flat)


def test_summary_is_up_to_date_with_each_batch(tmp_path: Path) -> None:
    bodies = [seeded_entry(1, e, 26, seed=0) for e in range(3000)]  # 30 bytes each
    path = tmp_path / "0.log"
    write_file(path, LogHeader().encode() + b"".join(record(b) for b in bodies))
    with EntryLogReader(path, 0) as r:
        scan = scan_entry_log_batches(r, chunk_size=4096)
        seen = 0
        for batch in scan:
            seen += len(batch)
            assert scan.summary.entries == seen
            assert scan.summary.entry_bytes == 30 * seen
    assert seen == 3000


@pytest.mark.parametrize("chunk", [64, 4096, DEFAULT_CHUNK_SIZE])
@pytest.mark.parametrize("fail_at", [0, 1, 7, 500, 999])
def test_an_accept_error_comes_after_the_entries_before_it(
    tmp_path: Path, chunk: int, fail_at: int
) -> None:
    bodies = [upstream_entry(1, e) for e in range(1000)]
    path = tmp_path / "0.log"
    write_file(path, LogHeader().encode() + b"".join(record(b) for b in bodies))

    calls = 0

    def accept(lid: int) -> bool:
        nonlocal calls
        calls += 1
        if calls > fail_at:
            raise RuntimeError("boom")
        return True

    with EntryLogReader(path, 0) as r:
        got: list[bytes | None] = []
        with pytest.raises(RuntimeError, match="boom"):
            drain(scan_entry_log(r, accept=accept, chunk_size=chunk), got)
        assert got == bodies[:fail_at]
        assert calls == fail_at + 1

        calls = 0
        got.clear()
        with pytest.raises(RuntimeError, match="boom"):
            drain_batches(scan_entry_log_batches(r, accept=accept, chunk_size=chunk), got)
        assert got == bodies[:fail_at]
        assert calls == fail_at + 1


class FailingSource:
    """A log source whose ``fail_at``-th read (counting from 1) raises."""

    def __init__(self, reader: EntryLogReader, fail_at: int) -> None:
        self.reader = reader
        self.fail_at = fail_at
        self.reads = 0

    @property
    def log_id(self) -> int:
        return self.reader.log_id

    @property
    def path(self) -> Path:
        return self.reader.path

    def size(self) -> int:
        return self.reader.size()

    def read_at(self, pos: int, n: int) -> bytes:
        self.reads += 1
        if self.reads == self.fail_at:
            raise OSError("disk on fire")
        return self.reader.read_at(pos, n)


def test_a_read_error_comes_after_the_entries_before_it(tmp_path: Path) -> None:
    bodies = [seeded_entry(1, e, 26, seed=0) for e in range(1000)]  # 30 bytes each
    path = tmp_path / "0.log"
    write_file(path, LogHeader().encode() + b"".join(record(b) for b in bodies))
    # reads: the header, the first chunk (4096 bytes from offset 1024), then the failing one
    with EntryLogReader(path, 0) as r:
        got: list[bytes | None] = []
        with pytest.raises(OSError, match="on fire"):
            drain(scan_entry_log(FailingSource(r, 3), chunk_size=4096), got)
        assert got == bodies[: 4096 // 30]

        got.clear()
        with pytest.raises(OSError, match="on fire"):
            drain_batches(scan_entry_log_batches(FailingSource(r, 3), chunk_size=4096), got)
        assert got == bodies[: 4096 // 30]


def test_entries_bigger_than_a_batch_or_a_chunk(tmp_path: Path) -> None:
    bodies = [seeded_entry(1, i, size, seed=i) for i, size in enumerate([70_000, 200_000, 16])]
    bodies += [upstream_entry(2, e) for e in range(10)]
    data = LogHeader().encode() + encode_ledgers_map({1: 5}) + b"".join(record(b) for b in bodies)
    path = tmp_path / "0.log"
    write_file(path, data)
    for chunk in (4096, 100_000, DEFAULT_CHUNK_SIZE):
        batches, summary = batches_of(path, chunk_size=chunk)
        assert [rec[4] for batch in batches for rec in batch] == bodies
        assert summary.skipped == 1


def test_active_log_batches(tmp_path: Path) -> None:
    with EntryLogWriter(tmp_path, 0) as w:
        bodies = [upstream_entry(1, e) for e in range(100)]
        for b in bodies:
            w.append(b)
        scan = scan_entry_log_batches(w)
        assert [rec[4] for batch in scan for rec in batch] == bodies
        assert scan.header == LogHeader()


def test_batch_tuples_have_the_fields_of_scanned_record() -> None:
    assert ScannedRecord._fields == ("offset", "ledger_id", "entry_id", "size", "body")
