"""``bookiesim bench shards`` runs end to end, small: both layouts really ran their adds (the
figures are positive, the clients reported no error), and nothing is left on disk.

Why: the figure it reports (a sharded bookie's ceiling) is only worth something if both
layouts ran the same load to the end; a load client that failed must fail the run, in one
line. Timing thresholds are not tested: benchmarks are not timed tests."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from bookiesim.bench import shards
from bookiesim.cli.main import main

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.slow
def test_bench_shards_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--dir", str(tmp_path), "--adds", "4000", "--ledgers", "4", "--repeats", "1"]
    assert main(["bench", "shards", *args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["benchmark"] == "shards"
    figures = report["figures"]
    assert set(figures) == {
        f"{layout}{what}"
        for layout in ("one", "two")
        for what in ("AddsPerSecond", "CpuUs", "P99Ms")
    }
    for figure in figures.values():
        assert len(figure["runs"]) == 1
        assert figure["min"] > 0
    assert {r["key"] for r in report["ratios"]} == {r.key for r in shards.RATIOS}
    assert list(tmp_path.iterdir()) == []  # both layouts' directories are gone


def test_too_few_ledgers_for_two_clients_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "shards", "--ledgers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["bench shards: --ledgers and --adds must be at least 2"]


def test_an_unknown_layout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="layout 'three'"):
        shards.run_layout("three", tmp_path, adds=10, ledgers=2, size=64)
