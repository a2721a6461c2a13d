"""``bookiesim sim faults``: the deterministic fault campaign (docs/simulation.md).

Each seed is one simulated run (``bookiesim.sim``): bookies, writers and recoverers
in virtual time, with crashes, partitions, lost and delayed messages, slow and full disks,
and the invariants of ``reference/invariants.md`` checked after every step. The summary
gives seeds, failures, simulated and wall seconds; each failure its invariant, the end of
its trace and the command that replays it exactly. Exit code 1 when any seed failed, 3
when a worker process died before every seed had a verdict.
Seeds run ``--jobs`` at a time, each in its own process (a seed's run is the same wherever
it runs). Ctrl-C stops the campaign and its workers with one line saying how far it got
(exit code 130).
"""

from __future__ import annotations

import json
import sys
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bookiesim.console import make_console
from bookiesim.sim.bugs import unknown_bugs
from bookiesim.sim.campaign import (
    BUGS,
    CampaignResult,
    available_cores,
    failure_report,
    run_campaign,
)
from bookiesim.sim.plan import FAULT_KINDS
from bookiesim.sim.runner import LEDGER_STORAGES, RunResult, SimSettings, quiet_logs

if TYPE_CHECKING:
    import argparse

__all__ = ["main", "register"]

INTERRUPTED = 130
WORKER_DIED = 3
"""Not 1 ("a seed failed", which ``make campaign`` reads as a bug switch caught): the seeds
the dead worker held have no verdict."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    defaults = SimSettings()
    p = subparsers.add_parser(
        "faults",
        help="deterministic fault campaign: many seeds, invariants after every step",
        description="Run N seeds of the deterministic simulation: real bookies, client and "
        "GC in virtual time on a simulated network and disk, faults from a seeded plan, the "
        "safety invariants (S1-S7 and ours) checked after every step. Prints a summary and, "
        "per failure, the invariant broken, a short trace and the command that replays it.",
    )
    p.add_argument("--seeds", type=int, default=20, help="how many seeds (default 20)")
    p.add_argument("--seed", type=int, default=1, help="first seed (default 1)")
    p.add_argument(
        "--steps", type=int, default=defaults.steps, help=f"plan steps per seed ({defaults.steps})"
    )
    p.add_argument("--bookies", type=int, default=defaults.bookies, help="bookies (5)")
    p.add_argument("--writers", type=int, default=defaults.writers, help="writers (2)")
    p.add_argument("--recoverers", type=int, default=defaults.recoverers, help="recoverers (3)")
    p.add_argument(
        "--faults",
        help=f"comma-separated fault families to use (default all: {','.join(FAULT_KINDS)}; "
        "'none' for none)",
    )
    p.add_argument(
        "--ledger-storage",
        choices=LEDGER_STORAGES,
        default=defaults.ledger_storage,
        help="the bookies' ledgerStorageClass (default by-seed: SortedLedgerStorage for even "
        "seeds, InterleavedLedgerStorage for odd ones)",
    )
    p.add_argument(
        "--journals",
        type=int,
        default=defaults.journals,
        help="journal directories per bookie (default 1; more: a journal each, ledger L's "
        "records in journal L mod n)",
    )
    p.add_argument(
        "--inject-bug",
        action="append",
        default=[],
        metavar="NAME",
        help="re-create a known upstream bug in our code for the campaign (repeat it, or "
        f"give a comma-separated list, for several): {', '.join(BUGS)}",
    )
    p.add_argument("--list-bugs", action="store_true", help="list the bugs --inject-bug knows")
    p.add_argument(
        "--jobs",
        type=int,
        default=available_cores(),
        help="seeds run at once, each in its own process (default: the cores this process "
        f"may use, {available_cores()} here; 1 runs them all in this process)",
    )
    p.add_argument("--trace-lines", type=int, default=15, help="trace lines per failure (15)")
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per failure, then the summary as the last line",
    )
    p.set_defaults(func=main)


def _settings(args: argparse.Namespace) -> SimSettings:
    if (
        args.seeds < 1
        or args.steps < 0
        or args.bookies < 3
        or min(args.writers, args.recoverers) < 1
        or args.journals < 1
        or args.jobs < 1
    ):
        raise ValueError(
            "need --seeds >= 1, --steps >= 0, --bookies >= 3, --writers and --recoverers >= 1, "
            "--journals >= 1, --jobs >= 1"
        )
    kinds = frozenset(FAULT_KINDS)
    if args.faults is not None:
        kinds = frozenset() if args.faults == "none" else frozenset(args.faults.split(","))
        unknown = kinds - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault families {sorted(unknown)}; known: {FAULT_KINDS}")
    bugs = frozenset(b for arg in args.inject_bug for b in arg.split(",") if b)
    if unknown_bugs(bugs):
        raise ValueError(f"unknown bugs {unknown_bugs(bugs)}; known: {', '.join(BUGS)}")
    return SimSettings(
        seed=args.seed,
        steps=args.steps,
        bookies=args.bookies,
        writers=args.writers,
        recoverers=args.recoverers,
        faults=kinds,
        bugs=bugs,
        ledger_storage=args.ledger_storage,
        journals=args.journals,
    )


def main(args: argparse.Namespace) -> int:
    out = make_console(sys.stdout)
    err = make_console(sys.stderr)
    if args.list_bugs:
        if args.json:
            print(json.dumps([{"name": n, "description": d} for n, d in BUGS.items()]))
        else:
            for name, description in BUGS.items():
                out.print(f"{name}: {description}")
        return 0
    try:
        base = _settings(args)
    except ValueError as exc:
        err.print(f"bookiesim sim faults: {exc}")
        return 2
    seeds = range(base.seed, base.seed + args.seeds)
    with (
        quiet_logs(),
        Progress(
            TextColumn("seeds"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failures]} failing"),
            TimeElapsedColumn(),
            console=err,
            disable=not err.is_terminal,
        ) as progress,
    ):
        task = progress.add_task("seeds", total=args.seeds, failures=0)
        finished: list[RunResult] = []

        def done(run: RunResult) -> None:
            finished.append(run)
            progress.update(task, advance=1, failures=sum(not r.ok for r in finished))

        result: CampaignResult | None = None
        died: BaseException | None = None
        try:
            result = run_campaign(base, seeds, done, jobs=args.jobs)
        except* KeyboardInterrupt:  # bare from the workers' loop, in a group from trio.run
            progress.stop()
        except* BrokenProcessPool as broken:
            progress.stop()
            died = broken.exceptions[0]
    if died is not None:
        err.print(
            f"bookiesim sim faults: a worker process died ({died}) after {len(finished)} of "
            f"{args.seeds} seeds; with --jobs 1 every seed runs in this process",
            markup=False,
        )
        return WORKER_DIED
    if result is None:
        failing = ", ".join(str(r.settings.seed) for r in finished if not r.ok)
        err.print(
            f"bookiesim sim faults: interrupted after {len(finished)} of {args.seeds} seeds "
            f"(failing so far: {failing or 'none'}; replay one with --seed N --seeds 1)",
            markup=False,
        )
        return INTERRUPTED
    summary = result.summary()
    if args.json:
        for run in result.failures:
            print(json.dumps(failure_report(run, args.trace_lines)))
        print(json.dumps(summary))
        return 1 if result.failures else 0
    for run in result.failures:
        report = failure_report(run, args.trace_lines)
        out.print(f"seed {report['seed']}: {report['invariant']} broken: {report['message']}")
        for line in report["trace"]:
            out.print(f"    {line}", markup=False)
        out.print(f"  replay: {report['replay']}", markup=False)
    rate = result.simulated_seconds / result.wall_seconds if result.wall_seconds else 0.0
    per_cpu = result.simulated_seconds / result.cpu_seconds if result.cpu_seconds else 0.0
    out.print(
        f"seeds {summary['seeds']}, failures {summary['failures']}, simulated "
        f"{summary['simulated_seconds']:.1f} s, wall {summary['wall_seconds']:.1f} s "
        f"({rate:.0f} simulated s per wall s; {result.jobs} at once, "
        f"{per_cpu:.0f} simulated s per CPU s)"
    )
    return 1 if result.failures else 0
