"""``bookiesim bench storage`` smoke test.

Why: the benchmark is run by hand and its JSON is what BENCHMARKS.md records, so a tiny run
must produce every figure and every ratio, with min/median/max over the repetitions, and
clean up after itself. Timing thresholds are not tested: benchmarks are not timed tests.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from bookiesim.bench.storage import RATIOS
from bookiesim.cli.main import main
from tests.missing import need_java

if TYPE_CHECKING:
    from pathlib import Path

FIGURES = {
    "rawWrite",
    "entryLogAppend64k",
    "entryLogAppend1k",
    "entryLogAppends1k",
    "entryLogAppends1kDurable",
    "rawRead64k",
    "entryLogScan64k",
    "rawRead1k",
    "entryLogScan1k",
    "rawFdatasync",
    "journal1PerSync",
    "journal1000PerSync",
}
RATIO_KEYS = {
    "append64kVsRawWrite",
    "append1kVsRawWrite",
    "appends1kVsTarget",
    "scan64kVsRawRead",
    "scan1kVsRawRead",
    "journal1VsFdatasync",
    "journal1000VsFdatasync",
}


def test_bench_storage_json_has_every_figure_and_ratio(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["bench", "storage", "--size-mb", "1", "--repeats", "2", "--dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0
    assert "append64kVsRawWrite" not in captured.out  # tables, not JSON, without --json
    assert "entry-log append, 64 KiB" in captured.out

    code = main(
        ["bench", "storage", "--size-mb", "1", "--repeats", "2", "--dir", str(tmp_path), "--json"]
    )
    captured = capsys.readouterr()
    assert code == 0
    report = json.loads(captured.out)
    assert "entry-log append, 64 KiB" in captured.err  # the tables moved to stderr

    assert report["benchmark"] == "storage"
    assert report["command"].startswith("bookiesim bench storage")
    assert report["sizeMb"] == 1
    assert report["repeats"] == 2
    assert set(report["machine"]) == {"nproc", "machine", "python", "filesystem"}
    assert set(report["figures"]) == FIGURES
    for figure in report["figures"].values():
        assert len(figure["runs"]) == 2
        assert 0 < figure["min"] <= figure["median"] <= figure["max"]
        assert figure["unit"]
    assert {r["key"] for r in report["ratios"]} == RATIO_KEYS == {r.key for r in RATIOS}
    for ratio in report["ratios"]:
        assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]
        if ratio["threshold"] is None:
            assert ratio["result"] is None
        else:
            assert ratio["result"] in {"PASS", "FAIL"}
    thresholds = {r["key"]: r["threshold"] for r in report["ratios"]}
    assert thresholds["append64kVsRawWrite"] == 0.70
    assert thresholds["scan64kVsRawRead"] == 0.50
    assert thresholds["appends1kVsTarget"] == 1.0
    appends = next(r for r in report["ratios"] if r["key"] == "appends1kVsTarget")
    assert appends["constant"] == 300_000

    assert list(tmp_path.iterdir()) == []  # the work directory is removed


@pytest.mark.slow
def test_bench_cluster_reports_both_clusters_and_recovery(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from bookiesim.bench.cluster import RATIOS as CLUSTER_RATIOS

    args = ["--entries", "300", "--recovery-entries", "200", "--repeats", "2"]
    code = main(["bench", "cluster", *args, "--dir", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert report["benchmark"] == "cluster"
    expected = ["bookiesim bench cluster", *args, "--dir", str(tmp_path), "--json"]
    assert report["command"] == " ".join(expected)
    figures = report["figures"]
    assert {"oneBookieAdds", "threeBookiesAdds", "threeBookiesP99", "recoverySeconds"} <= set(
        figures
    )
    for figure in figures.values():
        assert len(figure["runs"]) == 2
        assert figure["min"] > 0
    thresholds = {r["key"]: r["threshold"] for r in report["ratios"]}
    assert thresholds == {r.key: r.threshold for r in CLUSTER_RATIOS}
    assert thresholds["threeVsOneBookie"] == 0.5
    assert list(tmp_path.iterdir()) == []  # the bookies' files are gone


@pytest.mark.slow
def test_bench_pipeline_reports_one_and_two_cores(tmp_path: Path) -> None:
    import subprocess
    import sys

    need_java()  # Spark's
    # Its own process: the benchmark starts and stops Spark sessions of its own.
    args = ["--size-mb", "4", "--log-mb", "2", "--dir", str(tmp_path), "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "bookiesim", "bench", "pipeline", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["benchmark"] == "pipeline"
    figures = report["figures"]
    assert {"rawReadMb", "scannerMb", "spark1Mb", "spark2Mb", "spark2MbPerCore"} <= set(figures)
    assert {r["key"]: r["threshold"] for r in report["ratios"]} == {
        "twoVsOneCore": 1.6,
        "perCoreVsRawRead": 0.5,
        "oneCoreVsScanner": None,
        "fixedCostVsAllowed": None,
    }
    # The fixed cost is a whole Spark job (over a second here, never milliseconds), and the
    # time the target allows is the input's bytes at half the raw read per core, on 2 cores.
    assert figures["spark2FixedSeconds"]["median"] > 0.05
    allowed = figures["perCoreAllowedSeconds"]["runs"][0]
    raw = figures["rawReadMb"]["runs"][0] * 1e6
    assert allowed * raw == pytest.approx(4 * 1024 * 1024 * 1.0, rel=0.05)
    assert list(tmp_path.iterdir()) == []


def test_spark_run_pins_itself_to_the_cores_it_is_given() -> None:
    import os

    from bookiesim.bench.spark_run import pin_to_cpus

    before = os.sched_getaffinity(0)
    try:
        chosen = pin_to_cpus(1)
        assert os.sched_getaffinity(0) == set(chosen)
        assert len(chosen) == 1
        with pytest.raises(ValueError, match="CPUs asked for"):
            pin_to_cpus(len(before) + 1)
    finally:
        os.sched_setaffinity(0, before)


def test_raw_fdatasync_latency_paces_and_reports_the_stalled_share(tmp_path: Path) -> None:
    from bookiesim.bench.baseline import raw_fdatasync_latency

    latency = raw_fdatasync_latency(
        tmp_path / "paced.bin", seconds=0.5, syncs_per_second=40, bytes_per_sync=4096
    )
    assert 15 <= latency.syncs_per_second <= 45  # paced, not flat out (disks do 1,000s/s)
    assert latency.bytes_per_sync == 4096
    written = (tmp_path / "paced.bin").stat().st_size
    assert written % 4096 == 0
    assert written >= 4096 * 8
    assert 0 < latency.p50_ms <= latency.p99_ms <= latency.p999_ms <= latency.max_ms
    assert 0.0 <= latency.over_threshold_share <= latency.stalled_share < 1.0
    # A threshold every sync exceeds: all the time spent syncing counts as stalled.
    everything = raw_fdatasync_latency(
        tmp_path / "all.bin", seconds=0.2, syncs_per_second=1000, bytes_per_sync=512, stall_ms=0
    )
    assert everything.over_threshold_share == everything.stalled_share > 0


def test_raw_file_churn_writes_and_closes_a_log_per_count(tmp_path: Path) -> None:
    import os

    from bookiesim.bench.baseline import raw_file_churn_rate
    from bookiesim.entrylog.metadata import extract_from_ledgers_map

    descriptors = len(os.listdir("/proc/self/fd"))
    rate = raw_file_churn_rate(tmp_path / "churn", count=30, record_size=100, open_files=4)
    assert rate.count == 30
    assert rate.per_second > 0
    assert len(os.listdir("/proc/self/fd")) == descriptors  # every log closed
    logs = sorted((tmp_path / "churn").iterdir())
    assert len(logs) == 30
    for log in logs:
        data = log.read_bytes()
        assert len(data) == rate.nbytes // 30
        # Each was sealed as a rotation seals a log: GC's reader finds one ledger of one
        # 100-byte record through the header's map offset.
        assert extract_from_ledgers_map(log, 0).ledgers == {1: 100}
    with pytest.raises(FileExistsError):  # never overwrites what is there
        raw_file_churn_rate(tmp_path / "churn", count=1, record_size=1, open_files=1)


@pytest.mark.slow
def test_bench_bookie_reports_every_run_baseline_and_target(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from bookiesim.bench.bookie import SCENARIOS

    args = ["bench", "bookie", "--adds", "2000", "--repeats", "2", "--dir", str(tmp_path)]
    args += ["--latency-seconds", "0.5"]
    code = main([*args, "--json"])
    captured = capsys.readouterr()
    assert code == 0
    report = json.loads(captured.out)
    assert report["repeats"] == 2
    assert set(report["runs"]) == {scenario.name for scenario in SCENARIOS}
    for run in report["runs"].values():
        # Each figure is the median of the repetitions, each repetition kept beside it.
        assert len(run["repeats"]) == 2
        assert run["p99_ms"] == sum(r["p99_ms"] for r in run["repeats"]) / 2
        for rep in run["repeats"]:
            # A paced run lasts --latency-seconds at least: more adds if its rate asks.
            least = int(rep["target_rate"] * 0.5) if "target_rate" in rep else 0
            assert rep["adds"] == pytest.approx(max(2000, least), abs=1)
        assert run["errors"] == 0
        assert 0 < run["p50_ms"] <= run["p99_ms"] <= run["p999_ms"]
        assert run["fsyncs_per_second"] > 0
        assert run["bookie_cpu_us_per_add"] > 0
        assert 0 < run["bookie_cpu_share"] < 8  # of one core; a bookie has few busy threads
        assert run["client_cpu_us_per_add"] > 0
    assert report["raw_fdatasync_per_second"] > 0
    assert report["raw_file_churn_per_second"] > 0
    assert report["raw_fdatasync_latency"]["syncs_per_second"] > 0
    half_peak = {scenario.name for scenario in SCENARIOS if scenario.half_rate}
    assert set(report["transport_floor"]) == half_peak
    for floor in report["transport_floor"].values():
        # The same client at the same rate against the server with no storage.
        assert floor["adds_per_second"] > 0
        assert 0 < floor["p50_ms"] <= floor["p99_ms"] <= floor["p999_ms"]
        assert floor["bookie_cpu_us_per_add"] > 0
    assert set(report["ratios"]) == {
        "10000_ledgers / 10_ledgers",
        "10000_ledgers / raw file churn",
        "interleaved / per_ledger",
        *(f"{name}: p99 / transport floor p99" for name in half_peak),
    }
    assert len(report["targets"]) == 4
    assert "raw file churn" in captured.err
    assert "files/s" in captured.err
    assert "bookie CPU" in captured.err
    assert "transport floor for" in captured.err
    assert "medians of 2 runs" in captured.err
    with pytest.raises(SystemExit) as bad:
        main(["bench", "bookie", "--repeats", "0"])
    assert bad.value.code == 2
    assert "0 is not positive" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # the bookies' and the baselines' files are gone


def test_process_cpu_seconds_counts_a_busy_process() -> None:
    import os
    import time

    from bookiesim.bench.bookie import process_cpu_seconds

    before = process_cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    spent = process_cpu_seconds(os.getpid()) - before
    assert 0.1 <= spent <= 5.0  # clock ticks are 10 ms; other threads may add a little
