"""The reports of a hand-made run: its summary (JSON and text), its timeline plot, and the
campaign table that combines run summaries by fault kind."""

from __future__ import annotations

import io
import json
import random
from typing import TYPE_CHECKING

import pytest
from rich.console import Console

from bookiesim.chaos.checker import check_history
from bookiesim.chaos.history import OpKind
from bookiesim.chaos.report import (
    ReportError,
    campaign_markdown,
    campaign_rows,
    load_summaries,
    plot_timeline,
    render_campaign,
    render_summary,
    report_run,
    summarize_run,
)
from tests.chaos.histories import Builder

if TYPE_CHECKING:
    from pathlib import Path

    from bookiesim.chaos.history import History


def run(name: str = "run-1", lose: bool = True) -> History:
    """Two writers at about 20 adds/s for 60 s through a partition and a crash; adds during
    the crash fail or time out; a reader checks every ledger afterwards and (when ``lose``)
    one acknowledged entry is missing from it."""
    b = Builder(meta={"run": name, "seed": 7})
    rng = random.Random(7)
    b.fault("partition", ["b1", "zk1"], (10.0, 20.0))
    b.fault("kill", ["b2"], (30.0, 38.0))
    b.fault("pause", ["b3"], (45.0, 47.0))
    for ledger, writer in ((1, "writer-1"), (2, "writer-2")):
        acked = {}
        for entry in range(1200):
            t = entry * 0.05 + rng.random() * 0.01
            slow = 30.0 <= t <= 38.0
            latency = rng.uniform(0.2, 2.0) if slow else rng.uniform(0.002, 0.02)
            outcome = "ok"
            if slow and rng.random() < 0.1:
                outcome = rng.choice(["fail", "unknown"])
            payload = f"{ledger}:{entry}".encode()
            h = b.at(t).invoke(
                OpKind.ADD, process=writer, node="c1", ledger=ledger, entry=entry, payload=payload
            )
            b._complete(h, outcome, t + latency)
            if outcome == "ok":
                acked[entry] = payload
        if lose and ledger == 1:
            acked.pop(500)
        last = max(acked)
        b.closing(OpKind.CLOSE, ledger, last, 1, (61.0, 61.1))
        h = b.at(62.0).invoke(
            OpKind.READ, process="checker", node="c2", ledger=ledger, entry=0, last=last
        )
        b.at(62.5).ok_read(h, acked)
    return b.history()


def console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=120, color_system=None), out


def test_a_run_summary_counts_ops_faults_adds_and_losses() -> None:
    history = run()
    summary = summarize_run(history, check_history(history))
    assert summary["run"] == "run-1"
    assert summary["faults"] == {"kill": 1, "partition": 1, "pause": 1}
    adds = summary["ops"]["add"]
    assert sum(adds.values()) == 2400
    assert adds["ok"] == summary["acknowledgedAdds"]
    assert adds["fail"] + adds["unknown"] > 0
    assert summary["addsLost"] == 1
    assert summary["violations"] == {"acked-add-lost": 1}
    assert "ledger 1 entry 500 was acknowledged" in summary["violationDetails"][0]["text"]
    json.dumps(summary)  # JSON-able as it is
    c, out = console()
    render_summary(summary, c)
    text = out.getvalue()
    assert "adds lost 1, violations 1" in text
    assert "acked-add-lost: ledger 1 entry 500" in text
    assert "not checked: replication: no replication_check recorded" in text


def test_the_timeline_plot_is_written(tmp_path: Path) -> None:
    history = run()
    path = tmp_path / "timeline.png"
    plot_timeline(history, check_history(history), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 30_000  # three panels of data, not an empty frame


def test_an_empty_run_still_plots(tmp_path: Path) -> None:
    history = Builder().history()
    path = tmp_path / "empty.png"
    plot_timeline(history, check_history(history), path)
    assert path.stat().st_size > 0


def test_the_campaign_table_combines_runs_by_fault_kind(tmp_path: Path) -> None:
    paths = []
    for i, lose in enumerate((True, False, False)):
        history = run(f"run-{i}", lose)
        path = tmp_path / f"run-{i}.json"
        path.write_text(json.dumps(summarize_run(history, check_history(history))))
        paths.append(path)
    # A run with only a kill: counted in the kill row and the total, not the others.
    b = Builder(meta={"run": "kills"})
    b.fault("kill", ["b1"], (0.0, 1.0))
    b.fault("kill", ["b2"], (2.0, 3.0))
    b.add(9, 0, b"x", (4.0, 4.1))
    b.read(9, {0: b"x"}, (5.0, 5.1))
    kills = tmp_path / "kills.json"
    kills.write_text(json.dumps(summarize_run(b.history(), check_history(b.history()))))
    summaries = load_summaries([*paths, kills])
    rows = campaign_rows(summaries)
    acked = sum(s["acknowledgedAdds"] for s in summaries[:3])
    by_kind = {row["fault kind"]: row for row in rows}
    assert list(by_kind) == ["kill", "partition", "pause", "all runs"]
    assert by_kind["kill"] == {
        "fault kind": "kill",
        "runs": 4,
        "faults": 5,
        "acked adds": acked + 1,
        "lost": 1,
        "violations": 1,
    }
    assert by_kind["partition"]["runs"] == 3
    assert by_kind["all runs"]["faults"] == 11
    c, out = console()
    render_campaign(rows, c)
    assert "campaign by fault kind" in out.getvalue()
    markdown = campaign_markdown(rows)
    assert (
        markdown.splitlines()[0]
        == "| fault kind | runs | faults | acked adds | lost | violations |"
    )
    assert f"| all runs | 4 | 11 | {acked + 1} | 1 | 1 |" in markdown


def test_a_file_that_is_not_a_summary_is_refused_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"run": 1}')
    with pytest.raises(ReportError, match=r"bad.json: not a bookiesim-chaos-run-summary"):
        load_summaries([bad])
    bad.write_text("{")
    with pytest.raises(ReportError, match=r"bad.json: cannot read the run summary: "):
        load_summaries([bad])


def test_report_run_writes_the_summary_and_the_plot(tmp_path: Path) -> None:
    history = run("run-9")
    c, out = console()
    result, summary = report_run(history, tmp_path, c)
    assert not result.valid
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written == summary
    assert written["timeline"] == str(tmp_path / "timeline.png")
    assert (tmp_path / "timeline.png").stat().st_size > 30_000
    assert load_summaries([tmp_path / "summary.json"])[0]["run"] == "run-9"
    assert "run run-9: 62.5 s" in out.getvalue()
