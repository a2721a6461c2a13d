"""``bookiesim bench sim`` runs end to end on a small idle-heavy run and one busy seed, with
trio's floor under it.

Why: a benchmark that breaks unnoticed records nothing; this runs it small (a few seconds)
and checks that every figure and the 1,000 simulated-seconds-per-wall-second target are
reported, with the load average the figures were taken under. Timing thresholds are not
tested: benchmarks are not timed tests.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from bookiesim.bench.sim import RATIOS
from bookiesim.cli.main import main

if TYPE_CHECKING:
    import pytest


def test_bench_sim_small(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--ledgers", "20", "--idle", "30", "--busy-seeds", "1", "--busy-steps", "3"]
    args += ["--repeats", "1"]
    assert main(["bench", "sim", *args, "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out.splitlines()[-1])
    assert "idle stretch" in captured.err  # the tables went to stderr
    assert report["benchmark"] == "sim"
    assert report["command"] == "bookiesim bench sim " + " ".join(args) + " --json"
    assert report["ledgers"] == 20
    assert len(report["loadAverageAtStart"]) == 3
    figures = report["figures"]
    assert set(figures) == {
        "idleRate",
        "idleWallSeconds",
        "idleWriteWallSeconds",
        "idleRunRate",
        "idleSeedsPerMinute",
        "busyRate",
        "busySimulatedPerSeed",
        "busySeedsPerMinute",
        "busyTaskSteps",
        "busyRunLoopPasses",
        "busyClockJumps",
        "busyTrioFloorRate",
    }
    for figure in figures.values():
        assert len(figure["runs"]) == 1
        assert figure["min"] > 0
    # Virtual time pays off even when busy; idle time is cheaper still.
    assert figures["busyRate"]["min"] > 1
    assert figures["idleRate"]["min"] > figures["busyRate"]["min"]
    # trio's floor bounds the busy seeds from above: the same scheduling, no work.
    assert figures["busyTrioFloorRate"]["min"] > figures["busyRate"]["max"]
    assert figures["busyTaskSteps"]["min"] > figures["busyClockJumps"]["min"]
    thresholds = {r["key"]: r["threshold"] for r in report["ratios"]}
    assert thresholds == {r.key: r.threshold for r in RATIOS}
    assert thresholds["idleVsTarget"] == 1.0
    target = next(r for r in report["ratios"] if r["key"] == "idleVsTarget")
    assert target["constant"] == 1000
    assert target["result"] in {"PASS", "FAIL"}


def test_bench_sim_rejects_bad_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "sim", "--ledgers", "0"]) == 2
    assert "--ledgers must be positive" in capsys.readouterr().err
