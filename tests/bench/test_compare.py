"""``bookiesim bench compare``: ours beside upstream's, or ours alone and the ratios refused.

Why: the command is run by hand and its JSON is what BENCHMARKS.md records, so a tiny run must
produce every figure of every workload, sane ones (percentiles in order, the paced run at half
the peak, one file or more per ledger written), and, without an installation, say in one line
why there are no ratios. Timing thresholds are not tested: benchmarks are not timed tests.
Where ``BOOKKEEPER_HOME`` names an installation a live pair runs; elsewhere it skips.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bookiesim.bench.bookie import run_client
from bookiesim.bench.compare import (
    FIXED,
    ComparePlan,
    command_of,
    figures_of,
    plan_of,
    summarize,
    workload_keys,
)
from bookiesim.bench.compare_run import _bookie
from bookiesim.cli.main import build_parser, main
from bookiesim.upstream.installation import installation
from tests.missing import upstream_skip

QUICK_ARGS = ["bench", "compare", "--quick", "--adds", "2000", "--latency-seconds", "1"]


def _check_run(run: dict[str, Any], key: str, adds: int) -> None:
    assert "failed" not in run, run
    assert run["errors"] == 0
    for figure in figures_of(key):
        assert isinstance(run[figure], int | float)
    assert run["adds_per_second"] > 0
    assert 0 < run["bookie_cpu_us_per_add"] < 1e6
    assert run["rss_peak_mib"] > 1
    assert run["fds_peak"] > 3
    assert 0 < run["p50_ms"] <= run["p99_ms"] <= run["p999_ms"]
    if key != FIXED:
        assert run["adds"] == adds
        # Each ledger written gets its index file at least.
        assert run["files"] >= min(run["ledgers"], adds)


def test_quick_without_an_installation_prints_ours_and_refuses_the_ratios(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BOOKKEEPER_HOME", raising=False)
    code = main([*QUICK_ARGS, "--dir", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    assert code == 0
    report = json.loads(captured.out)
    refusal = [line for line in captured.err.splitlines() if line.startswith("ratios refused:")]
    assert len(refusal) == 1
    assert "BOOKKEEPER_HOME is not set" in refusal[0]
    assert "--bookkeeper-home" in refusal[0]
    assert report["ratios_refused"] == refusal[0]
    assert report["upstream"] is None
    assert report["command"].startswith("bookiesim bench compare --quick")
    # The default load alone, over one channel, and its results under its name.
    assert (report["loads"], report["channels"]) == (["bookiesim"], 1)
    assert set(report["results"]) == {"bookiesim"}
    result = report["results"]["bookiesim"]
    assert result["ratios"] == {}

    plan = ComparePlan(**{
        **report["plan"],
        "ledgers": tuple(report["plan"]["ledgers"]),
        "loads": tuple(report["plan"]["loads"]),
    })  # fmt: skip
    assert plan == ComparePlan(adds=2000, latency_seconds=1.0, pairs=1)
    (pair,) = result["runs"]
    assert set(pair) == set(workload_keys(plan))
    for key, runs in pair.items():
        assert set(runs) == {"bookiesim"}  # ours alone
        _check_run(runs["bookiesim"], key, plan.adds)
    peak = pair["peak_10"]["bookiesim"]["adds_per_second"]
    assert pair[FIXED]["bookiesim"]["target_rate"] == pytest.approx(peak / 2, rel=0.01)
    for key in workload_keys(plan):
        assert result["medians"][key]["bookiesim"] == {
            figure: pair[key]["bookiesim"][figure] for figure in figures_of(key)
        }
        assert (pair[key]["bookiesim"]["load"], pair[key]["bookiesim"]["channels"]) == (
            "bookiesim",
            1,
        )
    scaling = result["scaling"]["bookiesim"]["adds_per_second: peak_1000 / peak_10"]
    assert scaling["median"] == pytest.approx(
        pair["peak_1000"]["bookiesim"]["adds_per_second"] / peak, abs=0.001
    )
    assert list(tmp_path.iterdir()) == []  # every run's directory removed


def test_ratios_are_per_pair_medians_and_failed_runs_are_left_out() -> None:
    plan = ComparePlan(adds=1, ledgers=(10, 100), pairs=3)

    def run(rate: float, p99: float, **extra: object) -> dict[str, object]:
        figures = dict.fromkeys({*figures_of("peak_10"), *figures_of(FIXED)}, 1.0)
        return {**figures, "adds_per_second": rate, "p99_ms": p99, **extra}

    def pair(ours: float, theirs: float, *, failed: bool = False) -> dict[str, dict[str, object]]:
        upstream = run(theirs, 2.0, **({"failed": "Too many open files"} if failed else {}))
        return {"bookiesim": run(ours, 1.0), "upstream": upstream}

    pairs = [
        {"peak_10": pair(50, 100), "peak_100": pair(10, 100), FIXED: pair(1, 1)},
        {"peak_10": pair(80, 100), "peak_100": pair(30, 100, failed=True), FIXED: pair(1, 1)},
        {"peak_10": pair(90, 90), "peak_100": pair(45, 90), FIXED: pair(1, 1)},
    ]
    summary = summarize(plan, pairs, ("bookiesim", "upstream"))
    assert summary["ratios"]["peak_10"]["adds_per_second"]["pairs"] == [0.5, 0.8, 1.0]
    assert summary["ratios"]["peak_10"]["adds_per_second"]["median"] == 0.8
    assert summary["ratios"]["peak_100"]["adds_per_second"]["pairs"] == [0.1, 0.5]
    assert summary["ratios"][FIXED]["p99_ms"]["median"] == 0.5
    assert summary["medians"]["peak_100"]["upstream"]["adds_per_second"] == 95
    assert summary["failures"] == ["upstream, 100 ledgers, peak: Too many open files"]
    ours = summary["scaling"]["bookiesim"]["adds_per_second: peak_100 / peak_10"]
    assert ours["pairs"] == [0.2, 0.375, 0.5]
    theirs = summary["scaling"]["upstream"]["adds_per_second: peak_100 / peak_10"]
    assert theirs["pairs"] == [1.0, 1.0]


def test_an_installation_is_a_directory_with_jars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BOOKKEEPER_HOME", raising=False)
    assert "BOOKKEEPER_HOME is not set" in str(installation())
    assert str(installation(tmp_path)) == (
        f"no upstream BookKeeper installation: {tmp_path} has no lib/*.jar"
    )
    monkeypatch.setenv("BOOKKEEPER_HOME", str(tmp_path))
    assert "has no lib/*.jar" in str(installation())
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "bookkeeper-server-4.17.4.jar").write_bytes(b"PK")
    found = installation()
    assert found == tmp_path or "no java on PATH" in str(found)


def test_bad_ledger_counts_are_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "compare", "--ledgers", "10,many"])
    assert exit_info.value.code == 2
    assert "'10,many' is not a comma-separated list of numbers" in capsys.readouterr().err


@pytest.mark.slow
@upstream_skip()
def test_live_quick_pair_against_upstream(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    home = os.environ["BOOKKEEPER_HOME"]
    args = [*QUICK_ARGS, "--ledgers", "10,100", "--bookkeeper-home", home]
    code = main([*args, "--dir", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    assert code == 0
    report = json.loads(captured.out)
    assert report["ratios_refused"] is None
    assert "ratios refused" not in captured.err
    result = report["results"]["bookiesim"]
    (pair,) = result["runs"]
    for key, runs in pair.items():
        assert set(runs) == {"bookiesim", "upstream"}
        for run in runs.values():
            _check_run(run, key, 2000)
        for figure in figures_of(key):
            assert result["ratios"][key][figure]["median"] > 0
    assert list(tmp_path.iterdir()) == []


def test_open_files_limit_is_the_bookies_hard_and_soft_limit(tmp_path: Path) -> None:
    """``--open-files-limit N`` runs each bookie as under ``ulimit -n N``: the limit the
    process has (both soft and hard, or a bookie would raise its soft limit past it) is N,
    and bookiesim serves within it."""
    with _bookie("bookiesim", tmp_path / "b", None, 300) as (port, pid, _, stop, uri):
        assert uri is None  # the Python load needs no metadata service
        limits = Path(f"/proc/{pid}/limits").read_text()
        (line,) = [row for row in limits.splitlines() if row.startswith("Max open files")]
        assert line.split()[3:5] == ["300", "300"]
        result = run_client(port, pid, ledgers=10, adds=500, size=100, rate=None)
        assert (result["adds"], result["errors"]) == (500, 0)
        stop(timeout=60)


def test_the_command_line_repeats_the_open_files_limit() -> None:
    args = build_parser().parse_args(
        ["bench", "compare", "--ledgers", "10000", "--open-files-limit", "1024"]
    )
    assert plan_of(args).open_files_limit == 1024
    assert command_of(args) == (
        "bookiesim bench compare --open-files-limit 1024 --ledgers 10000 --json"
    )
