"""``bookiesim shell`` on files written by the real writers.

Why: the shell is what people trust when a bookie misbehaves, so its figures must be exactly
what the writers put on disk (ids, locations ``(logId << 32) | pos``, sizes, LACs), its JSON
keys must be the documented ones, and a bad file must give one stderr line naming the file
and the byte offset with exit code 2 — never a traceback.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bookiesim.bookie.index_format import index_path
from bookiesim.bookie.journal import (
    HEADER_SIZE as JOURNAL_HEADER_SIZE,
)
from bookiesim.bookie.journal import (
    METAENTRY_ID_LEDGER_KEY,
    DataRecord,
    ExplicitLacRecord,
    FenceRecord,
    JournalRecord,
    JournalWriter,
    LogMark,
    MasterKeyRecord,
    UnknownMetaRecord,
    encode_header,
    encode_record,
    write_last_mark,
)
from bookiesim.bookie.ledger_index import LedgerIndex
from bookiesim.cli.main import main
from bookiesim.client.digest import DigestManager
from bookiesim.entrylog.format import HEADER_SIZE
from bookiesim.entrylog.writer import EntryLogWriter

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


@pytest.fixture
def sealed_log(tmp_path: Path) -> tuple[Path, list[Written]]:
    return write_log(tmp_path, 0x1F, seal=True)


# ---------------------------------------------------------------------------- readlog


def test_readlog_json_is_what_the_writer_wrote(
    capsys: pytest.CaptureFixture[str], sealed_log: tuple[Path, list[Written]]
) -> None:
    path, written = sealed_log
    code, out, err = run(capsys, "readlog", path, "--json")
    assert (code, err) == (0, "")
    *entries, summary = json_lines(out)
    assert [
        (e["ledgerId"], e["entryId"], e["location"], e["size"], e["lastAddConfirmed"])
        for e in entries
    ] == [(w.ledger_id, w.entry_id, w.location, len(w.body), w.lac) for w in written]
    for e, w in zip(entries, written, strict=True):
        assert e["type"] == "entry"
        assert e["location"] == (0x1F << 32) | e["offset"]
        assert e["logId"] == 0x1F
        assert "body" not in e
        assert w.location >> 32 == 0x1F
    assert summary["type"] == "summary"
    assert summary["entries"] == summary["shown"] == len(written)
    assert summary["skipped"] == 1  # the ledgers map record
    assert summary["torn"] is False
    assert summary["tornOffset"] is None
    assert summary["ledgersCount"] == 2
    assert summary["headerVersion"] == 1
    assert summary["fileSize"] == path.stat().st_size


def test_readlog_table_shows_the_entries(
    capsys: pytest.CaptureFixture[str], sealed_log: tuple[Path, list[Written]]
) -> None:
    path, written = sealed_log
    code, out, err = run(capsys, "readlog", path)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert "log 0x1f (31)" in lines[0]
    assert lines[1].split() == [
        "ledgerId",
        "entryId",
        "location",
        "offset",
        "size",
        "lastAddConfirmed",
    ]
    rows = [line.split() for line in lines[3:-1]]
    assert rows == [
        [
            str(w.ledger_id),
            str(w.entry_id),
            str(w.location),
            str(w.location & 0xFFFFFFFF),
            str(len(w.body)),
            str(w.lac),
        ]
        for w in written
    ]
    assert lines[-1].startswith("8 entries")
    assert "no torn tail" in lines[-1]


def test_readlog_filters_by_ledger_and_entry(
    capsys: pytest.CaptureFixture[str], sealed_log: tuple[Path, list[Written]]
) -> None:
    path, written = sealed_log
    code, out, _ = run(capsys, "readlog", path, "--json", "--ledger", "5")
    assert code == 0
    *entries, summary = json_lines(out)
    assert [e["entryId"] for e in entries] == [0, 1, 2, 3]
    assert {e["ledgerId"] for e in entries} == {5}
    assert summary["skipped"] == 5  # the other ledger's 4 entries and the map

    code, out, _ = run(capsys, "readlog", path, "--json", "--ledger", "5", "--entry", "2")
    *entries, summary = json_lines(out)
    (entry,) = entries
    assert entry["location"] == next(
        w.location for w in written if (w.ledger_id, w.entry_id) == (5, 2)
    )
    assert summary["shown"] == 1


def test_readlog_print_body(
    capsys: pytest.CaptureFixture[str], sealed_log: tuple[Path, list[Written]]
) -> None:
    path, written = sealed_log
    code, out, _ = run(capsys, "readlog", path, "--json", "--print-body")
    assert code == 0
    bodies = [base64.b64decode(e["body"]) for e in json_lines(out)[:-1]]
    assert bodies == [w.body for w in written]

    code, out, _ = run(capsys, "readlog", path, "--print-body", "--entry", "0", "--ledger", "5")
    assert code == 0
    assert "body" in out.splitlines()[1]
    assert "payload-0" in out


def test_readlog_reports_a_torn_tail(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path, written = write_log(tmp_path, 0x20, seal=False)
    end = path.stat().st_size
    with path.open("ab") as f:
        f.write(struct.pack(">iqq", 500, 5, 9) + b"cut short")  # a record a crash cut
    code, out, err = run(capsys, "readlog", path, "--json")
    assert (code, err) == (0, "")
    *entries, summary = json_lines(out)
    assert len(entries) == len(written)
    assert summary["torn"] is True
    assert summary["tornOffset"] == end
    assert summary["tornBytes"] == 4 + 16 + 9
    assert summary["ledgersMapOffset"] == 0

    code, out, _ = run(capsys, "readlog", path)
    assert f"torn tail: 29 bytes at offset {end}" in out
    assert "no ledgers map (not sealed)" in out


def test_readlog_ledgers_map_from_the_header(
    capsys: pytest.CaptureFixture[str], sealed_log: tuple[Path, list[Written]]
) -> None:
    path, written = sealed_log
    code, out, err = run(capsys, "readlog", path, "--ledgers-map", "--json")
    assert (code, err) == (0, "")
    *ledgers, summary = json_lines(out)
    expected: dict[int, int] = {}
    for w in written:
        expected[w.ledger_id] = expected.get(w.ledger_id, 0) + len(w.body) + 4
    assert ledgers == [
        {"type": "ledger", "ledgerId": lid, "size": size} for lid, size in sorted(expected.items())
    ]
    assert summary["source"] == "ledgersMap"
    assert summary["ledgers"] == 2
    assert summary["totalSize"] == sum(expected.values())
    assert summary["ledgersMapOffset"] == written[-1].location % 2**32 + len(written[-1].body)

    code, out, err = run(capsys, "readlog", path, "--ledgers-map")
    assert (code, err) == (0, "")
    assert [line.split() for line in out.splitlines()[2:-1]] == [
        [str(lid), str(size)] for lid, size in sorted(expected.items())
    ]
    assert "from the ledgers map at offset" in out


def test_readlog_ledgers_map_missing_falls_back_to_a_scan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path, written = write_log(tmp_path, 0x21, seal=False)
    code, out, err = run(capsys, "readlog", path, "--ledgers-map", "--json")
    assert code == 0
    (note,) = err.splitlines()
    assert str(path) in note
    assert "no usable ledgers map" in note
    assert "offset 8" in note  # the header's map offset field, which is 0
    assert "not sealed" in note
    *ledgers, summary = json_lines(out)
    assert {r["ledgerId"] for r in ledgers} == {w.ledger_id for w in written}
    assert summary["source"] == "scan"


def test_readlog_needs_a_log_id_for_other_names(
    capsys: pytest.CaptureFixture[str], sealed_log: tuple[Path, list[Written]]
) -> None:
    path, written = sealed_log
    renamed = path.with_name("copy-of-log")
    path.rename(renamed)
    code, _, err = run(capsys, "readlog", renamed)
    assert code == 2
    assert "--log-id" in err
    code, out, _ = run(capsys, "readlog", renamed, "--log-id", "0x1f", "--json")
    assert code == 0
    assert json_lines(out)[0]["location"] == written[0].location


# ---------------------------------------------------------------------------- readjournal

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


def test_readjournal_json_has_every_record_kind(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_journal(tmp_path)
    code, out, err = run(capsys, "readjournal", path, "--json")
    assert (code, err) == (0, "")
    *records, summary = json_lines(out)
    assert [r["type"] for r in records] == [
        "masterKey",
        "data",
        "data",
        "fence",
        "explicitLac",
        "unknownMeta",
    ]
    offset = JOURNAL_HEADER_SIZE
    for r, rec in zip(records, JOURNAL_RECORDS, strict=True):
        encoded = encode_record(rec)
        assert r["offset"] == offset
        assert r["size"] == len(encoded) - 4
        assert r["ledgerId"] == 5
        assert r["entryId"] == struct.unpack_from(">q", encoded, 12)[0]
        offset += len(encoded)
    assert records[0]["masterKey"] == DigestManager(5, PASSWORD).master_key.hex()
    assert records[0]["entryId"] == METAENTRY_ID_LEDGER_KEY
    assert [r["lastAddConfirmed"] for r in records[1:3]] == [-1, 0]
    assert records[4]["explicitLac"] == 1
    assert records[4]["lacBlob"] == DigestManager(5, PASSWORD).package_lac(1).hex()
    assert records[5]["entryId"] == -0x10000
    assert summary == {
        "type": "summary",
        "version": 6,
        "records": 6,
        "endOffset": 1024,  # the records, then padding to the sector boundary
        "torn": False,
        "tornOffset": None,
    }


def test_readjournal_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_journal(tmp_path)
    code, out, _ = run(capsys, "readjournal", path)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["offset", "type", "ledgerId", "entryId", "size", "detail"]
    assert [line.split()[1] for line in lines[2:-1]] == [
        "masterKey",
        "data",
        "data",
        "fence",
        "explicitLac",
        "unknownMeta",
    ]
    assert lines[-1] == "journal V6: 6 records; ends cleanly at offset 1024"


def test_readjournal_size_is_the_length_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A master-key record with bytes after the key (upstream ignores them) and a torn tail.
    key = b"k" * 20
    meta = struct.pack(">qqi", 7, METAENTRY_ID_LEDGER_KEY, len(key)) + key + b"xyz"
    torn = encode_record(DataRecord.from_body(struct.pack(">qq", 7, 0) + b"p" * 40))[:30]
    path = tmp_path / "1.txn"
    path.write_bytes(encode_header() + struct.pack(">i", len(meta)) + meta + torn)
    code, out, err = run(capsys, "readjournal", path, "--json")
    assert (code, err) == (0, "")
    record, summary = json_lines(out)
    assert record["size"] == len(meta) == 20 + 20 + 3
    assert record["masterKey"] == key.hex()
    assert summary["torn"] is True
    assert summary["tornOffset"] == JOURNAL_HEADER_SIZE + 4 + len(meta)


# ---------------------------------------------------------------------------- readindex


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


def test_readindex_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path, locations = write_index(tmp_path)
    code, out, err = run(capsys, "readindex", path, "--json")
    assert (code, err) == (0, "")
    header, *entries, summary = json_lines(out)
    dm = DigestManager(0x1234, PASSWORD)
    assert header == {
        "type": "header",
        "ledgerId": 0x1234,
        "version": 1,
        "masterKey": dm.master_key.hex(),
        "fenced": True,
        "stateBits": 1,
        "explicitLac": 2,
        "explicitLacBlob": dm.package_lac(2).hex(),
    }
    assert entries == [
        {
            "type": "entry",
            "ledgerId": 0x1234,
            "entryId": e,
            "location": loc,
            "logId": loc >> 32,
            "offset": loc & 0xFFFFFFFF,
        }
        for e, loc in sorted(locations.items())
    ]
    assert summary == {"type": "summary", "entries": 4, "lastEntryId": 5}


def test_readindex_table_and_read_only_open(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, locations = write_index(tmp_path)
    flags: list[int] = []
    real_open = os.open

    def spy(file: str | os.PathLike[str], flag: int, mode: int = 0o777) -> int:
        if os.fspath(file) == os.fspath(path):
            flags.append(flag)
        return real_open(file, flag, mode)

    monkeypatch.setattr(os, "open", spy)
    code, out, _ = run(capsys, "readindex", path)
    assert code == 0
    assert flags
    assert all(f & os.O_ACCMODE == os.O_RDONLY for f in flags)  # inspecting never writes
    assert "ledger 4660 (0x1234)" in out
    assert "fenced        yes" in out
    assert DigestManager(0x1234, PASSWORD).master_key.hex() in out
    rows = [line.split() for line in out.splitlines() if line.endswith(".log")]
    assert rows == [
        [str(e), str(loc), str(loc >> 32), str(loc & 0xFFFFFFFF), f"{loc >> 32:x}.log"]
        for e, loc in sorted(locations.items())
    ]


# ---------------------------------------------------------------------------- lastmark


@pytest.mark.parametrize("suffix", ["", "current"])
def test_lastmark_in_a_ledger_dir_or_its_current(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, suffix: str
) -> None:
    ledger_dir = tmp_path / "ledgers"
    write_last_mark([ledger_dir], LogMark(0x18F00AABBCC, 4096))
    write_last_mark([ledger_dir], LogMark(0x18F00AABBCD, 512), journal_index=1)
    code, out, err = run(capsys, "lastmark", ledger_dir / suffix, "--json")
    assert (code, err) == (0, "")
    assert json_lines(out) == [
        {
            "type": "lastMark",
            "file": str(ledger_dir / "current" / "lastMark"),
            "journalIndex": None,
            "fileId": 0x18F00AABBCC,
            "fileIdHex": "18f00aabbcc",
            "offset": 4096,
            "journalFile": "18f00aabbcc.txn",
        },
        {
            "type": "lastMark",
            "file": str(ledger_dir / "current" / "lastMark.1"),
            "journalIndex": 1,
            "fileId": 0x18F00AABBCD,
            "fileIdHex": "18f00aabbcd",
            "offset": 512,
            "journalFile": "18f00aabbcd.txn",
        },
    ]
    code, out, _ = run(capsys, "lastmark", ledger_dir / suffix)
    assert code == 0
    assert out.splitlines()[2].split() == [
        "lastMark",
        str(0x18F00AABBCC),
        "18f00aabbcc",
        "4096",
        "18f00aabbcc.txn",
    ]


# ---------------------------------------------------------------------------- errors


def _bad_files(tmp_path: Path) -> dict[str, tuple[list[str], Path, int | None]]:
    """name -> (shell arguments, the file the error must name, the offset it must name)."""
    wrong_magic = tmp_path / "a.log"
    wrong_magic.write_bytes(b"BKLX" + bytes(2000))
    torn_header = tmp_path / "b.log"
    torn_header.write_bytes(encode_log_header_prefix())
    junk = tmp_path / "junk.txn"
    junk.write_bytes(b"Junk data, not a journal" * 10)
    junk_after_records = tmp_path / "later.txn"
    first = encode_record(DataRecord.from_body(struct.pack(">qq", 1, 0) + b"ok"))
    junk_after_records.write_bytes(encode_header() + first + b"\x80\x00\x00\x00" + bytes(8))
    bad_index = tmp_path / "5.idx"
    bad_index.write_bytes(b"BKLF" + bytes(1020))
    torn_index = tmp_path / "6.idx"
    torn_index.write_bytes(b"BKLE\x00\x00\x00\x01\x00\x00\x00\x14abc")
    short_mark = tmp_path / "ledgers" / "current" / "lastMark"
    short_mark.parent.mkdir(parents=True)
    short_mark.write_bytes(b"\x00" * 10)
    missing = tmp_path / "missing"
    return {
        "wrong magic": (["readlog", str(wrong_magic)], wrong_magic, 0),
        "torn log header": (["readlog", str(torn_header)], torn_header, 20),
        "torn log header, map": (["readlog", str(torn_header), "--ledgers-map"], torn_header, 20),
        "junk journal": (["readjournal", str(junk)], junk, 0),
        "junk after records": (
            ["readjournal", str(junk_after_records)],
            junk_after_records,
            JOURNAL_HEADER_SIZE + len(first),
        ),
        "bad index signature": (["readindex", str(bad_index)], bad_index, 0),
        "torn index header": (["readindex", str(torn_index)], torn_index, 8),
        "short lastMark": (["lastmark", str(tmp_path / "ledgers")], short_mark, 10),
        "missing log": (["readlog", str(missing / "1.log")], missing / "1.log", None),
        "missing journal": (["readjournal", str(missing)], missing, None),
        "missing index": (["readindex", str(missing)], missing, None),
        "missing dir": (["lastmark", str(missing)], missing, None),
        "no lastMark": (["lastmark", str(tmp_path)], tmp_path, None),
    }


def encode_log_header_prefix() -> bytes:
    """The first 20 bytes of a V1 entry log header: a crash cut the rest."""
    return b"BKLO" + struct.pack(">iqi", 1, 0, 0)


BAD_FILE_CASES = [
    "wrong magic",
    "torn log header",
    "torn log header, map",
    "junk journal",
    "junk after records",
    "bad index signature",
    "torn index header",
    "short lastMark",
    "missing log",
    "missing journal",
    "missing index",
    "missing dir",
    "no lastMark",
]


@pytest.mark.parametrize("case", BAD_FILE_CASES)
@pytest.mark.parametrize("as_json", [False, True])
def test_a_bad_file_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str, as_json: bool
) -> None:
    argv, named, offset = _bad_files(tmp_path)[case]
    code, out, err = run(capsys, *argv, *(["--json"] if as_json else []))
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    (line,) = lines
    assert line.startswith(f"bookiesim shell {argv[0]}: {named}")
    assert "Traceback" not in line
    if offset is not None:
        assert f": offset {offset}: " in line
    if case == "junk after records":
        assert len(out.splitlines()) == (1 if as_json else 3)  # the good record came first
    else:
        assert out == ""


def test_bad_file_helper_is_stable(tmp_path: Path) -> None:
    # The parametrization above lists the cases without files; keep both in step.
    assert list(_bad_files(tmp_path)) == BAD_FILE_CASES


# ---------------------------------------------------------------------------- help, pipes


@pytest.mark.parametrize(
    ("command", "make"),
    [
        ("readlog", lambda p: write_log(p, 0x1F, seal=True)[0]),
        ("readjournal", write_journal),
        ("readindex", lambda p: write_index(p)[0]),
    ],
)
def test_every_json_key_is_documented_in_help(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    command: str,
    make: Callable[[Path], Path],
) -> None:
    path = make(tmp_path)
    extra = ["--print-body"] if command == "readlog" else []
    code, out, _ = run(capsys, command, path, "--json", *extra)
    assert code == 0
    keys = {k for obj in json_lines(out) for k in obj}
    if command == "readlog":
        code, out, _ = run(capsys, command, path, "--json", "--ledgers-map")
        keys |= {k for obj in json_lines(out) for k in obj}
    with pytest.raises(SystemExit):
        main(["shell", command, "--help"])
    help_text = capsys.readouterr().out
    assert {k for k in keys if k not in help_text} == set()


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    # Enough rows to fill the pipe, so the shell meets the closed pipe while writing.
    with EntryLogWriter(tmp_path, 1) as writer:
        for entry_id in range(20_000):
            writer.append(struct.pack(">qqq", 3, entry_id, entry_id - 1) + bytes(8))
    proc = subprocess.Popen(
        [sys.executable, "-m", "bookiesim", "shell", "readlog", str(writer.path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what `| head -1` does
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 0
    assert b"log 0x1 (1)" in first
    assert err == b""
