"""Reporting the ELPL experiment: a summary per run, a rich table, JSON, and a PNG over time.

Figures a reader checks against BP-32 and the issue:

* ``copiedBytes`` / ``writeAmplification``: compaction's copies over bytes written; zero in
  per-ledger mode (deleting a ledger frees whole files), positive with interleaved logs.
* ``reclaimSeconds``: delete-to-reclaim, compared in ``bounds`` with ``flushInterval +
  gcWaitTime`` (write-close: the log is rotated at close, flushed at the next checkpoint,
  collected at the next pass) and ``expiry + flushInterval + gcWaitTime`` (without it the
  log first has to expire, counted from the last write, which is before the delete).
* ``peakOpenLogFiles`` / ``peakActiveLogs``: the descriptor growth BP-32 is about.
* ``slowLedgerPinsPointer`` and ``reclaimedLedgers``: issue #2728 — under upstream's GC a
  pinned leastUnflushedLogId stops all reclaim; ours is pinned too but reclaims anyway.
* ``bookieLoss`` (the bookie-loss runs, issue 24): on the bookies that received the lost
  bookie's copies, ``sealSeconds`` from the copy to its log no longer being active — at once
  with write-close after replication, after the log's expiry without — and
  ``reclaimAfterCopySeconds`` for the copied ledgers deleted later.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import TYPE_CHECKING, Any

from rich.table import Table

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

    from bookiesim.sim.elpl.experiment import ExperimentResult
    from bookiesim.sim.elpl.run import RunResult

__all__ = [
    "plot_experiment",
    "render_loss_table",
    "render_table",
    "summarize_experiment",
    "summarize_run",
]

MIB = 1 << 20


def _percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize_run(result: RunResult) -> dict[str, Any]:
    samples = result.samples
    last = samples[-1]
    delays = [d for _, _, d in result.reclaims if d is not None]
    run = result.run
    pinned = [s.slow_pins_pointer for s in samples if s.slow_pins_pointer is not None]
    return {
        "run": run.name,
        "mode": "per-ledger" if run.per_ledger else "interleaved",
        "writeClose": run.sends_write_close,
        "upstreamBehaviour": run.upstream,
        "peakOpenLogFiles": max(s.open_log_files for s in samples),
        "meanOpenLogFiles": sum(s.open_log_files for s in samples) / len(samples),
        "peakActiveLogs": max(s.active_logs for s in samples),
        "maxLag": max(s.lag for s in samples),
        "finalLag": last.lag,
        "slowLedgerPinsPointer": bool(pinned) and all(pinned),
        "peakDiskBytes": max(s.disk_bytes for s in samples),
        "finalDiskBytes": last.disk_bytes,
        "finalLiveBytes": last.live_bytes,
        "finalDiskOverLive": last.disk_bytes / last.live_bytes if last.live_bytes else None,
        "writtenBytes": result.written_bytes,
        "reclaimedBytes": result.reclaimed_by_deletion + result.reclaimed_by_compaction,
        "reclaimedByDeletion": result.reclaimed_by_deletion,
        "reclaimedByCompaction": result.reclaimed_by_compaction,
        "copiedBytes": result.copied_bytes,
        "copiedEntries": result.copied_entries,
        "writeAmplification": (
            result.copied_bytes / result.written_bytes if result.written_bytes else 0.0
        ),
        "deletedLedgers": len(result.reclaims),
        "reclaimedLedgers": len(delays),
        "reclaimSeconds": {
            "p50": _percentile(delays, 50),
            "p95": _percentile(delays, 95),
            "max": max(delays, default=None),
        },
        "gcPasses": result.gc_passes,
        "maxGcPassSeconds": result.max_gc_pass_seconds,
        "rotations": dict(sorted(result.rotations.items())),
        "writeClosesSent": result.write_closes_sent,
        "wallSeconds": round(result.wall_seconds, 3),
        **_loss_summary(result),
    }


def _loss_summary(result: RunResult) -> dict[str, Any]:
    if not result.run.bookie_loss:
        return {}
    loss = dict(result.loss or {})
    loss.pop("copyRecords", None)
    return {
        "replicationWriteClose": result.run.replication_write_close,
        "writesFenced": result.writes_fenced,
        "bookieLoss": loss,
    }


def summarize_experiment(result: ExperimentResult) -> dict[str, Any]:
    config = result.config
    bounds = config.bounds
    runs = [summarize_run(r) for r in result.runs]
    interleaved = [r["copiedBytes"] for r in runs if r["mode"] == "interleaved"]
    per_ledger = [r["copiedBytes"] for r in runs if r["mode"] == "per-ledger"]
    ratio: float | None = None
    if interleaved and per_ledger and max(per_ledger) > 0:
        ratio = max(interleaved) / max(per_ledger)
    workload = dataclasses.asdict(config.workload)
    return {
        "experiment": "elpl",
        "seed": config.seed,
        "virtualTime": config.virtual_time,
        "timeScale": config.time_scale,
        "workload": workload,
        "ledgersPlanned": len(result.plans),
        "cluster": dataclasses.asdict(config.shape),
        "bookieSettings": dict(config.settings),
        "bounds": {
            **bounds,
            "flushPlusGcWait": bounds["flushInterval"] + bounds["gcWaitTime"],
            "expiryPlusFlushPlusGcWait": (
                bounds["expiry"] + bounds["flushInterval"] + bounds["gcWaitTime"]
            ),
        },
        "copiedBytes": {"interleaved": max(interleaved, default=None), "perLedger": per_ledger},
        "copiedRatioInterleavedOverPerLedger": ratio,
        "runs": runs,
    }


def _mib(n: float | None) -> str:
    return "-" if n is None else f"{n / MIB:,.1f}"


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def render_table(summary: dict[str, Any], console: Console) -> None:
    bounds = summary["bounds"]
    table = Table(
        title="bookiesim sim elpl",
        caption=(
            f"delete→reclaim bounds: flushInterval + gcWaitTime = "
            f"{bounds['flushPlusGcWait']:g} s; expiry + flushInterval + gcWaitTime = "
            f"{bounds['expiryPlusFlushPlusGcWait']:g} s. Bookie settings: "
            + ", ".join(f"{k}={v}" for k, v in summary["bookieSettings"].items())
        ),
    )
    table.add_column("run")
    for name in (
        "open log files\npeak",
        "active logs\npeak",
        "lag max\n(pinned)",
        "disk/live\nat end",
        "disk peak\nMiB",
        "reclaimed\nMiB",
        "copied\nMiB",
        "write\nampl.",
        "ledgers\nreclaimed",
        "delete→reclaim s\np50 / p95 / max",
    ):
        table.add_column(name, justify="right")
    for r in summary["runs"]:
        ratio = r["finalDiskOverLive"]
        reclaim = r["reclaimSeconds"]
        table.add_row(
            r["run"],
            str(r["peakOpenLogFiles"]),
            str(r["peakActiveLogs"]),
            f"{r['maxLag']} ({'yes' if r['slowLedgerPinsPointer'] else 'no'})",
            "-" if ratio is None else f"{ratio:.2f}",
            _mib(r["peakDiskBytes"]),
            _mib(r["reclaimedBytes"]),
            _mib(r["copiedBytes"]),
            f"{r['writeAmplification']:.3f}",
            f"{r['reclaimedLedgers']}/{r['deletedLedgers']}",
            " / ".join(_secs(reclaim[q]) for q in ("p50", "p95", "max")),
        )
    console.print(table)
    render_loss_table(summary, console)
    ratio = summary["copiedRatioInterleavedOverPerLedger"]
    copied = summary["copiedBytes"]
    if copied["interleaved"] is not None and copied["perLedger"]:
        if ratio is None:
            console.print(
                f"compaction copied {_mib(copied['interleaved'])} MiB interleaved, "
                f"{_mib(max(copied['perLedger']))} MiB per-ledger"
            )
        else:
            console.print(f"compaction copied {ratio:.1f}x more interleaved than per-ledger")


def render_loss_table(summary: dict[str, Any], console: Console) -> None:
    """The bookie-loss runs: what re-replication left on the receiving bookies."""
    runs = [r for r in summary["runs"] if r.get("bookieLoss")]
    if not runs:
        return
    table = Table(
        title="bookie lost: the receiving bookies",
        caption=f"expiry = {summary['bounds']['expiry']:g} s; "
        f"flushInterval + gcWaitTime = {summary['bounds']['flushPlusGcWait']:g} s",
    )
    table.add_column("run")
    for name in (
        "lost at s",
        "ledgers\nhealed",
        "last heal\ns after loss",
        "copies sealed",
        "copy→sealed s\np50 / max",
        "rotations\nreplication / expiry",
        "deleted after copy\nreclaimed",
        "delete→reclaim s\np50 / max",
    ):
        table.add_column(name, justify="right")
    for r in runs:
        loss = r["bookieLoss"]
        seal, reclaim = loss["sealSeconds"], loss["reclaimAfterCopySeconds"]
        rot = r["rotations"]
        table.add_row(
            r["run"],
            _secs(loss["lossAt"]),
            f"{loss['healedLedgers']}/{loss['affectedLedgers']}",
            _secs(loss["lastHealSeconds"]),
            f"{loss['copiesSealed']}/{loss['copies']}",
            f"{_secs(seal['p50'])} / {_secs(seal['max'])}",
            f"{rot.get('replication', 0)} / {rot.get('expiry', 0)}",
            f"{loss['reclaimedAfterCopy']}/{loss['deletedAfterCopy']}",
            f"{_secs(reclaim['p50'])} / {_secs(reclaim['max'])}",
        )
    console.print(table)


def _plot_loss(active: Any, seal: Any, run: RunResult, end: float, colour: str, style: str) -> None:
    """The bookie-loss row of the plot, for one run."""
    label = run.run.name
    samples = [s for s in run.samples if s.copies_active is not None]
    active.plot(
        [s.t / 60 for s in samples],
        [s.copies_active for s in samples],
        label=label,
        color=colour,
        linestyle=style,
    )
    copies = (run.loss or {}).get("copyRecords", [])
    sealed = [
        (c["at"] / 60, max(c["sealedAt"] - c["at"], 0.1))
        for c in copies
        if c["sealedAt"] is not None
    ]
    open_ = [(c["at"] / 60, max(end - c["at"], 0.1)) for c in copies if c["sealedAt"] is None]
    if sealed:
        seal.scatter(*zip(*sealed, strict=True), s=10, color=colour, label=label)
    if open_:
        seal.scatter(*zip(*open_, strict=True), s=18, marker="x", color=colour)
    active.legend(fontsize=8)


def write_json(summary: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(summary, indent=2) + "\n")


def samples_json(result: ExperimentResult) -> list[dict[str, Any]]:
    """Every run's samples and per-ledger reclaim times, for plotting elsewhere."""
    return [
        {
            "run": r.run.name,
            "samples": [dataclasses.asdict(s) for s in r.samples],
            "reclaims": [
                {"ledgerId": lid, "deletedAt": at, "seconds": delay}
                for lid, at, delay in r.reclaims
            ],
            "copies": [] if r.loss is None else r.loss["copyRecords"],
        }
        for r in result.runs
    ]


def plot_experiment(result: ExperimentResult, summary: dict[str, Any], path: Path) -> None:
    """One panel per measure, one line per run, time on the x axis (minutes)."""
    # matplotlib loads here, not at import: it takes about a second, and only the plot needs
    # it (the CLI imports this module to build its parser; the tests use the numbers).
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    losses = [r for r in result.runs if r.run.bookie_loss]
    rows = 5 if losses else 4
    fig, axes = plt.subplots(rows, 2, figsize=(12, 3.25 * rows), dpi=80, sharex=True)
    panels = axes.flatten()
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    bounds = summary["bounds"]
    end_minutes = result.config.workload.end / 60
    # Runs often coincide (write-close off and upstream open as many files); distinct line
    # styles keep every run visible where the lines overlap.
    styles = ["-", "-", "--", ":", "-."]
    for i, run in enumerate(result.runs):
        colour = colours[i % len(colours)]
        style = styles[i % len(styles)]
        t = [s.t / 60 for s in run.samples]
        label = run.run.name
        series = [
            [s.open_log_files for s in run.samples],
            [s.active_logs for s in run.samples],
            [s.lag for s in run.samples],
            [s.disk_bytes / MIB for s in run.samples],
            [s.reclaimed_bytes / MIB for s in run.samples],
            [s.copied_bytes / MIB for s in run.samples],
        ]
        for ax, values in zip(panels, series, strict=False):
            ax.plot(t, values, label=label, color=colour, linestyle=style)
        panels[7].plot(
            t, [s.awaiting_reclaim for s in run.samples], label=label, color=colour, linestyle=style
        )
        # Log scale: write-close reclaims within seconds, upstream not within the run.
        done = [(at / 60, max(d, 0.1)) for _, at, d in run.reclaims if d is not None]
        waiting = [
            (at / 60, max(result.config.workload.end - at, 0.1))
            for _, at, d in run.reclaims
            if d is None
        ]
        if done:
            panels[6].scatter(*zip(*done, strict=True), s=10, color=colour)
        if waiting:
            panels[6].scatter(*zip(*waiting, strict=True), s=18, marker="x", color=colour)
        if run.run.bookie_loss:
            _plot_loss(panels[8], panels[9], run, result.config.workload.end, colour, style)
    panels[6].set_yscale("log")
    if result.runs:
        first = result.runs[0]
        panels[3].plot(
            [s.t / 60 for s in first.samples],
            [s.live_bytes / MIB for s in first.samples],
            color="black",
            linestyle="--",
            label="live bytes",
        )
    panels[6].axhline(bounds["flushPlusGcWait"], color="grey", linestyle=":", linewidth=1)
    panels[6].axhline(
        bounds["expiryPlusFlushPlusGcWait"], color="grey", linestyle="--", linewidth=1
    )
    titles = [
        "open entry-log files (all bookies)",
        "active entry logs (all bookies)",
        "leastUnflushedLogId lag (newest log id + 1 - pointer, worst bookie)",
        "disk bytes in entry logs vs live bytes (MiB)",
        "bytes reclaimed by GC (MiB, cumulative)",
        "bytes copied by compaction (MiB, cumulative)",
        "delete → reclaim (s) by deletion time; x: not reclaimed by the end (≥);\n"
        "dotted: flushInterval + gcWaitTime, dashed: + expiry",
        "deleted ledgers awaiting reclaim",
    ]
    if losses:
        panels[9].set_yscale("log")
        panels[9].axhline(bounds["expiry"], color="grey", linestyle="--", linewidth=1)
        titles += [
            "bookie lost: re-replicated ledgers still in an active log on their receiver",
            "bookie lost: copy → its log sealed on the receiver (s), by copy time;\n"
            "x: not sealed by the end (≥); dashed: expiry",
        ]
    for ax, title in zip(panels, titles, strict=True):
        ax.set_title(title, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.set_xlim(0, end_minutes)
    for ax in axes[-1]:
        ax.set_xlabel("minutes")
    panels[3].legend(fontsize=8)
    panels[0].legend(fontsize=8)
    mode = "virtual time" if result.config.virtual_time else "real time"
    fig.suptitle(
        f"bookiesim sim elpl — {len(result.plans)} ledgers, seed {result.config.seed}, {mode}",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
