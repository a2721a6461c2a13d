"""Whatever is written comes back: by location, by scan, and in the metadata.

Hypothesis writes arbitrary entries (ledger ids up to 2^63-1, any entry ids, bodies from 16
bytes to ~70 KiB) with arbitrary buffer sizes and flush points, sealed or not, and checks
that reads while writing, reads after closing, scans at any chunk size and both ways of
extracting metadata all agree with what was written.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from bookiesim.entrylog.format import LogHeader, split_location
from bookiesim.entrylog.metadata import (
    EntryLogMetadata,
    extract_by_scanning,
    extract_from_ledgers_map,
    extract_metadata,
)
from bookiesim.entrylog.reader import EntryLogReader, read_entry, read_entry_by_location
from bookiesim.entrylog.scanner import scan_entry_log
from bookiesim.entrylog.writer import EntryLogWriter

from .entries import entry_bodies, scratch_dir


def ids(body: bytes) -> tuple[int, int]:
    lid, eid = struct.unpack_from(">qq", body)
    return lid, eid


@settings(max_examples=40)
@given(
    bodies=st.lists(entry_bodies(), max_size=25),
    log_id=st.integers(0, 2**31 - 1),
    buffer_size=st.sampled_from([16, 700, 4096, 65536]),
    flush_every=st.integers(1, 30),
    seal=st.booleans(),
    chunk=st.sampled_from([64, 5000, 1 << 20]),
)
def test_write_read_scan_round_trip(
    bodies: list[bytes], log_id: int, buffer_size: int, flush_every: int, seal: bool, chunk: int
) -> None:
    sizes: dict[int, int] = {}
    for body in bodies:
        sizes[ids(body)[0]] = sizes.get(ids(body)[0], 0) + len(body) + 4
    expected_meta = EntryLogMetadata.from_ledger_sizes(log_id, sizes)

    with scratch_dir() as d:
        writer = EntryLogWriter(d, log_id, write_buffer_size=buffer_size)
        locations = []
        for i, body in enumerate(bodies):
            location = writer.append(body)
            assert split_location(location) == (log_id, writer.position - len(body))
            locations.append(location)
            if i % flush_every == flush_every - 1:
                writer.flush()
            # Read-while-writing, from the buffer or the file.
            first = bodies[i // 2]
            assert read_entry(writer, *ids(first), locations[i // 2]) == first
        assert dict(writer.ledger_sizes) == sizes
        assert [r.body for r in scan_entry_log(writer, chunk_size=chunk)] == bodies
        end = writer.position
        if seal:
            assert writer.append_ledgers_map() == LogHeader(
                ledgers_map_offset=end, ledgers_count=len(sizes)
            )
        writer.close()
        assert writer.path.stat().st_size == writer.position

        with EntryLogReader(writer.path) as reader:
            for body, location in zip(bodies, locations, strict=True):
                assert reader.read_entry(*ids(body), location) == body
                assert read_entry_by_location(reader, location) == body
            scan = scan_entry_log(reader, chunk_size=chunk)
            records = list(scan)
        assert [(r.pos, r.ledger_id, r.entry_id, r.body) for r in records] == [
            (split_location(loc)[1], *ids(b), b) for b, loc in zip(bodies, locations, strict=True)
        ]
        assert not scan.summary.torn
        assert scan.summary.padding_bytes == 0
        assert scan.summary.skipped == ((len(sizes) + 9999) // 10000 if seal else 0)

        scanned = extract_by_scanning(writer.path)
        assert scanned == expected_meta
        scanned._check()
        if seal and sizes:
            from_map = extract_from_ledgers_map(writer.path)
            from_map._check()
            assert from_map == expected_meta
        assert extract_metadata(writer.path) == expected_meta
