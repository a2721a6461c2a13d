"""``bookiesim shell`` on files written by the real writers.

Why: the shell is what people trust when a bookie misbehaves, so its figures must be exactly
what the writers put on disk (ids, locations ``(logId << 32) | pos``, sizes, LACs), its JSON
keys must be the documented ones, and a bad file must give one stderr line naming the file
and the byte offset with exit code 2 — never a traceback.
"""

from __future__ import annotations

import base64
import os
import struct
from pathlib import Path

import pytest

from bookiesim.bookie.journal import (
    HEADER_SIZE as JOURNAL_HEADER_SIZE,
)
from bookiesim.bookie.journal import (
    METAENTRY_ID_LEDGER_KEY,
    DataRecord,
    JournalRecord,
    JournalWriter,
    LogMark,
    MasterKeyRecord,
    encode_header,
    encode_record,
    write_last_mark,
)
from bookiesim.client.digest import DigestManager

from .shell_files import (
    JOURNAL_RECORDS,
    PASSWORD,
    Written,
    json_lines,
    run,
    write_index,
    write_journal,
    write_log,
)


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
        "tornReason": None,
        "droppedRecords": 0,
        "tailChecked": True,
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
    whole = encode_record(DataRecord.from_body(struct.pack(">qq", 7, 0) + b"p" * 40))
    torn = encode_record(DataRecord.from_body(struct.pack(">qq", 7, 1) + b"p" * 40))[:30]
    path = tmp_path / "1.txn"
    path.write_bytes(encode_header() + struct.pack(">i", len(meta)) + meta + whole + torn)
    code, out, err = run(capsys, "readjournal", path, "--json")
    assert (code, err) == (0, "")
    record, _, summary = json_lines(out)
    assert record["size"] == len(meta) == 20 + 20 + 3
    assert record["masterKey"] == key.hex()
    assert summary["torn"] is True
    assert summary["tornOffset"] == JOURNAL_HEADER_SIZE + 4 + len(meta) + len(whole)
    assert summary["tornReason"] == "end of file inside a record"


def test_readjournal_says_why_a_tail_is_torn(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A power loss kept entry 1's length and a prefix; the rest reads as preallocated zeros.
    dm = DigestManager(5, PASSWORD)
    records: list[JournalRecord] = [
        MasterKeyRecord(5, dm.master_key),
        DataRecord.from_body(dm.package(0, -1, 100, b"a" * 100)),
        DataRecord.from_body(dm.package(1, 0, 1100, b"b" * 1000)),
    ]
    with JournalWriter(tmp_path / "journal", prealloc_size=4096) as writer:
        writer.append(records)
        writer.flush()
        path = Path(writer.path)
    torn_at = JOURNAL_HEADER_SIZE + sum(len(encode_record(r)) for r in records[:2])
    with path.open("r+b") as f:
        f.seek(torn_at + 300)
        f.write(bytes(1024))
    code, out, _ = run(capsys, "readjournal", path)
    assert code == 0
    assert out.splitlines()[-1] == (
        f"journal V6: 2 records; torn tail at offset {torn_at}: ledger 5 entry 1: CRC32C "
        f"digest mismatch over a zero-filled tail, 1 record left out"
    )
    # A later journal file holding records: this one is no longer where the journal ends,
    # so its final write is read as it is (synced before the next file began).
    with JournalWriter(tmp_path / "journal", prealloc_size=4096) as writer:
        writer.append([records[1]])
    code, out, _ = run(capsys, "readjournal", path, "--json")
    summary = json_lines(out)[-1]
    assert (summary["records"], summary["torn"], summary["tailChecked"]) == (3, False, False)


# ---------------------------------------------------------------------------- readindex


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
