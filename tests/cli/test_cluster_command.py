"""``bookiesim cluster up|status|down``: bookies outlive the command, register themselves,
are reported truthfully, and stop cleanly."""

from __future__ import annotations

import json
import os
import signal
from typing import TYPE_CHECKING

from bookiesim.cli.main import main
from bookiesim.cluster.processes import exit_description, pid_alive

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def status(root: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["cluster", "status", "--dir", str(root), "--json"]) == 0
    doc: dict[str, object] = json.loads(capsys.readouterr().out)
    return doc


def test_up_status_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "c"
    assert main(["cluster", "up", "--dir", str(root), "--bookies", "2", "--json"]) == 0
    state = json.loads(capsys.readouterr().out)
    pids = [b["pid"] for b in state["bookies"]]
    try:
        assert all(pid_alive(pid) for pid in pids)
        scrape = (root / "prometheus.yml").read_text()
        for bookie in state["bookies"]:
            assert f"127.0.0.1:{bookie['httpServerPort']}" in scrape

        doc = status(root, capsys)
        rows = doc["bookies"]
        assert isinstance(rows, list)
        assert [(row["state"], row["mode"]) for row in rows] == [("running", "writable")] * 2
        assert all(row["registered"] for row in rows)
        assert doc["prometheus"] is None
        # Auto-recovery runs in every bookie by default; the first to vote is the auditor.
        autorecovery = doc["autorecovery"]
        assert isinstance(autorecovery, dict)
        assert autorecovery["auditor"] in {b["bookieId"] for b in state["bookies"]}
        assert (autorecovery["underReplicated"], autorecovery["enabled"]) == (0, True)
        assert main(["cluster", "status", "--dir", str(root)]) == 0
        assert f"auto-recovery: auditor {autorecovery['auditor']};" in capsys.readouterr().out

        # A second `up` in the same dir starts no second cluster: nothing to do.
        assert main(["cluster", "up", "--dir", str(root)]) == 0
        assert "already runs; nothing started" in capsys.readouterr().out

        # A bookie that dies by itself is reported as dead.
        os.kill(pids[0], signal.SIGKILL)
        doc = status(root, capsys)
        rows = doc["bookies"]
        assert isinstance(rows, list)
        assert rows[0]["state"] == "dead"
        assert rows[1]["state"] == "running"
    finally:
        main(["cluster", "down", "--dir", str(root)])
        capsys.readouterr()
    assert not any(pid_alive(pid) for pid in pids)
    rows = status(root, capsys)["bookies"]
    assert isinstance(rows, list)
    # `down` stopped the one that ran; the one that died by itself is still told apart.
    assert [row["state"] for row in rows] == ["dead", "stopped"]


def test_up_without_autorecovery(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "c"
    assert main(["cluster", "up", "--dir", str(root), "--bookies", "1", "--no-autorecovery"]) == 0
    capsys.readouterr()
    try:
        assert status(root, capsys)["autorecovery"] == {
            "auditor": None,
            "underReplicated": 0,
            "enabled": True,
        }
    finally:
        main(["cluster", "down", "--dir", str(root)])


def test_status_without_a_cluster_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "status", "--dir", str(tmp_path)]) == 1
    assert "cluster up" in capsys.readouterr().out


def test_a_bookie_exit_code_is_told_with_its_meaning() -> None:
    # What `demo` and `cluster up` print for a bookie (docs/bookie.md, exit codes).
    assert exit_description(0) == "exited with code 0"
    assert exit_description(2) == "exited with code 2 (bad configuration)"
    assert "disk error" in exit_description(3)
    assert exit_description(-signal.SIGKILL) == "killed by SIGKILL"


def test_two_changing_commands_at_once_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bookiesim.cluster.state import cluster_lock

    with cluster_lock(tmp_path, "up"):
        assert main(["cluster", "stop", "bookie-1", "--dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert out == (
        f"cluster stop: `cluster up` (pid {os.getpid()}) is changing the cluster in "
        f"{tmp_path}; try again when it is done\n"
    )
    # Let go with the command: the next one gets as far as finding no cluster.
    assert main(["cluster", "stop", "bookie-1", "--dir", str(tmp_path)]) == 1
    assert "no cluster in" in capsys.readouterr().out
