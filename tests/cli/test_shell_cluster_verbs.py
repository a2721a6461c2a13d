"""``bookiesim shell`` verbs that act on a cluster, as upstream's ``bookkeeper shell`` names
them: listbookies, bookieinfo, listledgers, ledgermetadata, readledger, simpletest,
bookiesanity, listfilesondisc, and readlog by log id.

Why: operators type upstream's verbs and options and parse upstream's lines. Each verb runs
here against a real local cluster (three ``bookiesim bookie`` processes, ``cluster up``),
given by a ``bk_server.conf`` of upstream's keys (``-conf``, before or after the verb) or by
``--cluster``, and prints upstream's line shapes (``tests/interop/test_live_shell_verbs.py``
holds them against upstream's own shell). Bad input is one line and exit 2; a cluster that
cannot be reached one line and exit 1.
"""

from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.adminapi.bookie_info import readable as readable_size
from bookiesim.cli.client_actions import generated_payload
from bookiesim.cli.main import main
from bookiesim.cli.shell.client_checks import java_random_letters
from bookiesim.cli.shell.metadata_text import metadata_line, stores_entries
from bookiesim.cli.shell.pretty_hex import pretty_hex_dump
from bookiesim.metadata.ledgers import DigestType, LedgerMetadata, LedgerState

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow

BOOKIE_LINE = re.compile(r"BookieID:(\S+), IP:(\S+), Port:(\d+), Hostname:(\S+)")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("shell-verbs") / "cluster"
    assert main(["cluster", "up", "--dir", str(root), "--json"]) == 0
    try:
        yield root
    finally:
        main(["cluster", "down", "--dir", str(root)])


def _state(cluster: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((cluster / "cluster.json").read_text())
    return state


@pytest.fixture(scope="module")
def conf(cluster: Path) -> Path:
    """Bookie 1's configuration in upstream's keys, the metadata in the legacy form's place
    (metadataServiceUri: SQLite has no zkServers form)."""
    state = _state(cluster)
    first = state["bookies"][0]
    path = cluster / "bookie-1.conf"
    path.write_text(
        f"metadataServiceUri={state['metadata']}\n"
        f"bookiePort={first['bookiePort']}\n"
        "advertisedAddress=127.0.0.1\n"
        f"journalDirectories={first['dir']}/journal\n"
        f"ledgerDirectories={first['dir']}/ledgers\n"
        "ledgerStorageClass=org.apache.bookkeeper.bookie.SortedLedgerStorage\n"
        "useHostNameAsBookieID=false\n"
    )
    return path


def shell(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> tuple[list[str], str]:
    capsys.readouterr()
    assert main(["shell", *args]) == code, capsys.readouterr()
    captured = capsys.readouterr()
    return captured.out.splitlines(), captured.err


def ledger(capsys: pytest.CaptureFixture[str], cluster: Path, *args: str) -> str:
    capsys.readouterr()
    assert main(["ledger", *args, "--cluster", str(cluster)]) == 0
    return capsys.readouterr().out


def test_listbookies_prints_upstreams_lines(
    cluster: Path, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = sorted(b["bookieId"] for b in _state(cluster)["bookies"])
    out, _ = shell(capsys, "-conf", str(conf), "listbookies", "-rw")
    assert out[0] == "ReadWrite Bookies :"
    rows = [BOOKIE_LINE.fullmatch(line) for line in out[1:]]
    assert all(rows), out
    assert [m[1] for m in rows if m] == ids
    for m in rows:
        assert m is not None
        assert m[2] == "127.0.0.1"
        assert m[1] == f"127.0.0.1:{m[3]}"
    out, _ = shell(capsys, "listbookies", "-a", "-h", "--cluster", str(cluster))
    assert out[0] == "All Bookies :"
    assert len(out) == 4
    out, _ = shell(capsys, "listbookies", "-ro", "-conf", str(conf))
    assert out == ["No bookie exists!"]
    _, err = shell(capsys, "listbookies", "-rw", "-ro", "-conf", str(conf), code=2)
    assert err.count("\n") == 1
    assert "one and only one" in err


def test_bookieinfo_reports_each_bookies_disk(
    cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = shell(capsys, "bookieinfo", "--cluster", str(cluster))
    assert out[0] == "Free disk space info:"
    line = re.compile(BOOKIE_LINE.pattern + r": \tFree: (\d+)(\(\S+\))?\tTotal: (\d+)(\(\S+\))?")
    rows = [line.fullmatch(text) for text in out[1:4]]
    assert all(rows), out
    free = sum(int(m[5]) for m in rows if m)
    total = sum(int(m[7]) for m in rows if m)
    assert 0 < free <= total
    assert out[4] == f"Total free disk space in the cluster:\t{free}{readable_size(free)}"
    assert out[5] == f"Total disk capacity in the cluster:\t{total}{readable_size(total)}"


def test_ledger_verbs_list_show_and_read(
    cluster: Path, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    closed = int(ledger(capsys, cluster, "create", "--meta", "owner=ops").split()[0])
    ledger(capsys, cluster, "write", str(closed), "--count", "5", "--size", "10")
    ledger(capsys, cluster, "close", str(closed))
    out, _ = shell(capsys, "listledgers", "-conf", str(conf))
    assert f"ledgerID: {closed}" in out
    out, _ = shell(capsys, "ledgermetadata", "-l", str(closed), "-conf", str(conf))
    assert out[0] == f"ledgerID: {closed}"
    assert re.fullmatch(
        r"LedgerMetadata\{formatVersion=3, ensembleSize=3, writeQuorumSize=2, "
        r"ackQuorumSize=2, state=CLOSED, length=50, lastEntryId=4, digestType=CRC32C, "
        r"password=base64:, ensembles=\{0=\[[\d.:]+, [\d.:]+, [\d.:]+\]\}, "
        r"customMetadata=\{owner=base64:b3Bz\}\}",
        out[1],
    ), out
    meta, _ = shell(capsys, "listledgers", "-m", "-conf", str(conf))
    assert meta[meta.index(f"ledgerID: {closed}") + 1] == out[1]

    out, _ = shell(capsys, "readledger", "-l", str(closed), "-fe", "1", "-le", "2", "-m",
                   "-conf", str(conf))  # fmt: skip
    assert out[0] == f"--------- Lid={closed}, Eid=1, EntrySize=20 ---------"
    assert out[1] == generated_payload(closed, 1, 10).decode()
    assert out[2] == f"--------- Lid={closed}, Eid=2, EntrySize=30 ---------"
    assert len(out) == 4
    out, _ = shell(capsys, "readledger", "-l", str(closed), "--cluster", str(cluster))
    assert [re.sub(r"Eid=(\d+).*", r"\1", line) for line in out] == [
        f"--------- Lid={closed}, {e}" for e in range(5)
    ]

    bookie = _state(cluster)["bookies"][0]["bookieId"]
    out, _ = shell(capsys, "listledgers", "-bookieid", bookie, "-conf", str(conf))
    holds = f"ledgerID: {closed}" in out
    assert holds  # E=3, Qw=2: every bookie of the ensemble holds some of 5 entries


def test_ledgermetadata_dumps_and_restores(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger_id = int(ledger(capsys, cluster, "create", "-e", "2", "-w", "2", "-a", "1").split()[0])
    dump = tmp_path / "md.bin"
    where = ["--cluster", str(cluster)]
    shell(capsys, "ledgermetadata", "-l", str(ledger_id), "-dumptofile", str(dump), *where)
    original = LedgerMetadata.from_bytes(dump.read_bytes())
    restored = ledger_id + 1000
    shell(capsys, "ledgermetadata", "-l", str(restored), "-restorefromfile", str(dump), *where)
    out, _ = shell(capsys, "ledgermetadata", "-l", str(restored), *where)
    assert out[1] == metadata_line(original)
    _, err = shell(capsys, "ledgermetadata", "-l", str(restored), "-restorefromfile", str(dump),
                   *where, code=1)  # fmt: skip
    assert "-update" in err
    out, _ = shell(capsys, "ledgermetadata", "-l", str(restored), "-restorefromfile", str(dump),
                   "-update", *where)  # fmt: skip
    assert out == [f"successsfully updated ledger metadata {restored}"]


def test_simpletest_and_bookiesanity_write_read_and_clean_up(
    cluster: Path, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before, _ = shell(capsys, "listledgers", "--cluster", str(cluster))
    out, _ = shell(capsys, "simpletest", "-e", "3", "-w", "2", "-a", "2", "-n", "200",
                   "--cluster", str(cluster))  # fmt: skip
    ledger_id = int(out[0].removeprefix("Ledger ID: "))
    assert out[-1] == f"200 entries written to ledger {ledger_id}. Last entry Id 199"
    out, _ = shell(capsys, "-conf", str(conf), "bookiesanity", "-e", "7")
    sanity = int(out[0].removeprefix("Read 7 entries from ledger "))
    assert out == [f"Read 7 entries from ledger {sanity}", "Bookie sanity test succeeded"]
    after, _ = shell(capsys, "listledgers", "--cluster", str(cluster))
    assert after == before  # both deleted their ledger
    _, err = shell(capsys, "bookiesanity", "--cluster", str(cluster), code=2)
    assert "-conf" in err
    _, err = shell(capsys, "simpletest", "-e", "2", "-w", "3", "--cluster", str(cluster), code=2)
    assert "need -e >= -w >= -a" in err


def test_listfilesondisc_and_readlog_by_id(
    cluster: Path, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = shell(capsys, "listfilesondisc", "-txn", "-log", "-idx", "-conf", str(conf))
    heads = [i for i, line in enumerate(out) if line.startswith("---------")]
    assert [out[i] for i in heads] == [
        "--------- Printing the list of Journal Files ---------",
        "--------- Printing the list of EntryLog/Ledger Files ---------",
        "--------- Printing the list of Index Files ---------",
    ]
    journals = out[heads[0] + 1 : heads[1] - 1]
    logs = out[heads[1] + 1 : heads[2] - 1]
    assert journals
    assert all(p.endswith(".txn") and "/bookie-1/journal/" in p for p in journals)
    assert logs
    assert all(p.endswith(".log") and "/bookie-1/ledgers/current/" in p for p in logs)
    assert all(p.endswith(".idx") for p in out[heads[2] + 1 :])
    assert out[heads[1] - 1] == ""
    assert out[heads[2] - 1] == ""
    # Without a kind, upstream prints nothing; a line on stderr says why.
    out, err = shell(capsys, "listfilesondisc", "-conf", str(conf))
    assert out == []
    assert err == "listfilesondisc: nothing asked for: give -txn, -log and/or -idx\n"

    written = sorted(logs, key=lambda p: p.rsplit("/", 1)[1])[0]
    log_id = int(written.rsplit("/", 1)[1].removesuffix(".log"), 16)
    by_path, _ = shell(capsys, "readlog", written, "--json")
    by_id, _ = shell(capsys, "-conf", str(conf), "readlog", str(log_id), "--json")
    assert by_id == by_path
    _, err = shell(capsys, "readlog", str(log_id), code=2)
    assert err.count("\n") == 1
    assert "-conf" in err
    _, err = shell(capsys, "readlog", "999999", "-conf", str(conf), code=2)
    assert "in none of the ledger directories" in err


def test_an_unreachable_cluster_or_bad_conf_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    _, err = shell(capsys, "listledgers", "--metadata", missing, code=1)
    assert err.count("\n") == 1
    assert "no BookKeeper cluster" in err
    zk = tmp_path / "zk.conf"
    zk.write_text("zkServers=127.0.0.1:1\nzkTimeout=1000\n")
    _, err = shell(capsys, "listbookies", "-rw", "-conf", str(zk), code=1)
    assert err.count("\n") == 1
    assert "127.0.0.1:1" in err
    bad = tmp_path / "bad.conf"
    bad.write_text("bookiePortt=3181\n")
    _, err = shell(capsys, "listledgers", "-conf", str(bad), code=2)
    assert err.count("\n") == 1
    assert "bookiePort" in err
    _, err = shell(capsys, "listledgers", code=2)
    assert "-conf FILE, --metadata URI or --cluster DIR" in err
    _, err = shell(capsys, "readledger", "-l", "x", "--metadata", missing, code=2)
    assert "not a ledger id" in err


# -- the pure parts -----------------------------------------------------------------------


def test_java_random_letters_are_upstreams_test_body() -> None:
    # java.util.Random(0), nextInt(26) + 'A', as printed by a JVM.
    assert java_random_letters(100).decode() == (
        "SSXVNJHPDQDXVCRASTVYBCWVMGNYKRXVZXKGXTSPSJDGYLUEGQFLAQLOCFLJBEPOWFNSOMYARHAOPUFOJHH"
        "DXEHXJBHWGSMZJGNL"
    )


def test_readable_size_cuts_three_decimals() -> None:
    assert readable_size(999) == ""
    assert readable_size(1000) == "(1KB)"
    assert readable_size(69011886080) == "(69.011GB)"
    assert readable_size(1_999_999) == "(1.999MB)"
    assert readable_size(5 * 10**15) == "(5000TB)"


def test_pretty_hex_dump_shape() -> None:
    dump = pretty_hex_dump(b"ledger 2 entry 0\x00\xff").splitlines()
    assert dump[1] == "         |  0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f |"
    row = "|00000000| 6c 65 64 67 65 72 20 32 20 65 6e 74 72 79 20 30 |ledger 2 entry 0|"
    assert dump[3] == row
    assert dump[4] == "|00000010| 00 ff" + " " * 42 + " |.." + " " * 14 + "|"
    assert dump[5] == dump[2]


@given(
    size=st.integers(1, 6),
    data=st.data(),
)
def test_stores_entries_agrees_with_the_round_robin_write_sets(size: int, data: Any) -> None:
    write_quorum = data.draw(st.integers(1, size))
    last = data.draw(st.integers(-1, 12))
    bookies = [f"b{i}:1" for i in range(size)]
    closed = data.draw(st.booleans())
    metadata = LedgerMetadata(
        ensemble_size=size,
        write_quorum_size=write_quorum,
        ack_quorum_size=1,
        ensembles={0: tuple(bookies)},
        state=LedgerState.CLOSED if closed else LedgerState.OPEN,
        last_entry_id=last if closed else -1,
        length=0,
        digest_type=DigestType.CRC32C,
    )
    for position, bookie in enumerate(bookies):
        holds = any((position - e) % size < write_quorum for e in range(last + 1))
        expected = holds if closed else True
        assert stores_entries(metadata, bookie) == expected
    assert not stores_entries(metadata, "other:1")


def _ledger_blocks(
    capsys: pytest.CaptureFixture[str], conf: Path, ledger_id: int
) -> tuple[list[str], int]:
    """``readlog --upstream-output -l`` of the first of the bookie's logs that holds the
    ledger's entries, and its id; nothing found: ``[]``."""
    listed, _ = shell(capsys, "listfilesondisc", "-log", "-conf", str(conf))
    for path in listed[1:]:
        if not path:
            continue
        log_id = int(path.rsplit("/", 1)[1].removesuffix(".log"), 16)
        out, _ = shell(capsys, "-conf", str(conf), "readlog", str(log_id), "--upstream-output",
                       "-l", str(ledger_id))  # fmt: skip
        assert out[0] == f"Scan entry log {log_id} ({log_id:x}.log) for LedgerId {ledger_id} "
        if len(out) > 2:
            return out, log_id
    return [], -1


def test_readlog_upstream_output_blocks(
    cluster: Path, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bookie = _state(cluster)["bookies"][0]["bookieId"]
    written = int(ledger(capsys, cluster, "create", "-e", "3", "-w", "3", "-a", "3").split()[0])
    ledger(capsys, cluster, "write", str(written), "--count", "3", "--size", "30")
    found, _ = shell(capsys, "listledgers", "-bookieid", bookie, "-conf", str(conf))
    assert f"ledgerID: {written}" in found
    # The entries reach an entry log at the bookie's next flush (flushInterval, 10 s here).
    blocks, log_id = _ledger_blocks(capsys, conf, written)
    deadline = time.monotonic() + 30
    while not blocks and time.monotonic() < deadline:
        time.sleep(1)
        blocks, log_id = _ledger_blocks(capsys, conf, written)
    assert blocks, "the bookie did not flush the ledger to an entry log in 30 s"
    header = re.compile(
        rf"--------- Lid={written}, Eid=(\d+), ByteOffset=(\d+), EntrySize=(\d+) -{{9}}"
    )
    heads = [header.fullmatch(line) for line in blocks[1::4]]
    assert all(heads), blocks
    assert [int(m[1]) for m in heads if m] == [0, 1, 2]
    assert all(line == "Type:           DATA" for line in blocks[2::4])
    assert all(line.startswith("LastConfirmed:  ") for line in blocks[3::4])
    first = heads[0]
    assert first is not None
    offset = int(first[2])
    out, _ = shell(capsys, "-conf", str(conf), "readlog", str(log_id), "--upstream-output",
                   "-sp", str(offset), "-ep", str(offset))  # fmt: skip
    assert out[1] == blocks[1]
    _, err = shell(capsys, "-conf", str(conf), "readlog", str(log_id), "-sp", "5", code=2)
    assert "--upstream-output" in err
