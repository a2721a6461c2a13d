"""A local cluster a user can live with: ``cluster down`` then ``up`` brings back the same
bookies with their data, one bookie stops, starts and is killed and comes back as itself, an
interrupted or refused ``up`` leaves a directory the next one resumes, and every cookie names
the id its bookie registers with — the journeys of ``bookiesim cluster``, with real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

from bookiesim.bookie.cookie_check import read_dir_cookie, write_dir_cookie
from bookiesim.cli.main import main
from bookiesim.cluster.processes import pid_alive
from bookiesim.metadata import open_store
from bookiesim.metadata.cookies import Cookie
from bookiesim.pipeline.inputs import find_logs

if TYPE_CHECKING:
    from collections.abc import Iterator

    from bookiesim.metadata.testing import ZooKeeperServer

FAST = ["--no-autorecovery", "--set", "flushInterval=500"]


def cli(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> str:
    capsys.readouterr()
    assert main(list(args)) == code, args
    return capsys.readouterr().out


def state_of(root: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((root / "cluster.json").read_text())
    return doc


def ids_of(root: Path) -> dict[str, str]:
    return {b["name"]: b["bookieId"] for b in state_of(root)["bookies"]}


def states(capsys: pytest.CaptureFixture[str], root: Path) -> dict[str, str]:
    doc = json.loads(cli(capsys, "cluster", "status", "--dir", str(root), "--json"))
    return {row["name"]: row["state"] for row in doc["bookies"]}


def write_ledger(
    capsys: pytest.CaptureFixture[str], root: Path, count: int, ensemble: int = 3
) -> int:
    where = ("--cluster", str(root))
    e = str(ensemble)
    out = cli(capsys, "ledger", "create", "-e", e, "-w", "2", "-a", "2", "--json", *where)
    ledger_id: int = json.loads(out)["ledgerId"]
    cli(capsys, "ledger", "write", str(ledger_id), "--count", str(count), "--json", *where)
    cli(capsys, "ledger", "close", str(ledger_id), *where)
    return ledger_id


def read_ledger(capsys: pytest.CaptureFixture[str], root: Path, ledger_id: int) -> list[int]:
    out = cli(capsys, "ledger", "read", str(ledger_id), "--json", "--cluster", str(root))
    return [json.loads(line)["entryId"] for line in out.splitlines() if line.strip()]


async def store_cookies(uri: str) -> dict[str, bytes]:
    async with open_store(uri) as store:
        base = f"{store.ledgers_root}/cookies"
        out = {}
        for name in await store.children(base):
            node = await store.get(f"{base}/{name}")
            assert node is not None
            out[name] = node.value
        return out


def assert_cookies_name_the_ids(root: Path) -> None:
    """Each bookie's cookie — in its dirs and in the store — names the id it registered."""
    state = state_of(root)
    in_store = trio.run(store_cookies, state["metadata"])
    for bookie in state["bookies"]:
        for sub in ("journal", "ledgers"):
            data = (Path(bookie["dir"]) / sub / "current" / "VERSION").read_bytes()
            assert Cookie.decode(data).bookie_id == bookie["bookieId"]
            assert in_store[bookie["bookieId"]] == data
    assert sorted(in_store) == sorted(b["bookieId"] for b in state["bookies"])


@pytest.fixture
def cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[Path]:
    root = tmp_path / "c"
    cli(capsys, "cluster", "up", "--dir", str(root), *FAST)
    try:
        yield root
    finally:
        main(["cluster", "down", "--dir", str(root)])


def test_down_then_up_brings_back_the_same_bookies_with_their_data(
    cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = cluster
    ids = ids_of(root)
    assert len(set(ids.values())) == 3
    assert_cookies_name_the_ids(root)
    ledger = write_ledger(capsys, root, 30)
    # The pipeline names each bookie's logs by the id in its cookie, as the metadata does.
    found = find_logs([str(root)])
    assert {f.bookie for f in [*found.files, *found.empty]} <= set(ids.values())

    out = cli(capsys, "cluster", "down", "--dir", str(root))
    assert out.splitlines() == [f"bookie-{n}: stopped" for n in (1, 2, 3)]
    assert set(states(capsys, root).values()) == {"stopped"}
    cli(capsys, "cluster", "up", "--dir", str(root))
    assert ids_of(root) == ids
    assert set(states(capsys, root).values()) == {"running"}
    assert read_ledger(capsys, root, ledger) == list(range(30))
    assert read_ledger(capsys, root, write_ledger(capsys, root, 5)) == list(range(5))
    assert_cookies_name_the_ids(root)

    # What contradicts the cluster is refused in one line, exit 2; what it is already, 0.
    other = f"sqlite:///{root}/other.db"
    out = cli(capsys, "cluster", "up", "--dir", str(root), "--metadata", other, code=2)
    assert out.count("\n") == 1
    assert "keeps its metadata in" in out
    out = cli(capsys, "cluster", "up", "--dir", str(root), "--bookies", "2", code=2)
    assert "has 3 bookies" in out
    out = cli(capsys, "cluster", "up", "--dir", str(root))
    assert "already runs; nothing started" in out
    assert "no bookie 'bookie-9'" in cli(
        capsys, "cluster", "stop", "bookie-9", "--dir", str(root), code=2
    )

    # A cluster.json of the previous version, whose cookies named port 0: still opens.
    cli(capsys, "cluster", "down", "--dir", str(root))
    previous = state_of(root)
    for bookie in previous["bookies"]:
        for key in ("expected", "log"):
            del bookie[key]
        for sub in ("journal", "ledgers"):
            current = Path(bookie["dir"]) / sub / "current"
            cookie = read_dir_cookie(current)
            assert cookie is not None
            write_dir_cookie(current, Cookie(**{**cookie.__dict__, "bookie_id": "127.0.0.1:0"}))
    del previous["format"]
    (root / "cluster.json").write_text(json.dumps(previous))
    trio.run(_delete_store_cookies, previous["metadata"])
    cli(capsys, "cluster", "up", "--dir", str(root))
    assert ids_of(root) == ids
    assert read_ledger(capsys, root, ledger) == list(range(30))
    assert_cookies_name_the_ids(root)


async def _delete_store_cookies(uri: str) -> None:
    async with open_store(uri) as store:
        base = f"{store.ledgers_root}/cookies"
        for name in await store.children(base):
            await store.delete(f"{base}/{name}")


def test_one_bookie_stops_starts_and_is_killed_and_comes_back_as_itself(
    cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = cluster
    ids = ids_of(root)
    ledger = write_ledger(capsys, root, 20)
    d = ("--dir", str(root))

    out = cli(capsys, "cluster", "stop", "bookie-1", *d)
    assert out == f"bookie-1 ({ids['bookie-1']}): stopped\n"
    assert states(capsys, root) == {
        "bookie-1": "stopped",
        "bookie-2": "running",
        "bookie-3": "running",
    }
    assert cli(capsys, "cluster", "stop", "1", *d) == "bookie-1: not running (stopped)\n"
    assert read_ledger(capsys, root, ledger) == list(range(20))  # from the other replicas
    out = cli(capsys, "cluster", "start", "1", *d)
    assert out.startswith(f"bookie-1 ({ids['bookie-1']}): running, pid ")
    assert "already running" in cli(capsys, "cluster", "start", "bookie-1", *d)

    # Killed by its id: a crash, no final checkpoint; it comes back as itself at once.
    out = cli(capsys, "cluster", "kill", ids["bookie-2"], *d)
    assert out == f"bookie-2 ({ids['bookie-2']}): killed (SIGKILL)\n"
    assert states(capsys, root)["bookie-2"] == "killed"
    started = time.monotonic()
    cli(capsys, "cluster", "start", "bookie-2", *d)
    assert time.monotonic() - started < 8  # its stale registration did not hold it back
    assert ids_of(root) == ids
    assert set(states(capsys, root).values()) == {"running"}
    assert read_ledger(capsys, root, ledger) == list(range(20))
    # With bookie-3 down, every entry is read from bookie-1 and bookie-2 alone.
    cli(capsys, "cluster", "stop", "bookie-3", *d)
    assert read_ledger(capsys, root, ledger) == list(range(20))
    assert read_ledger(capsys, root, write_ledger(capsys, root, 3, ensemble=2)) == [0, 1, 2]
    # `up` brings back the one left down, and only that one.
    before = {b["name"]: b["pid"] for b in state_of(root)["bookies"]}
    cli(capsys, "cluster", "up", *d)
    after = {b["name"]: b["pid"] for b in state_of(root)["bookies"]}
    assert [n for n in after if after[n] != before[n]] == ["bookie-3"]
    assert ids_of(root) == ids


def test_an_interrupted_or_refused_up_is_resumed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "c"
    d = ("--dir", str(root))
    # A bad --set is refused before anything starts or is written.
    out = cli(capsys, "cluster", "up", *d, "--set", "noSuchKey=1", code=2)
    assert out.count("\n") == 1
    assert "noSuchKey" in out
    assert not (root / "cluster.json").exists()

    # Ctrl-C while the bookies start: one line of what was done, exit 130.
    up = subprocess.Popen(
        [sys.executable, "-m", "bookiesim", "cluster", "up", *d, *FAST],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not _some_pid(root):
            assert time.monotonic() < deadline, "cluster up recorded no bookie"
            time.sleep(0.02)
        up.send_signal(signal.SIGINT)
        out, err = up.communicate(timeout=60)
        assert up.returncode == 130, (out, err)
        assert "Traceback" not in out + err
        assert out.startswith("cluster up: interrupted: ")
        assert f"`bookiesim cluster up --dir {root}` goes on" in out
        recorded = ids_of(root)

        cli(capsys, "cluster", "up", *d)
        assert set(states(capsys, root).values()) == {"running"}
        assert {n: i for n, i in ids_of(root).items() if recorded[n]} == {
            n: i for n, i in recorded.items() if i
        }
        assert_cookies_name_the_ids(root)
        # An `up` killed between starting a bookie and recording its pid: the next one finds
        # the bookie by its registration instead of starting a second one on its port.
        state = state_of(root)
        pid = state["bookies"][1]["pid"]
        state["bookies"][1]["pid"] = None
        (root / "cluster.json").write_text(json.dumps(state))
        assert "nothing started" in cli(capsys, "cluster", "up", *d)
        assert state_of(root)["bookies"][1]["pid"] == pid
        # One more bookie: --bookies larger than the cluster adds it.
        cli(capsys, "cluster", "up", *d, "--bookies", "4")
        assert len(ids_of(root)) == 4
        assert read_ledger(capsys, root, write_ledger(capsys, root, 4)) == [0, 1, 2, 3]
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        if (root / "cluster.json").exists():
            main(["cluster", "down", *d])
    assert not any(pid_alive(b["pid"]) for b in state_of(root)["bookies"])


def _some_pid(root: Path) -> bool:
    try:
        return any(b["pid"] for b in json.loads((root / "cluster.json").read_text())["bookies"])
    except (FileNotFoundError, ValueError):
        return False


def test_a_zookeeper_cluster_stamps_its_cookies_in_zookeeper(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], zookeeper_server: ZooKeeperServer
) -> None:
    root = tmp_path / "c"
    uri = zookeeper_server.uri(f"/lifecycle-{uuid.uuid4().hex[:8]}/ledgers")
    d = ("--dir", str(root))
    cli(capsys, "cluster", "up", *d, "--bookies", "2", "--metadata", uri, *FAST)
    try:
        ids = ids_of(root)
        assert_cookies_name_the_ids(root)
        cli(capsys, "cluster", "kill", "2", *d)
        cli(capsys, "cluster", "down", *d)
        cli(capsys, "cluster", "up", *d)  # --metadata is remembered
        assert ids_of(root) == ids
        assert set(states(capsys, root).values()) == {"running"}
    finally:
        main(["cluster", "down", *d])
    assert not any(pid_alive(pid) for pid in [b["pid"] for b in state_of(root)["bookies"]])
    assert os.path.exists(root / "bookie-2" / "bookie.log")


def test_a_paused_bookie_is_shown_paused_written_around_and_stops_cleanly(
    cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cluster pause`` is SIGSTOP (a long GC pause, a stalled VM): the process stays and
    holds its sockets, so a client's requests to it go unanswered until its timeout."""
    root = cluster
    ids = ids_of(root)
    d = ("--dir", str(root))
    where = ("--cluster", str(root))
    assert cli(capsys, "cluster", "pause", "bookie-2", *d) == (
        f"bookie-2 ({ids['bookie-2']}): paused (SIGSTOP)\n"
    )
    assert states(capsys, root)["bookie-2"] == "paused"
    assert "already paused" in cli(capsys, "cluster", "pause", "2", *d)
    out = cli(capsys, "cluster", "start", "bookie-2", *d)
    assert "paused, not stopped (bookiesim cluster resume bookie-2" in out

    # Written around: still registered (its session lasts zkTimeout), it may be chosen for
    # the ensemble of two; then its adds time out (1 s) and the third bookie replaces it.
    out = cli(capsys, "ledger", "create", "-e", "2", "-w", "2", "-a", "2", "--json", *where)
    ledger_id = json.loads(out)["ledgerId"]
    args = ("ledger", "write", str(ledger_id), "--count", "50", "--timeout", "1", "--json")
    cli(capsys, *args, *where)
    cli(capsys, "ledger", "close", str(ledger_id), "--timeout", "1", *where)
    ids_written = cli(capsys, "ledger", "read", str(ledger_id), "--json", *where)
    assert [json.loads(x)["entryId"] for x in ids_written.splitlines()] == list(range(50))

    assert cli(capsys, "cluster", "resume", "bookie-2", *d) == (
        f"bookie-2 ({ids['bookie-2']}): resumed (SIGCONT)\n"
    )
    assert "already running" in cli(capsys, "cluster", "resume", "2", *d)
    assert states(capsys, root)["bookie-2"] != "paused"

    # A paused bookie stops cleanly (the SIGCONT after the SIGTERM), not by SIGKILL after
    # the 30 s stop timeout.
    cli(capsys, "cluster", "pause", "bookie-2", *d)
    started = time.monotonic()
    assert cli(capsys, "cluster", "stop", "bookie-2", *d) == (
        f"bookie-2 ({ids['bookie-2']}): stopped\n"
    )
    assert time.monotonic() - started < 15
    assert states(capsys, root)["bookie-2"] == "stopped"
    assert "not running (stopped)" in cli(capsys, "cluster", "resume", "bookie-2", *d)


def test_a_stop_whose_state_cannot_be_written_still_says_it_stopped(
    cluster: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a full disk the signal does its work and only cluster.json fails: the line must
    say what happened to the bookie, not only which file could not be written."""
    from bookiesim.cluster import control
    from bookiesim.cluster.processes import ClusterError

    root = cluster
    ids = ids_of(root)
    d = ("--dir", str(root))
    pid = state_of(root)["bookies"][1]["pid"]

    def full(root: Path, state: dict[str, Any]) -> None:
        raise ClusterError(f"cannot write {root}/cluster.json: No space left on device")

    monkeypatch.setattr(control, "write_state", full)
    out = cli(capsys, "cluster", "stop", "bookie-2", *d, code=1)
    assert out == (
        f"cluster stop: bookie-2 ({ids['bookie-2']}): stopped, but cannot write "
        f"{root}/cluster.json: No space left on device\n"
    )
    assert not pid_alive(pid)
    monkeypatch.undo()
    cli(capsys, "cluster", "start", "bookie-2", *d)
    assert states(capsys, root)["bookie-2"] == "running"


def test_relative_directories_set_for_every_bookie_are_each_bookies_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `--set journalDirectories=journal-a,journal-b` on `cluster up`: two journals in each
    # bookie's directory. Resolved against the user's working directory instead, every
    # bookie named the same two and the second one's start was refused by the first one's
    # cookies.
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "c"
    journals = "journalDirectories=journal-a,journal-b"
    cli(capsys, "cluster", "up", "--dir", str(root), "--bookies", "2", "--set", journals, *FAST)
    try:
        ledger = write_ledger(capsys, root, 40, ensemble=2)
        cli(capsys, "cluster", "down", "--dir", str(root))
        cli(capsys, "cluster", "up", "--dir", str(root))
        assert read_ledger(capsys, root, ledger) == list(range(40))
    finally:
        main(["cluster", "down", "--dir", str(root)])
    assert not (tmp_path / "journal-a").exists()
    for n in (1, 2):
        for journal in ("journal-a", "journal-b"):
            assert any((root / f"bookie-{n}" / journal / "current").glob("*.txn")), (n, journal)
