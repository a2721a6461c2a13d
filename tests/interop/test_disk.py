"""Disk conformance: bookiesim serves upstream's directories, and writes upstream's shape.

Why: DESIGN promises byte-compatible directories both ways. The vectors' ``disk/`` holds
what an upstream 4.17.4 bookie left after a clean shutdown (three ledgers of twenty 100-byte
entries; ledger 1 recovered, hence fenced), with upstream's shell output on it. So:

(a) a bookiesim bookie started on a copy of those directories (its cookies re-stamped the
    way an operator would, with ``updatecookie``) serves every recorded entry, byte for
    byte as the README's formula and checksums say, and keeps ledger 1 fenced;
(b) the directories a bookiesim bookie leaves after a clean stop have upstream's files in
    upstream's shapes (cookies, whole-page indexes, lastMark, lastId, log and journal
    headers);
(c) ``bookiesim shell`` reads the recorded files to the same facts upstream's shell printed.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from typing import TYPE_CHECKING, Any

import pytest

from bookiesim.bookie.cookie_check import cookie_dirs, read_dir_cookie
from bookiesim.bookie.index_format import HEADER_SIZE, PAGE_SIZE, index_path
from bookiesim.cli.main import main
from bookiesim.cli.shell.cookies import update_cookies
from bookiesim.client.digest import DigestManager
from bookiesim.cluster.testing import bookie_client, bookie_config, running_bookie
from bookiesim.metadata.cookies import Cookie
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from tests.interop.vectors import disk_dir, extract_bookie_data

if TYPE_CHECKING:
    from pathlib import Path

    from bookiesim.bookie.config import BookieConfig

PASSWORD = b"bookiesim"
"""The recording client's password (README: master key 6a16fa9c…)."""
MASTER_KEY = "6a16fa9c342b4e120b86e896025797fe4c7cbf8a"
LEDGERS = (0, 1, 2)
ENTRIES = 20
PAYLOAD_SIZE = 100
SHA256 = {
    0: "ba8582ef8c292015304842a174dff8e2259174f396e181df9f7851723603c7db",
    1: "5d70fa334876878fa249e8ff7db3fcdf2f10b4c1a8b47e3fe37e01d8d561e75b",
    2: "2a953fdaa70bdc339177bcd1412fcc065fe79e8230f734fbeb365417d60bf45c",
}
"""README: sha256 of each ledger's 20 entries as ``client.sh read`` prints them (see
:func:`test_readme_payload_checksums` for what is hashed)."""
JOURNAL_ID = 0x1A20DE47C15


def payload(ledger_id: int, entry_id: int, size: int = PAYLOAD_SIZE) -> bytes:
    """README's ``UpstreamClient.payload``: ids big-endian, then ``(entryId*31 + i) & 0xff``."""
    head = struct.pack(">qq", ledger_id, entry_id)
    return head + bytes((entry_id * 31 + i) & 0xFF for i in range(16, size))


def recorded_config(root: Path) -> BookieConfig:
    return bookie_config(root)


LOG_OF_LEDGER = {0: 0, 1: 2, 2: 1}
"""README: 0.log holds ledger 0, 1.log ledger 2, 2.log ledger 1 (first-write order)."""
_DIGEST_HEADER = 32 + 4
"""ledgerId, entryId, LAC, length, then the CRC32C digest: the payload follows."""


def stored_payloads(root: Path, ledger_id: int) -> bytes:
    """The payloads of a ledger's entries as upstream's entry log holds them, in entry order,
    read straight from the file (a 1024-byte header, then ``int size`` + entry records)."""
    data = (root / "ledgers" / "current" / f"{LOG_OF_LEDGER[ledger_id]}.log").read_bytes()
    found: dict[int, bytes] = {}
    pos = HEADER_SIZE
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        if size <= 0:
            break
        lid, eid = struct.unpack_from(">qq", data, pos + 4)
        assert lid == ledger_id
        found[eid] = data[pos + 4 + _DIGEST_HEADER : pos + 4 + size]
        pos += 4 + size
    assert sorted(found) == list(range(ENTRIES))
    return b"".join(found[e] for e in range(ENTRIES))


def test_readme_payload_checksums() -> None:
    # The README's digest of ``client.sh read``: sha256 over each entry's (entryId int64 BE,
    # payload length int32 BE, payload), in entry order, of the formula's payloads.
    for ledger_id in LEDGERS:
        digest = hashlib.sha256()
        for entry_id in range(ENTRIES):
            body = payload(ledger_id, entry_id)
            digest.update(struct.pack(">qi", entry_id, len(body)) + body)
        assert digest.hexdigest() == SHA256[ledger_id], ledger_id


def test_recorded_logs_hold_the_readme_formulas_payloads(tmp_path: Path) -> None:
    root = extract_bookie_data(tmp_path)
    for ledger_id in LEDGERS:
        expected = b"".join(payload(ledger_id, e) for e in range(ENTRIES))
        assert stored_payloads(root, ledger_id) == expected


# -- (a) bookiesim serves upstream's directories -------------------------------------------------


async def test_a_bookiesim_bookie_serves_upstreams_recorded_directories(tmp_path: Path) -> None:
    root = extract_bookie_data(tmp_path / "bd")
    cfg = recorded_config(root)
    # The recorded cookies name upstream's bookie and paths: ours would refuse them. This is
    # the operator's way to say the move is intended.
    recorded = read_dir_cookie(root / "ledgers" / "current")
    assert recorded is not None
    assert recorded.bookie_id == "127.0.0.1:35181"
    await update_cookies(cfg)
    async with running_bookie(cfg) as svc, bookie_client(svc, PASSWORD) as client:
        for ledger_id in LEDGERS:
            digest = DigestManager(ledger_id, PASSWORD)
            payloads = []
            for entry_id in range(ENTRIES):
                response = await client.read(ledger_id, entry_id)
                assert response.status == pb.EOK, (ledger_id, entry_id)
                entry = digest.verify(response.readResponse.body)
                assert entry.payload == payload(ledger_id, entry_id)
                assert entry.lac == -1  # 20 pipelined adds
                payloads.append(entry.payload)
            # Byte for byte what upstream stored (read from its entry log, not through us).
            assert b"".join(payloads) == stored_payloads(root, ledger_id)
            past_end = await client.read(ledger_id, ENTRIES)
            assert past_end.status == pb.ENOENTRY
        # Ledger 1 was recovered, so fenced; 0 and 2 were not.
        fenced = await client.add(1, ENTRIES, payload(1, ENTRIES), length=2100)
        assert fenced.status == pb.EFENCED
        for ledger_id in (0, 2):
            added = await client.add(ledger_id, ENTRIES, payload(ledger_id, ENTRIES), length=2100)
            assert added.status == pb.EOK, ledger_id


# -- (b) bookiesim's directories have upstream's shape -------------------------------------------


async def test_bookiesim_directories_have_upstreams_shape(tmp_path: Path) -> None:
    cfg = bookie_config(tmp_path, bookie_port=0)
    async with running_bookie(cfg) as svc, bookie_client(svc, PASSWORD) as client:
        for ledger_id in (0, 1, 0x1234):
            for entry_id in range(ENTRIES if ledger_id != 1 else 1100):
                response = await client.add(ledger_id, entry_id, payload(ledger_id, entry_id))
                assert response.status == pb.EOK
    assert svc.bookie.shutdown_errors == []

    journal = tmp_path / "journal" / "current"
    ledgers = tmp_path / "ledgers" / "current"
    # Cookies: upstream's text format, the same in both dirs, parseable as upstream's.
    assert cookie_dirs(cfg) == [journal, ledgers]
    texts = {(d / "VERSION").read_bytes() for d in (journal, ledgers)}
    assert len(texts) == 1
    (text,) = texts
    assert svc.address is not None
    assert text.startswith(f'5\nbookieHost: "{svc.address.bookie_id}"\njournalDir: "'.encode())
    assert Cookie.decode(text).ledger_dirs == f"1\t{tmp_path / 'ledgers'}"

    # Index files: <hex>/<hex>/<hex>.idx, header + whole 8 KiB pages.
    sizes = {lid: index_path(tmp_path / "ledgers", lid).stat().st_size for lid in (0, 1, 0x1234)}
    assert sizes == {
        0: HEADER_SIZE + PAGE_SIZE,
        1: HEADER_SIZE + 2 * PAGE_SIZE,  # 1100 entries: two pages
        0x1234: HEADER_SIZE + PAGE_SIZE,
    }
    assert index_path(tmp_path / "ledgers", 0x1234) == ledgers / "12" / "34" / "1234.idx"
    assert sorted(p.relative_to(ledgers).as_posix() for p in ledgers.rglob("*.idx")) == [
        "0/0/0.idx",
        "0/1/1.idx",
        "12/34/1234.idx",
    ]

    # lastMark: 16 bytes, long journal id + long offset, naming a journal file that exists.
    mark = (ledgers / "lastMark").read_bytes()
    assert len(mark) == 16
    file_id, offset = struct.unpack(">qq", mark)
    assert (journal / f"{file_id:x}.txn").is_file()
    assert offset >= 512

    # lastId: lower-case hex of the newest log id and a newline; every .log has a BKLO v1
    # header of 1024 bytes.
    last_id = (ledgers / "lastId").read_text()
    assert re.fullmatch(r"[0-9a-f]+\n", last_id)
    logs = sorted(ledgers.glob("*.log"))
    assert logs
    assert max(int(p.stem, 16) for p in logs) <= int(last_id, 16)
    for log in logs:
        head = log.read_bytes()[:8]
        if head:  # a preallocated log may still be empty, as upstream's 3.log
            assert head == b"BKLO" + struct.pack(">i", 1), log

    # Journal: <hex>.txn with the BKLG header of format version 6, 512 bytes.
    txns = sorted(journal.glob("*.txn"))
    assert txns
    for txn in txns:
        assert re.fullmatch(r"[0-9a-f]+\.txn", txn.name)
        assert txn.read_bytes()[:8] == b"BKLG" + struct.pack(">i", 6)


# -- (c) bookiesim shell agrees with upstream's shell ---------------------------------------------


_RECORD = re.compile(r"--------- Lid=(-?\d+), Eid=(-?\d+), ByteOffset=(\d+), EntrySize=(\d+) -+")


def upstream_sections() -> dict[str, list[str]]:
    """``bookieshell-outputs.txt`` split by its ``=== shell.sh DIR <command>`` lines."""
    sections: dict[str, list[str]] = {}
    current: list[str] = []
    for line in (disk_dir() / "bookieshell-outputs.txt").read_text().splitlines():
        if line.startswith("=== shell.sh DIR "):
            current = sections.setdefault(line.removeprefix("=== shell.sh DIR "), [])
        else:
            current.append(line)
    return sections


def upstream_records(lines: list[str]) -> list[dict[str, Any]]:
    """The records of a ``readlog``/``readjournal`` section: ids, offset, size and the
    ``Type``/``LastConfirmed``/``MasterKey``/``Fenced`` lines under each."""
    records: list[dict[str, Any]] = []
    for line in lines:
        header = _RECORD.fullmatch(line)
        if header:
            lid, eid, offset, size = map(int, header.groups())
            records.append({"ledgerId": lid, "entryId": eid, "offset": offset, "size": size})
        elif records and line.startswith("Type:"):
            records[-1]["type"] = line.split()[1]
        elif records and line.startswith("LastConfirmed:"):
            records[-1]["lastAddConfirmed"] = int(line.split()[1])
        elif records and line.startswith("MasterKey:"):
            records[-1]["masterKey"] = line.split()[1]
        elif records and line == "Fenced":
            records[-1]["fenced"] = True
    return records


def shell_json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["shell", *args, "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract_bookie_data(tmp_path_factory.mktemp("recorded"))


@pytest.mark.parametrize("log_id", [0, 1, 2])
def test_readlog_agrees_with_upstreams_readlog(
    recorded: Path, capsys: pytest.CaptureFixture[str], log_id: int
) -> None:
    expected = upstream_records(upstream_sections()[f"readlog {log_id}"])
    assert len(expected) == ENTRIES
    rows = shell_json(capsys, "readlog", str(recorded / "ledgers" / "current" / f"{log_id}.log"))
    entries = [r for r in rows if r["type"] == "entry"]
    ours = [
        {
            "ledgerId": r["ledgerId"],
            "entryId": r["entryId"],
            # Upstream prints where the record's size field is; we print the body's offset
            # (what the index stores), 4 bytes later.
            "offset": r["offset"] - 4,
            "size": r["size"],
            "type": "DATA",
            "lastAddConfirmed": r["lastAddConfirmed"],
        }
        for r in entries
    ]
    assert ours == expected
    assert rows[-1]["type"] == "summary"
    assert rows[-1]["entries"] == ENTRIES


def test_readjournal_agrees_with_upstreams_readjournal(
    recorded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    section = upstream_sections()[f"readjournal {JOURNAL_ID}"]
    assert "Journal Version : 6" in section
    expected = upstream_records(section)
    rows = shell_json(
        capsys, "readjournal", str(recorded / "journal" / "current" / f"{JOURNAL_ID:x}.txn")
    )
    ours: list[dict[str, Any]] = []
    for r in rows[:-1]:
        fact: dict[str, Any] = {
            "ledgerId": r["ledgerId"],
            "entryId": r["entryId"],
            "offset": r["offset"],
            "size": r["size"],
            "type": "DATA" if r["type"] == "data" else "META",
        }
        if r["type"] == "data":
            fact["lastAddConfirmed"] = r["lastAddConfirmed"]
        elif r["type"] == "masterKey":
            fact["masterKey"] = r["masterKey"]
        elif r["type"] == "fence":
            fact["fenced"] = True
        ours.append(fact)
    assert ours == expected
    assert len(expected) == 84  # 3 keys, 80 entries (ledger 1's twice), 1 fence
    assert rows[-1] == {
        "type": "summary",
        "version": 6,
        "records": 84,
        "endOffset": 17920,
        "torn": False,
        "tornOffset": None,
        # upstream's whole journal passes the torn-tail check: nothing of it is dropped
        "tornReason": None,
        "droppedRecords": 0,
        "tailChecked": True,
    }


def test_lastmark_agrees_with_upstreams_lastmark(
    recorded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (line,) = [x for x in upstream_sections()["lastmark"] if x.strip()]
    found = re.fullmatch(r"LastLogMark : Journal Id - (\d+)\((\w+\.txn)\), Pos - (\d+)", line)
    assert found is not None
    (row,) = shell_json(capsys, "lastmark", str(recorded / "ledgers"))
    assert (row["fileId"], row["journalFile"], row["offset"]) == (
        int(found[1]),
        found[2],
        int(found[3]),
    )


def upstream_ledger_index() -> dict[int, dict[str, Any]]:
    """``bookieshell-ledger-index.txt`` (``ledger -m L``): header facts and locations."""
    ledgers: dict[int, dict[str, Any]] = {}
    current: dict[str, Any] = {}
    for line in (disk_dir() / "bookieshell-ledger-index.txt").read_text().splitlines():
        if line.startswith("=== shell.sh DIR ledger -m "):
            current = ledgers.setdefault(int(line.rsplit(" ", 1)[1]), {"entries": {}})
        elif line.startswith("master key"):
            current["masterKey"] = line.split(":")[1].strip()
        elif line.startswith("isFenced"):
            current["fenced"] = line.split(":")[1].strip() == "true"
        elif line.startswith("size "):
            current["size"] = int(line.split(":")[1])
        elif m := re.fullmatch(r"entry (\d+)\t:\t\(log:(\d+), pos: (\d+)\)", line):
            current["entries"][int(m[1])] = (int(m[2]), int(m[3]))
    return ledgers


def test_readindex_agrees_with_upstreams_ledger_command(
    recorded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = upstream_ledger_index()
    assert sorted(expected) == list(LEDGERS)
    for ledger_id, facts in expected.items():
        path = index_path(recorded / "ledgers", ledger_id)
        # Upstream's "size" is the bytes of locations after the header: whole pages.
        assert path.stat().st_size - HEADER_SIZE == facts["size"] == PAGE_SIZE
        rows = shell_json(capsys, "readindex", str(path))
        header = rows[0]
        assert header["type"] == "header"
        assert header["masterKey"] == facts["masterKey"] == MASTER_KEY
        assert header["fenced"] == facts["fenced"] == (ledger_id == 1)
        entries = {r["entryId"]: (r["logId"], r["offset"]) for r in rows if r["type"] == "entry"}
        assert entries == facts["entries"]
        assert len(entries) == ENTRIES
