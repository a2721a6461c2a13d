"""Crash tolerance: a log cut at EVERY byte boundary still scans to a prefix of what was written.

A crash can leave any prefix of the bytes a writer handed to the OS. For every such prefix of
a small log (sealed or not) the scanner must return exactly the complete records — never a
partial one — account for every byte it stepped over, and locate the torn tail; reads of a
torn entry must fail with a clear error; metadata must describe exactly the complete entries.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from bookiesim.entrylog.format import HEADER_SIZE, EntryLogFormatError
from bookiesim.entrylog.metadata import EntryLogMetadata, extract_metadata
from bookiesim.entrylog.reader import EntryLogReader, ShortReadError
from bookiesim.entrylog.scanner import scan_entry_log
from bookiesim.entrylog.writer import EntryLogWriter

from .entries import seeded_entry, upstream_entry

if TYPE_CHECKING:
    from pathlib import Path

ENTRIES = [
    upstream_entry(1, 1),
    seeded_entry(2, 0, 300, seed=1),  # size 0x12c: non-zero second byte in its size field
    upstream_entry(3, 1),
    seeded_entry(1, 2, 17, seed=2),
    seeded_entry(2**63 - 1, 5, 40, seed=3),
]


@pytest.mark.parametrize("sealed", [False, True])
def test_truncate_at_every_byte(tmp_path: Path, sealed: bool) -> None:
    with EntryLogWriter(tmp_path, 0) as w:
        locations = [w.append(body) for body in ENTRIES]
        if sealed:
            w.append_ledgers_map()
    path = w.path
    data = path.read_bytes()
    ends = [(loc & 0xFFFFFFFF) + len(body) for loc, body in zip(locations, ENTRIES, strict=True)]
    boundaries = [HEADER_SIZE, *ends, len(data)]  # the map is one record at the end

    for cut in range(len(data), -1, -1):
        os.truncate(path, cut)
        if cut < HEADER_SIZE:
            with EntryLogReader(path) as r, pytest.raises(EntryLogFormatError, match="header"):
                scan_entry_log(r)
            continue
        complete = [i for i, end in enumerate(ends) if end <= cut]
        with EntryLogReader(path) as r:
            scan = scan_entry_log(r)
            records = list(scan)
            # Exactly the complete entries, whole.
            assert [rec.body for rec in records] == [ENTRIES[i] for i in complete]
            # Every byte accounted for, and the torn tail located.
            s = scan.summary
            assert s.entry_bytes + s.skipped_bytes + s.padding_bytes + s.torn_bytes == cut - 1024
            last = max(b for b in boundaries if b <= cut)
            tail = data[last:cut]
            if not tail or (len(tail) < 12 and not any(tail)):
                assert not s.torn
            else:
                assert s.torn_offset == last
            # Complete entries read back; torn or missing ones fail clearly.
            for i, (loc, body) in enumerate(zip(locations, ENTRIES, strict=True)):
                if i in complete:
                    assert r.read_entry_by_location(loc) == body
                else:
                    with pytest.raises(ShortReadError, match=r"ends|short read"):
                        r.read_entry_by_location(loc)
        # The metadata of a torn log is that of its complete entries.
        sizes: dict[int, int] = {}
        for i in complete:
            lid = int.from_bytes(ENTRIES[i][:8], "big", signed=True)
            sizes[lid] = sizes.get(lid, 0) + len(ENTRIES[i]) + 4
        assert extract_metadata(path) == EntryLogMetadata.from_ledger_sizes(0, sizes)
