"""``bookiesim chaos cleanup`` after a harness killed with SIGKILL: the harness built a
network, started a process in a node and a partition, and could run no ``finally``; the
command removes the namespaces (the bridge, veths and nft tables go with them) and kills the
process, prints what it removed, and says nothing is left when run again."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import TYPE_CHECKING

from bookiesim.chaos.lazyfs.mount import is_mounted
from bookiesim.chaos.netns import LiveNetwork, leftovers
from bookiesim.chaos.network import TestNetwork
from bookiesim.cli import chaos_command
from bookiesim.cli.main import main
from tests.chaos.test_netns import need_network
from tests.missing import need_fuse

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

HARNESS = """
import sys, time
from bookiesim.chaos.netfaults import Partition
from bookiesim.chaos.netns import LiveNetwork
from bookiesim.chaos.network import TestNetwork
net = TestNetwork.plan(["b1", "zk1"])
live = LiveNetwork(net)
live.setup()
sleeper = live.spawn("b1", ["sleep", "300"])
live.start(Partition.isolate(net, "zk1"))
print(net.run_id, sleeper.pid, flush=True)
time.sleep(300)
"""


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan killed here is reaped by init, maybe later)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def cleanup_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bookiesim", "chaos", "cleanup", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cleanup_removes_what_a_sigkilled_harness_left() -> None:
    need_network()
    harness = subprocess.Popen([sys.executable, "-c", HARNESS], stdout=subprocess.PIPE, text=True)
    assert harness.stdout is not None
    run_id, sleeper = harness.stdout.readline().split()
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    harness.stdout.close()
    namespaces = {f"bks-{run_id}", f"bks-{run_id}-b1", f"bks-{run_id}-zk1"}
    assert namespaces <= {name for _, name in leftovers()}
    assert running(int(sleeper))  # orphaned, in b1's namespace

    # --run: a bare cleanup would also take down the runs of anything else going on (other
    # tests, a campaign), the harness processes included, as they sit in a client node.
    first = cleanup_command("--run", run_id)
    assert first.returncode == 0, first.stdout + first.stderr
    lines = set(first.stdout.splitlines())
    assert f"removed namespace bks-{run_id}-b1 (killed 1 process)" in lines
    assert {f"removed namespace bks-{run_id}", f"removed namespace bks-{run_id}-zk1"} <= lines
    assert not [name for _, name in leftovers() if run_id in name]
    assert not running(int(sleeper)), f"sleep {sleeper} survived the cleanup"

    again = cleanup_command("--run", run_id)
    expected = f"chaos cleanup: nothing named bks-{run_id}* left\n"
    assert (again.returncode, again.stdout) == (0, expected)


def test_cleanup_of_one_run_leaves_another_alone(capsys: pytest.CaptureFixture[str]) -> None:
    need_network()
    with LiveNetwork(TestNetwork.plan(["a"])) as keep, LiveNetwork(TestNetwork.plan(["a"])) as gone:
        assert main(["chaos", "cleanup", "--run", gone.net.run_id]) == 0
        assert set(capsys.readouterr().out.splitlines()) == {
            f"removed namespace bks-{gone.net.run_id}",
            f"removed namespace bks-{gone.net.run_id}-a",
        }
        assert {name for _, name in leftovers(keep.net.run_id)} == set(keep.net.namespaces)
        assert leftovers(gone.net.run_id) == []


def test_cleanup_without_the_privilege_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(chaos_command, "leftovers", lambda run: [("namespace", "bks-x1")])
    monkeypatch.setattr(chaos_command, "missing_privilege", lambda: "not root (reason)")
    assert main(["chaos", "cleanup"]) == 1
    assert capsys.readouterr().out == (
        "chaos cleanup: 1 left but cannot remove them: not root (reason)\n"
    )


def test_cleanup_unmounts_a_runs_small_disks(tmp_path: Path) -> None:
    need_network()
    where = tmp_path / "b1" / "ledgers"
    where.mkdir(parents=True)
    source = "bks-c1ea9-b1"  # as `chaos run` names a bookie's small ledger disk
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", source, str(where)], check=True)
    try:
        assert ("mount", str(where)) in leftovers("c1ea9")
        done = cleanup_command("--run", "c1ea9")
        assert (done.returncode, done.stdout) == (0, f"removed mount {where}\n")
        with open("/proc/self/mounts") as mounts:
            assert str(where) not in mounts.read()
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


def test_cleanup_stops_a_runs_lazy_file_system(tmp_path: Path) -> None:
    """A killed harness leaves its power-loss disks mounted and their file system processes
    running (they are not in any node); cleanup kills each and detaches its mount."""
    need_network()
    need_fuse()
    backing, where = tmp_path / "disk", tmp_path / "lazy"
    backing.mkdir()
    where.mkdir()
    fsname = "bks-1a2yf5-b1-lazy"  # as `chaos run` names a bookie's lazy disk
    daemon = subprocess.Popen(
        [sys.executable, "-m", "bookiesim.chaos.lazyfs", str(where), str(backing),
         "--fsname", fsname],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert daemon.stdout is not None
        assert daemon.stdout.readline() == "lazyfs: ready\n"
        (where / "unsynced").write_bytes(b"x")  # an open file's worth of state, never synced
        assert ("mount", str(where)) in leftovers("1a2yf5")
        done = cleanup_command("--run", "1a2yf5")
        expected = f"removed mount {where} (killed its file system, pid {daemon.pid})\n"
        assert (done.returncode, done.stdout) == (0, expected)
        assert daemon.wait(timeout=10) == -signal.SIGKILL
        assert not is_mounted(where)
        again = cleanup_command("--run", "1a2yf5")
        assert again.stdout == "chaos cleanup: nothing named bks-1a2yf5* left\n"
    finally:
        daemon.kill()
        daemon.wait()
        daemon.stdout.close()  # type: ignore[union-attr]
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)
