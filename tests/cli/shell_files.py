"""Files for the ``bookiesim shell`` tests, written by the real writers, and a way to run the
shell and read its JSON lines."""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bookiesim.bookie.index_format import index_path
from bookiesim.bookie.journal import (
    DataRecord,
    ExplicitLacRecord,
    FenceRecord,
    JournalRecord,
    JournalWriter,
    MasterKeyRecord,
    UnknownMetaRecord,
)
from bookiesim.bookie.ledger_index import LedgerIndex
from bookiesim.cli.main import main
from bookiesim.client.digest import DigestManager
from bookiesim.entrylog.format import HEADER_SIZE
from bookiesim.entrylog.writer import EntryLogWriter

if TYPE_CHECKING:
    import pytest

PASSWORD = b"secret"


@dataclass(frozen=True)
class Written:
    ledger_id: int
    entry_id: int
    lac: int
    location: int
    body: bytes


def run(capsys: pytest.CaptureFixture[str], *argv: str | os.PathLike[str]) -> tuple[int, str, str]:
    code = main(["shell", *(os.fspath(a) for a in argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def json_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def write_log(directory: Path, log_id: int, *, seal: bool) -> tuple[Path, list[Written]]:
    """Two ledgers interleaved (an upstream-style shared log), bodies packaged by the client."""
    written = []
    with EntryLogWriter(directory, log_id) as writer:
        for entry_id in range(4):
            for ledger_id in (5, 2**40 + 3):
                dm = DigestManager(ledger_id, PASSWORD)
                lac = entry_id - 1
                body = dm.package(entry_id, lac, 10 * (entry_id + 1), b"payload-%d" % entry_id)
                location = writer.append(body)
                written.append(Written(ledger_id, entry_id, lac, location, body))
        if seal:
            writer.append_ledgers_map()
    return writer.path, written


JOURNAL_RECORDS: list[JournalRecord] = [
    MasterKeyRecord(5, DigestManager(5, PASSWORD).master_key),
    DataRecord.from_body(DigestManager(5, PASSWORD).package(0, -1, 3, b"abc")),
    DataRecord.from_body(DigestManager(5, PASSWORD).package(1, 0, 6, b"def")),
    FenceRecord(5),
    ExplicitLacRecord(5, DigestManager(5, PASSWORD).package_lac(1)),
    UnknownMetaRecord(5, -0x10000, struct.pack(">qq", 5, -0x10000) + b"future"),
]


def write_journal(tmp_path: Path) -> Path:
    with JournalWriter(tmp_path / "journal", prealloc_size=4096) as writer:
        writer.append(JOURNAL_RECORDS)
        writer.flush()
        path = Path(writer.path)
    return path


def write_index(tmp_path: Path) -> tuple[Path, dict[int, int]]:
    index = LedgerIndex([tmp_path / "index"])
    dm = DigestManager(0x1234, PASSWORD)
    index.create_ledger(0x1234, dm.master_key)
    locations = {e: ((0x40 + e % 2) << 32) | (HEADER_SIZE + 4 + 100 * e) for e in (0, 1, 2, 5)}
    for entry_id, location in locations.items():
        index.set_location(0x1234, entry_id, location)
    index.set_fenced(0x1234)
    index.set_explicit_lac(0x1234, dm.package_lac(2))
    index.close()
    return index_path(tmp_path / "index", 0x1234), locations
