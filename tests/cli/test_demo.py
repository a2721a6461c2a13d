"""``bookiesim demo`` end to end, with real bookie processes.

Why: ``make demo`` is the first thing a newcomer runs. It must finish, show the metrics URLs
and BP-32 at work (per bookie, the three closed ledgers' logs written, rotated by write-close
and sealed by a checkpoint, leastUnflushedLogId moving past them), a killed bookie's ledgers
healed onto a spare (three replication rotations there), leave a file for ``bookiesim
shell`` to read, and leave no process behind; when a bookie cannot start it must say so and
exit 1 rather than hang.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from bookiesim.cli.main import main
from bookiesim.cluster import control, processes

if TYPE_CHECKING:
    import pytest


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in cmdline:
            pids.append(int(entry.name))
    return pids


def test_demo_writes_closes_checkpoints_and_stops(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["demo", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out

    # Step 1 reports each bookie's pid.
    pids = {
        name: int(pid) for name, pid in re.findall(r"(bookie-\d)\W+(\d+)\W+127\.0\.0\.1:\d+", out)
    }
    assert set(pids) == {"bookie-1", "bookie-2", "bookie-3"}, out

    metrics = set(re.findall(r"http://127\.0\.0\.1:\d+/metrics", out))
    assert len(metrics) == 3, out
    assert "/api/v1/bookie/info" in out

    # Step 3, per bookie: active logs, rotated logs and leastUnflushedLogId before the close
    # (the entries in their logs) → just after it → after the checkpoint; rotations made.
    stages = r"(\d+) → (\d+) → (\d+)"
    rows = re.findall(
        rf"(bookie-\d)\W+{stages}\W+{stages}\W+write_close=(\d+)\W+{stages}\W+rotated=(\d+)", out
    )
    assert {row[0] for row in rows} == {"bookie-1", "bookie-2", "bookie-3"}, out
    for name, *numbers in rows:
        active, rotated = numbers[0:3], numbers[3:6]
        write_closes, least, requests = numbers[6], numbers[7:10], numbers[10]
        # E=3: every bookie holds entries of all three ledgers, one log each, all written.
        assert active == ["3", "0", "0"], (name, out)
        # Rotated by the close at once (a checkpoint may come before the count: fewer),
        # sealed by the checkpoint.
        assert rotated[0] == "0", (name, out)
        assert int(rotated[1]) <= 3, (name, out)
        assert rotated[2] == "0", (name, out)
        assert write_closes == "3", (name, out)
        assert requests == "3", (name, out)  # bookie_write_close_requests_total{outcome}
        # Three logs unflushed before (the pointer at or below the lowest), all sealed after.
        assert int(least[2]) >= int(least[0]) + 3, (name, out)

    # The suggested readlog command names a log that exists.
    logs = re.findall(r"shell readlog (\S+\.log)", out)
    assert logs, out
    assert Path(logs[0]).is_file()
    assert Path(logs[0]).is_relative_to(tmp_path)

    # Step 4: one bookie killed, its ledgers healed onto the spare, which sealed the copies.
    killed = re.search(r"4\. (bookie-\d) is killed \(SIGKILL\)", out)
    assert killed is not None, out
    victim = killed.group(1)
    assert victim in pids
    assert out.count("mark removed, fully replicated again") == 3, out
    assert re.search(r"rotations by reason\W+replication=3", out), out
    spare_pointer = re.search(r"leastUnflushedLogId\W+(\d+) → (\d+)", out)
    assert spare_pointer is not None, out
    assert int(spare_pointer.group(2)) >= int(spare_pointer.group(1)) + 3, out  # 3 logs sealed
    assert re.search(r"WriteClose after replication\W+ok=3", out), out
    assert f"with {victim} dead" in out

    # Stopped cleanly: every exit code 0 (the killed one is not stopped again), nothing left.
    stops = out.split("5. stopped (SIGTERM)")[1]
    exits = dict(re.findall(r"(bookie-\d)\W+\d+\W+(\S+)\W*$", stops, flags=re.MULTILINE))
    live = {"bookie-1", "bookie-2", "bookie-3", "bookie-4"} - {victim}
    assert exits == dict.fromkeys(live, "0"), out
    assert not [pid for pid in pids.values() if _alive(pid)]
    assert _processes_mentioning(str(tmp_path)) == []


def test_demo_bookie_that_cannot_start_is_reported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = processes.bookie_settings
    monkeypatch.setattr(
        control,
        "bookie_settings",
        lambda root, *extra: [*settings(root, *extra), "noSuchKey=1"],
    )

    code = main(["demo", "--dir", str(tmp_path)])
    out = capsys.readouterr().out

    assert code == 1
    assert "before it was ready" in out
    assert "unknown key 'noSuchKey'" in out  # the bookie's own message, from its log
    assert _processes_mentioning(str(tmp_path)) == []


def test_demo_keep_running_leaves_a_cluster_the_ledger_command_can_use(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = tmp_path / "kept"
    code = main(["demo", "--dir", str(root), "--keep-running"])
    out = capsys.readouterr().out
    try:
        assert code == 0, out
        assert f"cluster down --dir {root}" in out
        assert main(["ledger", "list", "--cluster", str(root), "--json"]) == 0
        listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [doc["state"] for doc in listed] == ["CLOSED"] * 3
        assert all(doc["lastEntryId"] == 99 for doc in listed)
        first = str(listed[0]["ledgerId"])
        args = ["ledger", "read", first, "--cluster", str(root), "--json", "--from", "99"]
        assert main([*args, "--password", "bookiesim-demo"]) == 0
        assert json.loads(capsys.readouterr().out)["entryId"] == 99
    finally:
        assert main(["cluster", "down", "--dir", str(root)]) == 0
    assert _processes_mentioning(str(root)) == []


def test_demo_refuses_a_used_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "bookie-1").mkdir()

    assert main(["demo", "--dir", str(tmp_path)]) == 1
    assert "already exists" in capsys.readouterr().out
