"""``bookiesim shell recover`` and ``decommissionbookie`` against a real cluster.

Why: these move data and rewrite ledger metadata by hand; each must do exactly what it says
(query and dry run change nothing, open ledgers skipped or fenced as asked, every entry of a
recovered ledger readable without the lost bookie, a decommissioned bookie named by nothing
and its cookie gone) and refuse what would be a mistake (a bookie still running, no
auditor, no confirmation) with one line. The cluster is four in-process bookies in a
background trio run (auto-recovery beside each for ``decommissionbookie``); the commands
run in this thread as a user would run them, through ``main``.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

import pytest

from bookiesim.autorecovery.config import AutoRecoveryConfig
from bookiesim.cli.main import main
from bookiesim.client import BookKeeper
from bookiesim.cluster.in_process import LocalCluster, TrioThread, running_cluster
from bookiesim.metadata.cookies import cookie_node
from bookiesim.metadata.ledgers import LedgerManager

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

ENTRIES = 20
FAST = AutoRecoveryConfig(
    lost_bookie_recovery_delay=0.0,
    open_ledger_rereplication_grace_period=0.2,
    lock_release_of_failed_ledger_grace_period=0.5,
    rw_rereplicate_backoff=0.1,
)


class Cluster:
    def __init__(self, root: Path, autorecovery: AutoRecoveryConfig | None) -> None:
        self.driver = TrioThread()
        self.cluster: LocalCluster = self.driver.start(
            lambda: running_cluster(root, 4, autorecovery=autorecovery)
        )

    def run(self, fn: Any, *args: object) -> Any:
        return self.driver.run(fn, *args)

    def write_ledgers(self, closed: int, open_: int) -> list[int]:
        """``closed`` closed ledgers and ``open_`` open ones, ENTRIES each, E=3 Qw=2 Qa=2."""

        async def write() -> list[int]:
            ids = []
            async with BookKeeper(self.cluster.store) as bk:
                for n in range(closed + open_):
                    lh = await bk.create_ledger(3, 2, 2, password=b"pw")
                    for i in range(ENTRIES):
                        await lh.add_entry(f"ledger {lh.ledger_id} entry {i}".encode())
                    if n < closed:
                        await lh.close()
                    else:
                        await lh.write_lac()
                    ids.append(lh.ledger_id)
            return ids

        ids: list[int] = self.run(write)
        return ids

    def ensembles(self, ledger_id: int) -> list[tuple[str, ...]]:
        async def read() -> list[tuple[str, ...]]:
            metadata, _ = await LedgerManager(self.cluster.store).read(ledger_id)
            return [tuple(b) for b in metadata.ensembles.values()]

        ensembles: list[tuple[str, ...]] = self.run(read)
        return ensembles

    def read_all(self, ledger_id: int) -> list[bytes]:
        async def read() -> list[bytes]:
            async with BookKeeper(self.cluster.store) as bk:
                handle = await bk.open_ledger(ledger_id)
                entries = await handle.read_entries(0, handle.last_add_confirmed)
                return [e.payload for e in entries]

        payloads: list[bytes] = self.run(read)
        return payloads

    def victim(self, ledger_ids: list[int]) -> str:
        """The bookie of the last ledger's ensemble that the most of the ledgers name."""
        ensembles = [set(self.ensembles(lid)[0]) for lid in ledger_ids]
        return max(sorted(ensembles[-1]), key=lambda b: sum(b in e for e in ensembles))


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "c", None)
    try:
        yield c
    finally:
        c.driver.stop()


@pytest.fixture
def healing(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "c", FAST)
    try:
        yield c
    finally:
        c.driver.stop()


def shell(
    capsys: pytest.CaptureFixture[str], c: Cluster, *args: str, code: int = 0
) -> tuple[str, str]:
    capsys.readouterr()
    assert main(["shell", args[0], "--metadata", c.cluster.uri, *args[1:]]) == code
    captured = capsys.readouterr()
    return captured.out, captured.err


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_recover_query_dry_run_skip_open_then_fence(
    plain: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = plain.write_ledgers(closed=3, open_=1)
    lost = plain.victim(ids)
    naming = [lid for lid in ids if any(lost in e for e in plain.ensembles(lid))]
    _, err = shell(capsys, plain, "recover", lost, "-f", code=1)
    assert "is registered (running): recover only a bookie that is gone" in err
    plain.run(plain.cluster.stop_bookie, lost)
    before = {lid: plain.ensembles(lid) for lid in ids}

    out, _ = shell(capsys, plain, "recover", lost, "-q", "--json")
    listed = json_lines(out)
    assert [o["ledgerId"] for o in listed[:-1]] == naming
    assert listed[-1] == {"type": "summary", "bookies": [lost], "ledgers": len(naming)}
    out, _ = shell(capsys, plain, "recover", lost, "-query")
    assert f"{lost}*" in out

    out, _ = shell(capsys, plain, "recover", lost, "-dr", "--json")
    planned = json_lines(out)
    assert {o["outcome"] for o in planned[:-1]} == {"planned"}
    for o in planned[:-1]:
        for step in o["plan"]:
            assert lost in step["before"]
            assert lost not in step["after"]
    assert planned[-1]["dryRun"] is True
    assert {lid: plain.ensembles(lid) for lid in ids} == before  # a dry run changes nothing

    _, err = shell(capsys, plain, "recover", lost, code=2)  # stdin is not a terminal here
    assert err == (
        "bookiesim shell recover: recover changes ledger metadata: add -f to run it "
        "without a prompt\n"
    )

    out, _ = shell(capsys, plain, "recover", lost, "-f", "-sk", "--json")
    done = {o["ledgerId"]: o for o in json_lines(out)[:-1]}
    open_id = ids[-1]
    assert open_id in naming
    assert done[open_id]["outcome"] == "skipped"
    for lid in naming:
        if lid == open_id:
            continue
        assert done[lid]["outcome"] == "recovered"
        assert done[lid]["entries"] > 0
        assert set(done[lid]["writeCloses"]) == {"ok"}  # BP-32: the replacement seals its log
        assert not any(lost in e for e in plain.ensembles(lid))
        assert plain.read_all(lid) == [f"ledger {lid} entry {i}".encode() for i in range(ENTRIES)]

    out, _ = shell(capsys, plain, "recover", lost, "-f", "-sk")  # only the open one is left
    assert [line.split()[:3] for line in out.splitlines()[2:-1]] == [
        [str(open_id), "OPEN", "skipped"]
    ]
    assert out.splitlines()[-1] == "Recovered: skipped 1; 0 entries, 0 bytes copied"
    out, _ = shell(capsys, plain, "recover", lost, "-force", "-l", str(open_id), "--json")
    (fenced, summary) = json_lines(out)
    assert (fenced["outcome"], fenced["fenced"], fenced["state"]) == ("recovered", True, "OPEN")
    assert summary["recovered"] == 1
    assert not any(lost in e for e in plain.ensembles(open_id))
    payloads = plain.read_all(open_id)
    assert payloads == [f"ledger {open_id} entry {i}".encode() for i in range(ENTRIES)]
    out, _ = shell(capsys, plain, "recover", lost, "-q")
    assert out == f"0 ledger(s) name {lost} (marked '*')\n"


def test_recover_and_decommission_refuse_bad_input(
    plain: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    _, err = shell(capsys, plain, "recover", "no such bookie", "-f", code=1)
    assert (
        err == "bookiesim shell recover: not a bookie id: 'no such bookie' (expected host:port)\n"
    )
    running = plain.cluster.running_ids()[0]
    _, err = shell(capsys, plain, "decommissionbookie", "-bookieid", running, code=1)
    assert f"bookie {running} is still registered" in err
    plain.run(plain.cluster.stop_bookie, running)
    _, err = shell(capsys, plain, "decommissionbookie", "-bookieid", running, code=1)
    assert "no auditor elected" in err  # nobody would re-replicate: refuse, do not hang
    _, err = shell(capsys, plain, "decommissionbookie", code=2)
    assert "which bookie? -bookieid HOST:PORT" in err


def test_decommission_waits_for_the_workers_then_deletes_the_cookie(
    healing: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = healing.write_ledgers(closed=3, open_=1)
    lost = healing.victim(ids)
    node = cookie_node(healing.cluster.store.ledgers_root, lost)
    store = healing.cluster.store
    healing.run(functools.partial(store.create, node, b"cookie", make_parents=True))
    healing.run(healing.cluster.stop_bookie, lost)

    out, _ = shell(capsys, healing, "decommissionbookie", "-bookieid", lost, "--wait-timeout", "60")
    assert out == (
        f"The ledgers stored in the given decommissioning bookie: {lost} are properly "
        f"replicated\nCookie of the decommissioned bookie: {lost} is deleted successfully\n"
    )
    assert healing.run(healing.cluster.store.get, node) is None
    for lid in ids:
        assert not any(lost in e for e in healing.ensembles(lid))
    out, _ = shell(capsys, healing, "listunderreplicated", "-c", "-mr", lost)
    assert out == "Under replicated ledger count: 0\n"
    out, _ = shell(capsys, healing, "decommissionbookie", "--bookieid", lost, "--json")
    assert json.loads(out) == {"bookieId": lost, "replicated": True, "cookieDeleted": False}
