"""``bookiesim bench handoff`` runs end to end, small, and its other process checks what it got.

Why: the figure it reports (what handing an add to a second process costs) is only worth
something if the bytes really crossed; a ring that dropped or reordered records must fail
the run, not time garbage. Timing thresholds are not tested: benchmarks are not timed tests.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from bookiesim.bench import handoff
from bookiesim.bench.storage import entry_bodies
from bookiesim.cli.main import main

if TYPE_CHECKING:
    from pathlib import Path


def test_bench_handoff_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--dir", str(tmp_path), "--adds", "30000", "--repeats", "1", "--json"]
    assert main(["bench", "handoff", *args]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["benchmark"] == "handoff"
    figures = report["figures"]
    assert set(figures) == {"inProcessUs", "producerUs", "consumerUs"}
    for figure in figures.values():
        assert len(figure["runs"]) == 1
        assert figure["min"] > 0
    assert {r["key"] for r in report["ratios"]} == {r.key for r in handoff.RATIOS}
    assert list(tmp_path.iterdir()) == []  # the journal it wrote is gone


def test_a_run_whose_bytes_did_not_arrive_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = entry_bodies(64, 10)
    run = handoff.measure_handoff(bodies, 5000, 7)  # 7: groups that do not divide the adds
    assert run.producer_us > 0
    assert run.consumer_us > 0
    # Expect other bytes than were sent: the consumer's report no longer matches.
    real = handoff._checksum
    monkeypatch.setattr(handoff, "_checksum", lambda b, n: real(b[1:] + b[:1], n))
    with pytest.raises(RuntimeError, match="read other bytes"):
        handoff.measure_handoff(bodies, 5000, 7)
