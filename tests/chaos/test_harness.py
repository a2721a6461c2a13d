"""``bookiesim chaos run`` end to end, as root: four bookiesim bookies in their nodes, the
workloads and a schedule with every fault family, then the checker. A clean run has no
violation, on SQLite and with a ZooKeeper server in a node of its own (a session expiry, a
power loss on a lazy disk); a
run whose bookies carry a bug switch (``add-ignores-fence``) is caught, and its replay, from
the history's header alone, is caught again."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from bookiesim.chaos.history import read_history
from bookiesim.chaos.nemesis import FAMILIES, plan_schedule
from tests.chaos.test_netns import need_network
from tests.missing import need_fuse, need_zookeeper

if TYPE_CHECKING:
    from pathlib import Path

SEED = 408
"""Its 34 s schedule: a pause of auto-recovery daemon ar1, loss, slow, a crash, a full disk
(the families checked below, so a change of the planner cannot quietly drop one from this
test)."""


def _chaos(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "bookiesim", "chaos", *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)


def _summary(out: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def test_a_schedule_of_every_family_against_bookiesim_has_no_violation(tmp_path: Path) -> None:
    need_network()
    families = ["net", "pause", "crash", "disk", "slow"]
    bookies, daemons = ["b1", "b2", "b3", "b4"], ["ar1", "ar2"]
    planned = {f.family for f in plan_schedule(SEED, 34, families, bookies, autorecovery=daemons)}
    assert planned == set(families) == set(FAMILIES) - {"zk", "power", "eio"}  # those: below
    out = tmp_path / "run"
    args = ["--seed", str(SEED), "--duration", "34", "--families", ",".join(families)]
    done = _chaos("run", *args, "--out", str(out))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = _summary(out)
    assert summary["violations"] == {}
    assert summary["acknowledgedAdds"] > 1000
    assert summary["addsLost"] == 0
    assert set(summary["faults"]) == {"disk", "pause", "crash", "slow", "loss"}
    assert summary["skipped"] == []  # read-back, convergence and journeys were all checked
    assert summary["ops"]["journey"].get("ok", 0) >= 5
    assert (out / "timeline.png").stat().st_size > 10_000
    history = read_history(out / "history.jsonl")
    assert history.replay == f"bookiesim chaos replay {out / 'history.jsonl'}"
    assert history.meta["seed"] == SEED
    # Every fault ended, the heal was recorded, and the bookies' processes are gone.
    assert all(f.end is not None for f in history.faults)
    assert "acknowledged adds" in done.stdout
    run_id = done.stdout.split()[2].rstrip(":")
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"bks-{run_id}" not in namespaces
    mounts = subprocess.run(["mount"], capture_output=True, text=True).stdout
    assert str(out) not in mounts  # the small ledger disks are unmounted
    # The disk fault turned its bookie read-only, and back.
    logs = "".join(p.read_text() for p in out.glob("bookies/*/bookie.log"))
    assert "bookie is read-only: every ledger directory is full" in logs


def test_a_session_expiry_on_an_ensemble_read_errors_a_daemon_crash_and_a_torn_power_loss(
    tmp_path: Path,
) -> None:
    need_network()
    need_zookeeper()
    need_fuse()
    # Seed 313's 34 s on three ZooKeeper servers (zk1..zk3) and two auto-recovery nodes: a
    # bookie cut off from every ZooKeeper server past its session, another's index files
    # answering EIO, a crash of an auto-recovery daemon, a power loss tearing 100 bytes of the
    # last unsynced write. With the bookiesim run above, every family ran live once.
    schedule = plan_schedule(
        313,
        34,
        ["zk", "power", "crash", "eio"],
        ["b1", "b2", "b3", "b4"],
        zookeepers=["zk1", "zk2", "zk3"],
        autorecovery=["ar1", "ar2"],
    )
    assert [f.describe() for f in schedule] == [
        "session-expiry b1",
        "read-error b4 files=index",
        "crash ar2",
        "power-loss b1 tear=100",
    ]
    out = tmp_path / "zk"
    args = ["--seed", "313", "--duration", "34", "--metadata", "zk", "--zookeepers", "3"]
    done = _chaos("run", *args, "--families", "zk,power,crash,eio", "--out", str(out))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = _summary(out)
    assert summary["faults"] == {
        "power-loss": 1,
        "crash": 1,
        "session-expiry": 1,
        "read-error": 1,
    }
    assert summary["violations"] == {}
    assert summary["skipped"] == []
    assert "dropped=" in done.stdout  # the lazy disk's report of what it forgot
    logs = "".join(p.read_text() for p in out.glob("bookies/*/bookie.log"))
    assert "vanished (session expired?); registering again" in logs
    assert "bookiesim.autorecovery" not in logs  # the bookies run none of it
    # The daemons ran in their nodes (ar2 twice: started again after its crash), each stopped
    # by SIGTERM at the end; three servers served the bookies.
    for node, runs in (("ar1", 1), ("ar2", 2)):
        log = (out / "autorecovery" / node / "bookie.log").read_text()
        assert log.count(" running\n") == runs, log[-2000:]
        assert log.count("received SIGTERM, stopping") == 1, log[-2000:]
    assert sorted(p.parent.name for p in out.glob("zookeeper/zk*/zookeeper.log")) == [
        "zk1",
        "zk2",
        "zk3",
    ]
    with open("/proc/self/mounts") as mounts:
        assert str(out) not in mounts.read()


def test_a_bookie_that_acknowledges_adds_past_a_fence_is_caught_and_replayed(
    tmp_path: Path,
) -> None:
    need_network()
    out = tmp_path / "bug"
    args = ["--seed", "2", "--duration", "12", "--families", "none", "--no-journeys"]
    done = _chaos("run", *args, "--bug", "add-ignores-fence", "--out", str(out))
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    assert "fencing" in _summary(out)["violations"]
    assert f"replay: bookiesim chaos replay {out / 'history.jsonl'}" in done.stdout

    again = _chaos("replay", str(out))
    assert again.returncode == 1, again.stdout[-4000:] + again.stderr[-2000:]
    replayed = tmp_path / "bug-replay"
    assert "fencing" in _summary(replayed)["violations"]
    assert read_history(replayed / "history.jsonl").meta["bugs"] == ["add-ignores-fence"]
