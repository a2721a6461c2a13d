"""``bookiesim bench recovery`` at its ``--quick`` size: every figure and ratio is there and
sane, the sizes add up, and the work directory goes.

Why: the benchmark is run by hand and BENCHMARKS.md records its JSON; a tiny run must give
every figure, in an order that makes sense (the marks before full replication, a copy that
moved what the lost bookie held, one write-close per healed ledger). No timing thresholds:
benchmarks are not timed tests.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from bookiesim.bench.recovery import RATIOS
from bookiesim.bench.recovery_run import lost_share
from bookiesim.cli.main import main
from bookiesim.metadata.ledgers import LedgerMetadata

if TYPE_CHECKING:
    from pathlib import Path

FIGURES = {
    "lossToMarksSeconds",
    "lossToFullSeconds",
    "replicationSeconds",
    "rereplicatedMBps",
    "rereplicatedEntries",
    "clientCopyMBps",
    "clientCopyEntries",
    "rawCopyMBps",
    "writeCloseOk",
    "writeCloseSkipped",
    "writeCloseFailed",
    "replicationRotations",
}
B1, B2, B3, B4 = (f"127.0.0.1:{p}" for p in (3181, 3182, 3183, 3184))


def test_the_lost_share_follows_the_striping() -> None:
    """E=3 Qw=2: position p stores the entries e with (p - e) % 3 < 2; a later segment
    without the bookie adds nothing, and a closed ledger ends at its last entry."""
    md = LedgerMetadata(3, 2, 2, {0: (B1, B2, B3)}).with_ensemble(6, (B1, B2, B4)).closed(7, 80)
    assert lost_share({9: md}, B3) == [(9, e) for e in (1, 2, 4, 5)]
    assert lost_share({9: md}, B1) == [(9, e) for e in (0, 2, 3, 5, 6)]
    assert lost_share({9: md}, B4) == [(9, 7)]


@pytest.mark.slow
def test_bench_recovery_quick_reports_every_figure(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["bench", "recovery", "--quick", "--dir", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert report["benchmark"] == "recovery"
    assert report["command"] == f"bookiesim bench recovery --quick --dir {tmp_path} --json"
    assert set(report["machine"]) == {"nproc", "machine", "python", "filesystem"}
    assert report["bookies"] == 5
    assert report["quorums"] == [3, 2, 2]
    figures = {k: f["median"] for k, f in report["figures"].items()}
    assert set(figures) == FIGURES
    for figure in report["figures"].values():
        assert len(figure["runs"]) == 1
        assert figure["min"] >= 0
    # The audit waits for the lost bookie's session to expire; the copies come after it.
    assert 0 < figures["lossToMarksSeconds"] <= figures["lossToFullSeconds"]
    assert 0 < figures["replicationSeconds"] <= figures["lossToFullSeconds"]
    for rate in ("rereplicatedMBps", "clientCopyMBps", "rawCopyMBps", "rereplicatedEntries"):
        assert figures[rate] > 0
    # The sizes: what the lost bookie held, all of it copied again by the workers.
    assert 0 < report["affectedLedgers"] <= report["ledgers"]
    assert report["lostBytes"] == report["lostEntries"] * report["entrySize"]
    assert report["metricEntries"] >= report["lostEntries"]
    # One WriteClose per healed ledger (every bookie advertises it), each rotating the
    # receiver's log for that ledger.
    assert figures["writeCloseOk"] == report["affectedLedgers"]
    assert figures["writeCloseSkipped"] == figures["writeCloseFailed"] == 0
    assert figures["replicationRotations"] == figures["writeCloseOk"]
    ratios = {r["key"]: r for r in report["ratios"]}
    assert set(ratios) == {r.key for r in RATIOS}
    assert ratios["rereplicationVsRawCopy"]["threshold"] == 0.3
    assert ratios["rereplicationVsRawCopy"]["result"] in {"PASS", "FAIL"}
    assert ratios["rereplicationVsClientCopy"]["result"] is None
    assert list(tmp_path.iterdir()) == []  # the bookies' files are gone


def test_bench_recovery_refuses_a_cluster_with_no_room_for_a_replacement(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["bench", "recovery", "--quick", "--bookies", "3", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--bookies 3" in err
    assert "E + 1" in err
    assert list(tmp_path.iterdir()) == []
