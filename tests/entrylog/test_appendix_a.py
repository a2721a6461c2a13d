"""Reference Appendix A: the "hello" entry, byte for byte, through a real entry log file.

The sheet's hand-computed vectors: the record of entry 0 of ledger 1 as the first record of a
log, its location, its per-ledger size, and the ledgers map appended on roll with the header
patched to point at it. Any difference here breaks compatibility with upstream's files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bookiesim.entrylog.format import LogHeader
from bookiesim.entrylog.metadata import extract_from_ledgers_map
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.scanner import scan_entry_log
from bookiesim.entrylog.writer import EntryLogWriter

if TYPE_CHECKING:
    from pathlib import Path

HELLO_BODY = bytes.fromhex(
    "0000000000000001"  # ledgerId 1
    "0000000000000000"  # entryId 0
    "ffffffffffffffff"  # LAC -1
    "0000000000000005"  # length 5
    "e3a5f74d"  # CRC32C
    "68656c6c6f"  # "hello"
)
HELLO_RECORD = bytes.fromhex("00000029") + HELLO_BODY
LEDGERS_MAP = bytes.fromhex(
    "00000024fffffffffffffffffffffffffffffffe000000010000000000000001000000000000002d"
)
LOG_ID = 0x2A


def test_hello_entry_log_bytes(tmp_path: Path) -> None:
    assert len(HELLO_BODY) == 41
    writer = EntryLogWriter(tmp_path, LOG_ID)
    location = writer.append(HELLO_BODY)
    assert location == (LOG_ID << 32) | 1028
    assert dict(writer.ledger_sizes) == {1: 45}
    assert writer.position == 1069

    header = writer.append_ledgers_map()
    assert header == LogHeader(version=1, ledgers_map_offset=1069, ledgers_count=1)
    writer.close()

    data = (tmp_path / "2a.log").read_bytes()
    assert len(data) == 1069 + len(LEDGERS_MAP)
    assert data[:4] == b"BKLO"
    assert data[4:8] == bytes.fromhex("00000001")
    assert data[8:16] == bytes.fromhex("000000000000042d")  # offset 1069
    assert data[16:20] == bytes.fromhex("00000001")  # count 1
    assert data[20:1024] == bytes(1004)
    assert data[1024:1069] == HELLO_RECORD
    assert data[1069:] == LEDGERS_MAP


def test_hello_entry_log_reads_back(tmp_path: Path) -> None:
    with EntryLogWriter(tmp_path, LOG_ID) as writer:
        location = writer.append(HELLO_BODY)
        writer.append_ledgers_map()
    with EntryLogReader(tmp_path / "2a.log") as reader:
        assert reader.read_entry(1, 0, location) == HELLO_BODY
        records = list(scan_entry_log(reader))
    assert [(r.offset, r.ledger_id, r.entry_id, r.size, r.body) for r in records] == [
        (1024, 1, 0, 41, HELLO_BODY)
    ]
    meta = extract_from_ledgers_map(tmp_path / "2a.log")
    assert (meta.entry_log_id, dict(meta.ledgers), meta.total_size) == (LOG_ID, {1: 45}, 45)
