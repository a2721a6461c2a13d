"""The streaming scan (reference §2.5, "Scanning"): upstream's tolerance rules and our report.

Pins down the rules a scan of any log must follow — padding advances one byte, ledgers-map
records and rejected ledgers are skipped, a torn tail ends the scan — plus what a scan
reports about the bytes it went through, for any chunk size.
"""

from __future__ import annotations

import itertools
import struct
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.entrylog.format import EntryLogFormatError, LogHeader, encode_ledgers_map
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.scanner import (
    DEFAULT_CHUNK_SIZE,
    EntryLogScan,
    ScannedRecord,
    scan_entry_log,
)
from bookiesim.entrylog.writer import EntryLogWriter

from .entries import make_entry, scratch_dir, seeded_entry, upstream_entry, write_file

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def record(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def scan_file(
    path: Path,
    *,
    accept: Callable[[int], bool] | None = None,
    read_bodies: bool = True,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> tuple[list[ScannedRecord], EntryLogScan]:
    with EntryLogReader(path, 0) as r:
        scan = scan_entry_log(r, accept=accept, read_bodies=read_bodies, chunk_size=chunk_size)
        return list(scan), scan


def check_summary(scan: EntryLogScan) -> None:
    s = scan.summary
    assert s.entry_bytes + s.skipped_bytes + s.padding_bytes + s.torn_bytes == s.file_size - 1024
    assert s.end_offset == (s.file_size if s.torn_offset is None else s.torn_offset)


def test_padding_map_records_and_filter(tmp_path: Path) -> None:
    a, b, c = upstream_entry(1, 1), upstream_entry(2, 1), upstream_entry(1, 2)
    negative = struct.pack(">i", -5)  # size <= 0: advance one byte at a time
    data = (
        LogHeader().encode()
        + record(a)
        + bytes(37)  # zero padding
        + record(b)
        + encode_ledgers_map({1: 30})  # ledger -1: skipped
        + negative
        + record(c)
    )
    path = tmp_path / "0.log"
    write_file(path, data)
    records, scan = scan_file(path)
    assert [(r.offset, r.ledger_id, r.entry_id, r.size, r.body) for r in records] == [
        (1024, 1, 1, 26, a),
        (1024 + 30 + 37, 2, 1, 26, b),
        (len(data) - 30, 1, 2, 26, c),
    ]
    assert records[0].pos == 1028
    s = scan.summary
    assert (s.entries, s.skipped, s.padding_bytes, s.torn_offset) == (3, 1, 37 + 4, None)
    assert scan.header == LogHeader()
    check_summary(scan)

    only_1, scan = scan_file(path, accept=lambda lid: lid == 1, read_bodies=False)
    assert [(r.ledger_id, r.entry_id, r.body) for r in only_1] == [(1, 1, None), (1, 2, None)]
    assert scan.summary.skipped == 2
    check_summary(scan)


def test_zero_runs_are_skipped_like_one_byte_steps(tmp_path: Path) -> None:
    # A zero run followed by a record whose size has leading zero bytes: one-byte stepping
    # lands on the record's size field exactly; the fast skip must land there too, even
    # when the run crosses chunk boundaries.
    a = upstream_entry(4, 4)
    data = LogHeader().encode() + bytes(5000) + record(a) + bytes(3) + record(a)
    path = tmp_path / "0.log"
    write_file(path, data)
    for chunk in (32, 100, 4096, 1 << 20):
        records, scan = scan_file(path, chunk_size=chunk)
        assert [(r.offset, r.body) for r in records] == [(6024, a), (6024 + 30 + 3, a)]
        assert scan.summary.padding_bytes == 5003
        check_summary(scan)


def test_short_records_are_reported_like_upstream(tmp_path: Path) -> None:
    # A positive size below 16 is not an entry, but upstream's scan hands it over; it has no
    # entry id.
    data = LogHeader().encode() + struct.pack(">iq", 12, 7) + b"abcd" + record(upstream_entry(1, 1))
    path = tmp_path / "0.log"
    write_file(path, data)
    records, _ = scan_file(path)
    assert [(r.ledger_id, r.entry_id, r.size) for r in records] == [(7, -1, 12), (1, 1, 26)]


@pytest.mark.parametrize(
    ("tail", "torn"),
    [
        (b"", False),
        (bytes(3), False),  # < 12 zero bytes: padding
        (bytes(50), False),
        (b"\x00\x00\x01", True),  # a size field cut after a non-zero byte
        (record(upstream_entry(9, 9))[:-1], True),  # an entry missing its last byte
        (encode_ledgers_map({1: 30})[:-5], True),  # a torn ledgers map record
    ],
)
def test_tail_report(tmp_path: Path, tail: bytes, torn: bool) -> None:
    head = LogHeader().encode() + record(upstream_entry(1, 1))
    path = tmp_path / "0.log"
    write_file(path, head + tail)
    records, scan = scan_file(path)
    assert [r.ledger_id for r in records] == [1]
    assert scan.summary.torn == torn
    if torn:
        assert scan.summary.torn_offset == len(head)
        assert scan.summary.torn_bytes == len(tail)
    check_summary(scan)


@pytest.mark.parametrize(
    ("data", "offset", "match"),
    [
        (b"", 0, "ends inside the 1024-byte"),
        (LogHeader().encode()[:1000], 1000, "ends inside the 1024-byte"),
        (b"BKLG" + bytes(1100), 0, "bad magic"),
    ],
)
def test_bad_header_is_an_error(tmp_path: Path, data: bytes, offset: int, match: str) -> None:
    path = tmp_path / "0.log"
    write_file(path, data)
    with pytest.raises(EntryLogFormatError, match=match) as info:
        scan_file(path)
    assert (info.value.path, info.value.offset) == (str(path), offset)


def test_v0_header_scans(tmp_path: Path) -> None:
    a = upstream_entry(1, 1)
    path = tmp_path / "0.log"
    write_file(path, LogHeader(version=0).encode() + record(a))
    records, scan = scan_file(path)
    assert scan.header.version == 0
    assert [r.body for r in records] == [a]


def test_scan_of_an_active_log_sees_its_buffer(tmp_path: Path) -> None:
    with EntryLogWriter(tmp_path, 0) as w:
        bodies = [upstream_entry(1, e) for e in range(3)]
        for b in bodies:
            w.append(b)
        assert w.path.stat().st_size == 0  # all still buffered, the header too
        assert [r.body for r in scan_entry_log(w)] == bodies


def test_tiny_chunk_size_is_refused(tmp_path: Path) -> None:
    with EntryLogWriter(tmp_path, 0) as w, pytest.raises(ValueError, match="too small"):
        scan_entry_log(w, chunk_size=8)


def reference_scan(
    data: bytes, accept: Callable[[int], bool] | None = None
) -> list[tuple[int, int, int, int, bytes]]:
    """Upstream's algorithm, literally: whole file in memory, one byte per padding step."""
    out = []
    pos = 1024
    while pos < len(data):
        if pos + 12 > len(data):
            break
        size, ledger_id = struct.unpack_from(">iq", data, pos)
        if size <= 0:
            pos += 1
            continue
        if ledger_id == -1 or (accept is not None and not accept(ledger_id)):
            pos += 4 + size
            continue
        if pos + 4 + size > len(data):
            break
        entry_id = struct.unpack_from(">q", data, pos + 12)[0] if size >= 16 else -1
        out.append((pos, ledger_id, entry_id, size, data[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    return out


segments = st.one_of(
    st.builds(
        lambda lid, eid, size, seed: record(seeded_entry(lid, eid, size, seed)),
        st.sampled_from([0, 1, 2, 2**63 - 1]),
        st.integers(0, 5),
        st.one_of(st.integers(16, 300), st.integers(16, 3000)),
        st.integers(0, 100),
    ),
    st.builds(bytes, st.integers(0, 600)),  # zero padding
    st.binary(max_size=24),  # junk
    st.builds(encode_ledgers_map, st.dictionaries(st.integers(0, 9), st.integers(1, 999))),
    st.builds(lambda n: struct.pack(">i", n), st.integers(-(2**31), 0)),
)


@given(
    parts=st.lists(segments, max_size=12),
    cut=st.none() | st.integers(0, 20_000),
    chunk=st.integers(28, 5000),
    read_bodies=st.booleans(),
    only_ledger_1=st.booleans(),
)
def test_scan_equals_upstream_algorithm(
    parts: list[bytes], cut: int | None, chunk: int, read_bodies: bool, only_ledger_1: bool
) -> None:
    # Padding tolerance is a heuristic: a short zero gap before a record whose size has a
    # non-zero second or third byte makes upstream read a bogus size. What matters is that
    # we do exactly what upstream does, for every chunk size, with the fast zero skip.
    data = LogHeader().encode() + b"".join(parts)
    if cut is not None:
        data = data[: 1024 + cut]
    accept = (lambda lid: lid == 1) if only_ledger_1 else None
    expected = [
        (off, lid, eid, size, body if read_bodies else None)
        for off, lid, eid, size, body in reference_scan(data, accept)
    ]
    with scratch_dir() as d:
        path = d / "0.log"
        write_file(path, data)
        records, scan = scan_file(path, accept=accept, chunk_size=chunk, read_bodies=read_bodies)
    assert [tuple(r) for r in records] == expected
    check_summary(scan)


def test_records_after_any_zero_gap_when_sizes_fit_one_byte(tmp_path: Path) -> None:
    # The case the tolerance was made for: entries below 256 bytes survive any zero gap.
    bodies = [upstream_entry(1, e) for e in range(8)]
    data = LogHeader().encode() + b"".join(record(b) + bytes(g) for g, b in enumerate(bodies))
    path = tmp_path / "0.log"
    write_file(path, data)
    records, scan = scan_file(path, chunk_size=64)
    assert [r.body for r in records] == bodies
    assert scan.summary.padding_bytes == sum(range(8))


def test_big_entries_larger_than_the_chunk(tmp_path: Path) -> None:
    bodies = [seeded_entry(1, i, 70_000, seed=i) for i in range(3)]
    path = tmp_path / "0.log"
    write_file(path, LogHeader().encode() + b"".join(record(b) for b in bodies))
    for read_bodies in (True, False):
        records, scan = scan_file(path, chunk_size=4096, read_bodies=read_bodies)
        assert [r.entry_id for r in records] == [0, 1, 2]
        if read_bodies:
            assert [r.body for r in records] == bodies
        check_summary(scan)


def test_only_ledger_id_minus_one_marks_a_map_record(tmp_path: Path) -> None:
    # Only ledger id -1 marks a map record; other negative ids are ordinary records.
    odd = make_entry(-7, 0, b"x")
    path = tmp_path / "0.log"
    write_file(path, LogHeader().encode() + record(odd))
    records, _ = scan_file(path)
    assert [r.ledger_id for r in records] == [-7]


@given(
    parts=st.lists(segments, max_size=12),
    cut=st.none() | st.integers(0, 20_000),
    chunk=st.integers(28, 5000),
    picks=st.lists(st.integers(0, 10**6), max_size=4),
)
def test_range_scans_from_record_offsets_add_up_to_the_whole_scan(
    parts: list[bytes], cut: int | None, chunk: int, picks: list[int]
) -> None:
    # How the Spark data source splits a big log: boundaries at record offsets found by a
    # scan without bodies; each split scans [boundary, next boundary).
    data = LogHeader().encode() + b"".join(parts)
    if cut is not None:
        data = data[: 1024 + cut]
    with scratch_dir() as d:
        path = d / "0.log"
        write_file(path, data)
        whole, whole_scan = scan_file(path, chunk_size=chunk)
        offsets = [r.offset for r in whole]
        cuts = sorted({offsets[p % len(offsets)] for p in picks} if offsets else set())
        bounds = [1024, *[c for c in cuts if c > 1024], None]
        pieces: list[ScannedRecord] = []
        with EntryLogReader(path, 0) as r:
            for start, stop in itertools.pairwise(bounds):
                assert start is not None
                scan = scan_entry_log(r, chunk_size=chunk, start=start, stop=stop)
                pieces += list(scan)
                if stop is not None:
                    assert scan.summary.end_offset == stop
                    assert not scan.summary.torn
                else:
                    assert scan.summary.torn_offset == whole_scan.summary.torn_offset
    assert pieces == whole


def test_a_range_must_start_after_the_header(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    write_file(path, LogHeader().encode())
    with EntryLogReader(path, 0) as r, pytest.raises(ValueError, match="bad scan range"):
        scan_entry_log(r, start=10)
    with EntryLogReader(path, 0) as r, pytest.raises(ValueError, match="bad scan range"):
        scan_entry_log(r, start=2000, stop=1500)
