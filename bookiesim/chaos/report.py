"""Reports of chaos runs (issue 33, deliverable 6): per run a summary (JSON, rich tables) and a
timeline plot; per campaign a table by fault kind combining run summaries.

A run summary counts operations by kind and outcome, faults by kind, the acknowledged adds,
the adds lost (distinct entries a violation says an acknowledged add is gone from, or changed
in: :data:`bookiesim.chaos.checker.LOST_KINDS`) and the violations by kind, with their full
text. The campaign table has one row per fault kind over the runs that injected it (a run
with several kinds counts in each of their rows) and a last row over all runs.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from rich.table import Table

from bookiesim.chaos.checker import check_history
from bookiesim.chaos.history import OpKind

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

    from bookiesim.chaos.checker import CheckResult
    from bookiesim.chaos.history import History, Op

__all__ = [
    "CAMPAIGN_COLUMNS",
    "ReportError",
    "campaign_markdown",
    "campaign_rows",
    "load_summaries",
    "plot_timeline",
    "render_campaign",
    "render_summary",
    "report_run",
    "summarize_run",
]

SUMMARY_FORMAT = "bookiesim-chaos-run-summary"
SUMMARY_NAME = "summary.json"
TIMELINE_NAME = "timeline.png"
ALL_RUNS = "all runs"
CAMPAIGN_COLUMNS = ("fault kind", "runs", "faults", "acked adds", "lost", "violations")


class ReportError(Exception):
    """A summary that cannot be used; the message is one line naming the file."""


def summarize_run(history: History, result: CheckResult, name: str | None = None) -> dict[str, Any]:
    """The JSON-able summary of one run (what :func:`campaign_rows` combines)."""
    ops: dict[str, Counter[str]] = defaultdict(Counter)
    for op in history.ops:
        ops[op.kind][op.outcome] += 1
    return {
        "format": SUMMARY_FORMAT,
        "run": name or str(history.meta.get("run", "run")),
        "replay": history.replay,
        "seconds": round(history.end, 3),
        "meta": history.meta,
        "ops": {kind: dict(sorted(c.items())) for kind, c in sorted(ops.items())},
        "faults": dict(sorted(Counter(f.kind for f in history.faults).items())),
        "acknowledgedAdds": result.acknowledged_adds,
        "addsLost": len(result.lost_adds()),
        "violations": dict(sorted(result.by_kind().items())),
        "violationDetails": [v.to_json() for v in result.violations],
        "skipped": result.skipped,
        "tornTail": history.torn_tail,
    }


def report_run(
    history: History, out: Path, console: Console, *, plot: bool = True
) -> tuple[CheckResult, dict[str, Any]]:
    """Checks a run's history, prints its summary and writes :data:`SUMMARY_NAME` and
    :data:`TIMELINE_NAME` into ``out`` (which must exist): the harness's one call per run.

    The plot needs matplotlib (``bookiesim[all]``); without it the summary says so in one
    line and the run's verdict stands.
    """
    result = check_history(history)
    summary = summarize_run(history, result)
    if plot:
        try:
            plot_timeline(history, result, out / TIMELINE_NAME)
            summary["timeline"] = str(out / TIMELINE_NAME)
        except ImportError as e:
            summary["timeline"] = None
            console.print(f"timeline not drawn: {e} (pip install 'bookiesim[all]')", markup=False)
    (out / SUMMARY_NAME).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    render_summary(summary, console)
    return result, summary


def render_summary(summary: dict[str, Any], console: Console) -> None:
    """Operations by kind and outcome, faults by kind, the totals, then each violation."""
    table = Table(title=f"run {summary['run']}: {summary['seconds']:g} s")
    for column in ("operation", "ok", "fail", "unknown"):
        table.add_column(column, justify="left" if column == "operation" else "right")
    for kind, counts in summary["ops"].items():
        table.add_row(kind, *(str(counts.get(o, 0)) for o in ("ok", "fail", "unknown")))
    console.print(table)
    faults = Table(title="faults")
    faults.add_column("kind")
    faults.add_column("injected", justify="right")
    for kind, count in summary["faults"].items():
        faults.add_row(kind, str(count))
    if summary["faults"]:
        console.print(faults)
    else:
        console.print("no fault injected")
    total = sum(summary["violations"].values())
    console.print(
        f"acknowledged adds {summary['acknowledgedAdds']}, adds lost {summary['addsLost']}, "
        f"violations {total}"
        + "".join(f"\n  {kind}: {n}" for kind, n in summary["violations"].items()),
        highlight=False,
    )
    for skipped in summary["skipped"]:
        console.print(f"not checked: {skipped}", highlight=False)
    for detail in summary["violationDetails"]:
        # The text holds op and fault descriptions with brackets: not rich markup.
        console.print(detail["text"], markup=False, highlight=False)


def load_summaries(paths: list[Path]) -> list[dict[str, Any]]:
    """Run summaries from JSON files; :class:`ReportError` in one line on a bad one."""
    summaries = []
    for path in paths:
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ReportError(f"{path}: cannot read the run summary: {e}") from None
        if not isinstance(summary, dict) or summary.get("format") != SUMMARY_FORMAT:
            raise ReportError(f"{path}: not a {SUMMARY_FORMAT} (written by summarize_run)")
        summaries.append(summary)
    return summaries


def campaign_rows(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per fault kind (the runs that injected it), then the row over all runs."""
    rows: dict[str, dict[str, Any]] = {}

    def add(key: str, summary: dict[str, Any], faults: int) -> None:
        row = rows.setdefault(key, dict.fromkeys(CAMPAIGN_COLUMNS[1:], 0))
        row["runs"] += 1
        row["faults"] += faults
        row["acked adds"] += summary["acknowledgedAdds"]
        row["lost"] += summary["addsLost"]
        row["violations"] += sum(summary["violations"].values())

    for summary in summaries:
        for kind, count in summary["faults"].items():
            add(kind, summary, count)
    ordered = [{"fault kind": kind, **rows[kind]} for kind in sorted(rows)]
    for summary in summaries:
        add(ALL_RUNS, summary, sum(summary["faults"].values()))
    if summaries:
        ordered.append({"fault kind": ALL_RUNS, **rows[ALL_RUNS]})
    return ordered


def render_campaign(rows: list[dict[str, Any]], console: Console) -> None:
    table = Table(title="campaign by fault kind")
    for column in CAMPAIGN_COLUMNS:
        table.add_column(column, justify="left" if column == "fault kind" else "right")
    for row in rows:
        table.add_row(*(str(row[c]) for c in CAMPAIGN_COLUMNS))
    console.print(table)


def campaign_markdown(rows: list[dict[str, Any]]) -> str:
    """The campaign table as Markdown, for BENCHMARKS.md."""
    lines = ["| " + " | ".join(CAMPAIGN_COLUMNS) + " |"]
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(CAMPAIGN_COLUMNS) - 1)) + "|")
    lines += ["| " + " | ".join(str(row[c]) for c in CAMPAIGN_COLUMNS) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _bin_width(seconds: float) -> float:
    """About 100 bins over the run, at least a second each."""
    return max(1.0, seconds / 100)


def plot_timeline(history: History, result: CheckResult, path: Path) -> None:
    """The run's timeline as a PNG: adds per second and add latency per workload, failed and
    unknown operations marked, faults as bands shaded by kind, violations as red lines."""
    # matplotlib loads here, not at import: it takes about a second and only the plot needs
    # it (a harness imports this module for the summaries).
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    end = max(history.end, 1.0)
    width = _bin_width(end)
    bins = int(end // width) + 1
    adds: dict[str, list[Op]] = defaultdict(list)
    for op in history.ops:
        if op.kind == OpKind.ADD and op.outcome == "ok" and op.end is not None:
            adds[op.workload].append(op)
    fig, (rate, latency, others) = plt.subplots(
        3, 1, figsize=(12, 8), dpi=80, sharex=True, height_ratios=[3, 3, 2]
    )
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (workload, ops) in enumerate(sorted(adds.items())):
        colour = colours[i % len(colours)]
        counts = [0] * bins
        for op in ops:
            assert op.end is not None
            counts[int(op.end // width)] += 1
        rate.step(
            [b * width for b in range(bins)],
            [c / width for c in counts],
            where="post",
            color=colour,
            label=workload,
        )
        # Floored at 10 µs: the log scale has no place for a zero.
        done = [(op.end, max(1000 * (op.end - op.start), 0.01)) for op in ops if op.end is not None]
        latency.scatter(
            [t for t, _ in done],
            [ms for _, ms in done],
            s=4,
            color=colour,
            label=workload,
        )
    rate.set_ylabel("acknowledged adds/s")
    latency.set_ylabel("add latency (ms)")
    if adds:
        latency.set_yscale("log")
    # Every operation that did not end ok, by kind, on its own lane: when and what failed.
    kinds = sorted({op.kind for op in history.ops})
    lane = {kind: i for i, kind in enumerate(kinds)}
    for outcome, marker, colour in (("fail", "x", "tab:red"), ("unknown", "o", "tab:orange")):
        marked = [op for op in history.ops if op.outcome == outcome]
        others.scatter(
            [end if op.end is None else op.end for op in marked],
            [lane[op.kind] for op in marked],
            marker=marker,
            s=18,
            color=colour,
            facecolors="none" if marker == "o" else colour,
            label=f"{outcome} ({len(marked)})",
        )
    others.set_yticks(range(len(kinds)), kinds)
    others.set_ylim(-0.5, max(len(kinds), 1) - 0.5)
    others.set_xlabel("seconds since the run's start")
    others.set_title("operations that did not end ok", fontsize=9, loc="left")
    fault_kinds = sorted({f.kind for f in history.faults})
    palette = plt.get_cmap("tab10")
    shade = {kind: palette(i % 10) for i, kind in enumerate(fault_kinds)}
    for ax in (rate, latency, others):
        for fault in history.faults:
            ax.axvspan(fault.start, fault.until(history.end), color=shade[fault.kind], alpha=0.25)
        for violation in result.violations:
            ax.axvline(max(op.start for op in violation.ops), color="red", lw=1, ls="--")
        ax.set_xlim(0, end)
    # One legend entry per fault kind (the bands), beside the workloads'.
    handles, labels = rate.get_legend_handles_labels()
    for kind in fault_kinds:
        handles.append(Patch(color=shade[kind], alpha=0.25))
        labels.append(f"fault: {kind}")
    if result.violations:
        handles.append(Line2D([], [], color="red", ls="--"))
        labels.append(f"violation ({len(result.violations)})")
    if handles:
        rate.legend(handles, labels, loc="upper right", fontsize=8, ncols=2)
    if history.ops:
        others.legend(loc="upper right", fontsize=8)
    title = str(history.meta.get("run", path.stem))
    rate.set_title(
        f"{title}: {result.acknowledged_adds} acknowledged adds, {len(history.faults)} faults, "
        f"{len(result.violations)} violations",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
