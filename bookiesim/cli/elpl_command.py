"""``bookiesim sim elpl``: interleaved vs entry log per ledger, with and without write-close
(BP-32), optionally against upstream's behaviour (issue #2728) and with a bookie lost and
re-replicated, write-close after replication on and off (issue 24); see docs/gc.md."""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import trio
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from bookiesim.bookie.config import ConfigError
from bookiesim.console import make_console
from bookiesim.sim.elpl.experiment import (
    DEFAULT_SETTINGS,
    ExperimentConfig,
    config_of,
    run_experiment,
    run_matrix,
    scaled_settings,
)
from bookiesim.sim.elpl.loss import AUTORECOVERY_SETTINGS
from bookiesim.sim.elpl.report import (
    plot_experiment,
    render_table,
    samples_json,
    summarize_experiment,
    write_json,
)
from bookiesim.sim.elpl.workload import ClusterShape, WorkloadSpec

if TYPE_CHECKING:
    from rich.console import Console

    from bookiesim.sim.elpl.run import RunSpec

__all__ = ["REAL_TIME_LEDGERS", "REAL_TIME_SCALE", "build_config", "main", "register"]

REAL_TIME_SCALE = 360.0
"""Without ``--virtual-time``: an hour of workload in ten seconds."""
REAL_TIME_LEDGERS = 30
PLOT_NAME = "elpl.png"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    defaults = WorkloadSpec()
    shape = ClusterShape()
    p = subparsers.add_parser(
        "elpl",
        help="interleaved vs per-ledger entry logs, write-close, GC and compaction",
        description="Run one workload (ledgers of mixed lifetimes, one slowly written "
        "long-lived ledger, deletes) against in-process bookies with one interleaved entry "
        "log and with a log per ledger, with and without write-close (BP-32), using the real "
        "client and the bookies' real GC. Samples open log files, active logs, "
        "leastUnflushedLogId lag, disk vs live bytes, bytes reclaimed and copied, and "
        "delete-to-reclaim times; prints a table and writes summary.json, samples.json and "
        f"{PLOT_NAME} to --out.",
    )
    p.add_argument(
        "--virtual-time",
        action="store_true",
        help="run under trio's MockClock: hours of workload in seconds",
    )
    p.add_argument(
        "--upstream-behaviour",
        action="store_true",
        help="also run per-ledger bookies as upstream behaves (lazy expiry, GC below "
        "leastUnflushedLogId only, no write-close): issue #2728",
    )
    p.add_argument(
        "--bookie-loss",
        action="store_true",
        help="also run two per-ledger runs that lose a bookie for good at --loss-at, with "
        "auto-recovery re-replicating its ledgers, with and without write-close after "
        "replication (the cluster gets a bookie more than the ensemble if it has none)",
    )
    p.add_argument(
        "--loss-at",
        type=float,
        help="seconds of the uncompressed workload at which the bookie is lost (default: "
        "half the duration)",
    )
    p.add_argument(
        "--write-close",
        choices=("on", "off", "both"),
        default="both",
        help="per-ledger runs with write-close on, off or both (default both)",
    )
    p.add_argument("--seed", type=int, default=1, help="workload and client seed (default 1)")
    p.add_argument("--out", type=Path, help="output directory (default: a new temp dir)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--data-dir", type=Path, help="where the bookies' files go (default: a temp dir)"
    )
    p.add_argument(
        "--time-scale",
        type=float,
        help="compress the workload and the bookies' timers by this factor (default 1 in "
        f"virtual time, {REAL_TIME_SCALE:g} in real time)",
    )
    w = p.add_argument_group("workload (seconds of the uncompressed workload)")
    w.add_argument("--duration", type=float, default=defaults.duration)
    w.add_argument("--drain", type=float, default=defaults.drain)
    w.add_argument(
        "--ledgers",
        type=int,
        help=f"(default {defaults.ledgers}; {REAL_TIME_LEDGERS} in real time)",
    )
    w.add_argument("--long-fraction", type=float, default=defaults.long_fraction)
    w.add_argument("--short-lifetime", type=float, default=defaults.short_lifetime)
    w.add_argument("--long-lifetime", type=float, default=defaults.long_lifetime)
    w.add_argument("--add-rate", type=float, default=defaults.add_rate, help="entries/s")
    w.add_argument(
        "--entry-size",
        type=_size_range,
        default=defaults.entry_size,
        help="bytes: N or MIN-MAX (default %(default)s)",
    )
    w.add_argument("--delete-fraction", type=float, default=defaults.delete_fraction)
    w.add_argument("--retention", type=float, default=defaults.retention)
    w.add_argument("--slow-ledgers", type=int, default=defaults.slow_ledgers)
    w.add_argument("--slow-interval", type=float, default=defaults.slow_interval)
    w.add_argument("--sample-interval", type=float, default=defaults.sample_interval)
    c = p.add_argument_group("cluster")
    c.add_argument("--bookies", type=int, default=shape.bookies)
    c.add_argument("-e", "--ensemble", type=int, default=shape.ensemble)
    c.add_argument("-w", "--write-quorum", type=int, default=shape.write_quorum)
    c.add_argument("-a", "--ack-quorum", type=int, default=shape.ack_quorum)
    c.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a bookie setting for every run, after scaling (repeatable; e.g. "
        "--set gcWaitTime=30000)",
    )
    p.set_defaults(func=main)


def _size_range(text: str) -> tuple[int, int]:
    try:
        low, _, high = text.partition("-")
        return int(low), int(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or MIN-MAX bytes, got {text!r}") from None


def build_config(args: argparse.Namespace) -> ExperimentConfig:
    """The experiment the arguments ask for; ``ValueError``/``ConfigError`` if they are bad."""
    virtual = bool(args.virtual_time)
    scale = (
        args.time_scale if args.time_scale is not None else (1.0 if virtual else REAL_TIME_SCALE)
    )
    ledgers = (
        args.ledgers
        if args.ledgers is not None
        else (WorkloadSpec().ledgers if virtual else REAL_TIME_LEDGERS)
    )
    workload = WorkloadSpec(
        duration=args.duration,
        drain=args.drain,
        ledgers=ledgers,
        long_fraction=args.long_fraction,
        short_lifetime=args.short_lifetime,
        long_lifetime=args.long_lifetime,
        add_rate=args.add_rate,
        entry_size=args.entry_size,
        delete_fraction=args.delete_fraction,
        retention=args.retention,
        slow_ledgers=args.slow_ledgers,
        slow_interval=args.slow_interval,
        sample_interval=args.sample_interval,
    )
    if scale != 1:
        workload = workload.compressed(scale)
    loss_at = args.loss_at if args.loss_at is not None else args.duration / 2
    if args.bookie_loss and not 0 <= loss_at < args.duration:
        raise ValueError(f"--loss-at {loss_at:g}: must be within the workload's duration")
    defaults = {**DEFAULT_SETTINGS, **(AUTORECOVERY_SETTINGS if args.bookie_loss else {})}
    settings = scaled_settings(defaults, scale)
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        settings[key.strip()] = value.strip()
    # Validates keys, values and their combinations now, and shows typed values in the output.
    typed = config_of(settings).to_mapping()
    settings = {key: typed[key] for key in settings}
    bookies = args.bookies
    if args.bookie_loss:
        bookies = max(bookies, args.ensemble + 1)  # the lost bookie needs a replacement
    shape = ClusterShape(bookies, args.ensemble, args.write_quorum, args.ack_quorum)
    runs: tuple[RunSpec, ...] = tuple(
        run_matrix(
            write_close=args.write_close,
            upstream=args.upstream_behaviour,
            bookie_loss=args.bookie_loss,
        )
    )
    return ExperimentConfig(
        workload=workload,
        shape=shape,
        settings=settings,
        runs=runs,
        seed=args.seed,
        virtual_time=virtual,
        time_scale=scale,
        data_dir=args.data_dir,
        loss_at=loss_at / scale,
    )


def main(args: argparse.Namespace) -> int:
    err = make_console(sys.stderr)
    try:
        config = build_config(args)
    except (ValueError, ConfigError) as exc:
        err.print(f"bookiesim sim elpl: {exc}")
        return 2
    out: Path = args.out or Path(
        tempfile.mkdtemp(prefix=f"bookiesim-elpl-{datetime.datetime.now():%Y%m%d-%H%M%S}-")
    )
    out.mkdir(parents=True, exist_ok=True)
    done = _Done()
    try:
        return _run(args, config, out, err, done)
    except BaseException as exc:
        # Ctrl-C: trio ends the run in progress (the runs' data dirs are removed on the way
        # out); one line says how far it got instead of a traceback.
        if not _interrupted(exc):
            raise
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)
        err.print(f"bookiesim sim elpl: interrupted: {done.describe(config)}", markup=False)
        return INTERRUPTED


INTERRUPTED = 130
"""Exit code after Ctrl-C, the shell's convention for SIGINT."""


def _interrupted(exc: BaseException) -> bool:
    """``exc`` is Ctrl-C: a ``KeyboardInterrupt``, or a group of them (trio's nurseries may
    wrap it), cancellations aside."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = [e for e in exc.exceptions if not isinstance(e, trio.Cancelled)]
        return bool(leaves) and all(_interrupted(e) for e in leaves)
    return isinstance(exc, KeyboardInterrupt)


@dataclass
class _Done:
    """How far the experiment got: runs started, and the clock of the last one."""

    started: list[RunSpec] = field(default_factory=list)
    clock: float = 0.0
    summarizing: bool = False

    def describe(self, config: ExperimentConfig) -> str:
        total = len(config.runs)
        if self.summarizing:
            return f"all {total} runs finished, stopped while writing the summary and plot"
        if not self.started:
            return f"before the first of {total} runs; nothing written"
        unit = "min virtual" if config.virtual_time else "min"
        end = config.workload.end
        return (
            f"{len(self.started) - 1} of {total} runs finished, run '{self.started[-1].name}' "
            f"stopped at {self.clock / 60:,.1f}/{end / 60:,.1f} {unit}; nothing written "
            "(an interrupted experiment has no summary)"
        )


def _run(
    args: argparse.Namespace, config: ExperimentConfig, out: Path, err: Console, done: _Done
) -> int:
    tasks: dict[RunSpec, TaskID] = {}
    end = config.workload.end
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[clock]}"),
        TimeElapsedColumn(),
        console=err,
        disable=not err.is_terminal,
    ) as progress:
        for run in config.runs:
            tasks[run] = progress.add_task(run.name, total=end, clock="", start=False)

        def started(run: RunSpec) -> None:
            done.started.append(run)
            done.clock = 0.0
            progress.start_task(tasks[run])

        def advanced(run: RunSpec, t: float) -> None:
            done.clock = t
            clock = f"{t / 60:,.1f}/{end / 60:,.1f} min" + (
                " virtual" if config.virtual_time else ""
            )
            progress.update(tasks[run], completed=min(t, end), clock=clock)

        result = run_experiment(config, on_run_start=started, progress=advanced)
    done.summarizing = True
    summary = summarize_experiment(result)
    plot = out / PLOT_NAME
    plot_experiment(result, summary, plot)
    summary |= {"outputDir": str(out), "plot": str(plot)}
    write_json(summary, out / "summary.json")
    (out / "samples.json").write_text(json.dumps(samples_json(result)) + "\n")
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        console = make_console(sys.stdout)
        if not console.is_terminal:
            # rich assumes 80 columns in a pipe and would wrap every cell of the table.
            console.width = max(console.width, 170)
        render_table(summary, console)
        console.print(f"plot, summary.json and samples.json in {out}")
    return 0
