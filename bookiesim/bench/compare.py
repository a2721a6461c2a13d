"""``bookiesim bench compare``: bookiesim's bookie beside upstream's, under the same load.

One load runs against one bookie at a time: bookiesim's (``bookiesim bookie``) and upstream's
(``server.Main`` from an installation, see :mod:`bookiesim.bench.upstream`), both with the
same upstream keys (``SETTINGS``: ``journalSyncData=true``, a 2 ms group wait,
``flushInterval`` 10 s, entry log per ledger with 500 active logs, ``SortedLedgerStorage``),
their journal and ledger dirs in one fresh directory (the same disk), upstream with its
default 1 GiB heap (:mod:`bookiesim.bench.compare_run` runs one).

The load (``--load``): bookiesim's load client (``bookiesim``, the default; a pipelining v3
client sending entries with real digests, as a BookKeeper client does), upstream's own Java
client (``java``: a program of ours against its public API, compiled at run time against the
installation's jars, :mod:`bookiesim.bench.java_load`; both bookies then register in a
ZooKeeper, where it finds them), or ``both``, each load its own pairs and its own table.
Either sends 1 KiB entries with CRC32C digests to ledgers of E=Qw=Qa=1, round robin, at most
2,000 adds in flight, over ``--channels`` connections per bookie (upstream's
``numChannelsPerBookie``, 1 by default: a ledger's adds go over the connection its id picks).

Runs alternate, bookiesim then upstream, workload by workload; a *pair* is one run of each.
The workloads: the peak (the client saturating, up to 2,000 adds in flight) at 10, 1,000 and
10,000 ledgers round robin, ``--adds`` adds each (3M by default: long enough for a dozen
checkpoints; the Python client builds every frame before it starts, about 3.5 GB for 3M adds
of 1 KiB, and the Java client creates its ledgers, connects each channel and warms its JIT
before the bookie's sampling and its clock start, so neither is timed), then 10 ledgers
paced at half the lower of the pair's two 10-ledger peaks for at least ``--latency-seconds``
(p50/p99/p99.9 at a load both carry).

Of each run, from ``/proc`` of the bookie's process and its descendants: CPU per add (all
threads, the clean stop's last checkpoint included: in a run shorter than ``flushInterval``
that is where the sorted table is written), the share of one core while the load ran, the
resident set (peak: of samples every 0.2 s through the stop, and the main process's
``VmHWM``), open descriptors (peak of the ``/proc/PID/fd`` counts sampled with it), and the
files the run left in the ledger dirs (all created by it: the dirs start empty). Each figure
is then a ratio bookiesim ÷ upstream per pair, and the median of the pairs is what counts
(min and max beside it): absolute figures on a shared machine move from one minute to the
next, a pair's two runs share the minute.

Without an installation (no ``--bookkeeper-home``, no ``BOOKKEEPER_HOME``) it runs bookiesim
alone, prints its figures, and refuses the ratios in one line saying why (``--load java``
refuses to start, in one line). Either way it
prints each bookie's own scaling: 1,000 ledgers against 10 (adds/s and CPU per add), which
needs nobody else's bookie.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shlex
import statistics
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from bookiesim.bench.compare_run import KINDS, LOADS, SETTINGS, Load, run_one
from bookiesim.bench.java_load import compile_load
from bookiesim.bench.report import machine_info, positive_int, step_progress
from bookiesim.console import make_console
from bookiesim.upstream.installation import installation

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

LOAD_CHOICES = {"bookiesim": ("bookiesim",), "java": ("java",), "both": ("bookiesim", "java")}
FIXED = "fixed_rate"
"""The paced run's key; the peak runs are ``peak_<ledgers>``."""

PEAK_FIGURES = ("adds_per_second", "bookie_cpu_us_per_add", "rss_peak_mib", "fds_peak", "files")
FIXED_FIGURES = ("p50_ms", "p99_ms", "p999_ms", "bookie_cpu_us_per_add", "rss_peak_mib", "fds_peak")
LABELS = {
    "adds_per_second": "adds/s",
    "bookie_cpu_us_per_add": "CPU µs/add",
    "rss_peak_mib": "resident MiB (peak)",
    "fds_peak": "descriptors (peak)",
    "files": "files in ledger dirs",
    "p50_ms": "p50 ms",
    "p99_ms": "p99 ms",
    "p999_ms": "p99.9 ms",
}


@dataclasses.dataclass(frozen=True)
class ComparePlan:
    adds: int = 3_000_000
    """Adds of each peak run."""
    ledgers: tuple[int, ...] = (10, 1_000, 10_000)
    """Ledger counts of the peak runs; the first is the paced run's and the peak it halves."""
    size: int = 1024
    latency_seconds: float = 25.0
    """The shortest a paced run lasts: two of upstream's 10 s checkpoints."""
    pairs: int = 3
    open_files_limit: int | None = None
    """``ulimit -n`` of both bookies (soft and hard, through ``prlimit``); None: this
    process's own."""
    loads: tuple[str, ...] = ("bookiesim",)
    """Who sends the adds (:data:`LOADS`), each load its own pairs, one after the other."""
    channels: int = 1
    """Connections per bookie of either load (upstream's ``numChannelsPerBookie``)."""


QUICK = ComparePlan(adds=20_000, latency_seconds=3.0, pairs=1)
"""``--quick``: every workload, small enough to finish in about a minute."""


def workload_keys(plan: ComparePlan) -> list[str]:
    return [f"peak_{n}" for n in plan.ledgers] + [FIXED]


def workload_label(key: str, plan: ComparePlan) -> str:
    if key == FIXED:
        return f"{plan.ledgers[0]:,} ledgers at half the lower peak"
    return f"{int(key.removeprefix('peak_')):,} ledgers, peak"


def _pair(
    plan: ComparePlan, tmp: Path, n: int, home: Path | None, load: Load,
    step: Callable[[str], None],
) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Pair ``n`` of one load: every workload, bookiesim then upstream (when there is one)."""
    kinds = KINDS if home is not None else KINDS[:1]
    of = f"({load.name} load, {n + 1}/{plan.pairs})"
    pair: dict[str, dict[str, Any]] = {}
    for ledgers in plan.ledgers:
        key = f"peak_{ledgers}"
        for kind in kinds:
            step(f"{kind}: {ledgers:,} ledgers {of}")
            pair.setdefault(key, {})[kind] = run_one(
                kind, Path(tmp, f"{n}-{load.name}-{key}-{kind}"), home,
                ledgers=ledgers, adds=plan.adds, size=plan.size,
                open_files_limit=plan.open_files_limit, load=load,
            )  # fmt: skip
    peaks = [
        float(run["adds_per_second"])
        for run in pair[f"peak_{plan.ledgers[0]}"].values()
        if "failed" not in run
    ]
    rate = min(peaks) / 2 if peaks else 1_000.0
    adds = max(1, int(rate * plan.latency_seconds))
    for kind in kinds:
        step(f"{kind}: {rate:,.0f} adds/s {of}")
        pair.setdefault(FIXED, {})[kind] = run_one(
            kind, Path(tmp, f"{n}-{load.name}-{FIXED}-{kind}"), home,
            ledgers=plan.ledgers[0], adds=adds, size=plan.size, rate=rate,
            open_files_limit=plan.open_files_limit, load=load,
        )  # fmt: skip
    return pair


def run_pairs(
    plan: ComparePlan, workdir: Path, home: Path | None, step: Callable[[str], None],
    classes: Path | None = None,
) -> dict[str, list[dict[str, dict[str, Any]]]]:  # fmt: skip
    """Every load's pairs, by load: pair 1 of each load, then pair 2 of each, and so on
    (``classes``: the Java load's, when it runs)."""
    pairs: dict[str, list[dict[str, dict[str, Any]]]] = {name: [] for name in plan.loads}
    with tempfile.TemporaryDirectory(dir=workdir, prefix="bench-compare-") as tmp:
        for n in range(plan.pairs):
            for name in plan.loads:
                load = Load(name, plan.channels, classes if name == "java" else None)
                pairs[name].append(_pair(plan, Path(tmp), n, home, load, step))
    return pairs


# -- figures and ratios ----------------------------------------------------------------------


def figures_of(key: str) -> tuple[str, ...]:
    return FIXED_FIGURES if key == FIXED else PEAK_FIGURES


def _ok(*runs: dict[str, Any]) -> bool:
    return not any("failed" in run for run in runs)


def _spread(values: list[float]) -> dict[str, Any] | None:
    if not values:
        return None
    return {
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
        "pairs": values,
    }


def summarize(
    plan: ComparePlan, pairs: list[dict[str, dict[str, Any]]], kinds: tuple[str, ...]
) -> dict[str, Any]:
    """Medians per bookie, ratios bookiesim ÷ upstream per pair (when both ran and neither
    failed), each bookie's 1,000-against-10 scaling, and which runs failed and how."""
    medians: dict[str, dict[str, dict[str, Any]]] = {}
    ratios: dict[str, dict[str, Any]] = {}
    failures: list[str] = []
    for key in workload_keys(plan):
        for kind in kinds:
            runs = [pair[key][kind] for pair in pairs]
            label = workload_label(key, plan)
            failures += [f"{kind}, {label}: {r['failed']}" for r in runs if not _ok(r)]
            good = [r for r in runs if _ok(r)]
            medians.setdefault(key, {})[kind] = {
                figure: statistics.median(r[figure] for r in good) if good else None
                for figure in figures_of(key)
            }
        if "upstream" in kinds:
            ratios[key] = {}
            for figure in figures_of(key):
                values = [
                    round(pair[key]["bookiesim"][figure] / pair[key]["upstream"][figure], 3)
                    for pair in pairs
                    if _ok(pair[key]["bookiesim"], pair[key]["upstream"])
                    and pair[key]["upstream"][figure]
                ]
                ratios[key][figure] = _spread(values)
    scaling: dict[str, Any] = {}
    if len(plan.ledgers) > 1:
        few, many = f"peak_{plan.ledgers[0]}", f"peak_{plan.ledgers[1]}"
        for kind in kinds:
            for figure in ("adds_per_second", "bookie_cpu_us_per_add"):
                values = [
                    round(pair[many][kind][figure] / pair[few][kind][figure], 3)
                    for pair in pairs
                    if _ok(pair[many][kind], pair[few][kind]) and pair[few][kind][figure]
                ]
                scaling.setdefault(kind, {})[f"{figure}: {many} / {few}"] = _spread(values)
    return {"medians": medians, "ratios": ratios, "scaling": scaling, "failures": failures}


# -- the command -----------------------------------------------------------------------------


def _ledger_counts(text: str) -> tuple[int, ...]:
    """An argparse type: ``10,1000,10000``."""
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of numbers"
        ) from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every ledger count must be at least 1")
    return counts


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="bookiesim's bookie beside upstream's under the same load, as ratios",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--bookkeeper-home",
        type=Path,
        help="an upstream installation (lib/*.jar; default: $BOOKKEEPER_HOME)",
    )
    parser.add_argument("--dir", type=Path, help="where the bookies write (default: here)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK.adds:,} adds per peak run, {QUICK.latency_seconds:.0f} s paced, "
        f"{QUICK.pairs} pair (options given as well win)",
    )
    parser.add_argument(
        "--adds", type=positive_int, help=f"adds per peak run ({ComparePlan.adds:,})"
    )
    parser.add_argument(
        "--ledgers",
        type=_ledger_counts,
        help="ledger counts of the peak runs, the first also paced (10,1000,10000)",
    )
    parser.add_argument("--size", type=positive_int, help="entry payload bytes (1024)")
    parser.add_argument("--latency-seconds", type=float, help="the shortest a paced run lasts (25)")
    parser.add_argument("--pairs", type=positive_int, help="alternating pairs of runs (3)")
    parser.add_argument(
        "--open-files-limit",
        type=positive_int,
        metavar="N",
        help="run both bookies under `ulimit -n N` (soft and hard; default: this shell's)",
    )
    parser.add_argument(
        "--load",
        choices=LOAD_CHOICES,
        help="who sends the adds: bookiesim's Python load client (the default), upstream's "
        "Java client (needs an installation; both bookies then register in a ZooKeeper), "
        "or both, each with its own pairs",
    )
    parser.add_argument(
        "--channels",
        type=positive_int,
        metavar="N",
        help="connections per bookie (upstream's numChannelsPerBookie; 1): each ledger's "
        "adds go over the one its id picks, id modulo N, in either load",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.set_defaults(func=_main)


def plan_of(args: argparse.Namespace) -> ComparePlan:
    base = QUICK if args.quick else ComparePlan()
    given = {
        name: getattr(args, name)
        for name in (
            "adds", "ledgers", "size", "latency_seconds", "pairs", "open_files_limit", "channels"
        )
        if getattr(args, name) is not None
    }  # fmt: skip
    if args.load is not None:
        given["loads"] = LOAD_CHOICES[args.load]
    return dataclasses.replace(base, **given)


def command_of(args: argparse.Namespace) -> str:
    """The command line that repeats this run (``--bookkeeper-home`` shown as given)."""
    argv = ["bookiesim", "bench", "compare"]
    if args.quick:
        argv.append("--quick")
    names = ("bookkeeper_home", "dir", "adds", "size", "latency_seconds", "pairs")
    for name in (*names, "open_files_limit", "load", "channels"):
        if (value := getattr(args, name)) is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    if args.ledgers is not None:
        argv += ["--ledgers", ",".join(map(str, args.ledgers))]
    return shlex.join([*argv, "--json"])


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    whole = isinstance(value, int) or abs(value) >= 100
    return f"{value:,.0f}" if whole else f"{value:,.2f}"


def _ratio(spread: dict[str, Any] | None) -> str:
    if spread is None:
        return "-"
    return f"{spread['median']:.2f} ({spread['min']:.2f} to {spread['max']:.2f})"


def _print_load(
    console: Console, plan: ComparePlan, load: str, summary: dict[str, Any],
    kinds: tuple[str, ...],
) -> None:  # fmt: skip
    """One load's table of medians (and ratios, when upstream ran), scaling and failures."""
    pairs = f"{plan.pairs} pair{'' if plan.pairs == 1 else 's'}"
    channels = f"{plan.channels} channel{'' if plan.channels == 1 else 's'} per bookie"
    table = Table(
        title=f"bench compare, {LOADS[load]} ({channels}): {plan.adds:,} adds of {plan.size} B "
        f"per peak run, {pairs}; medians",
        title_justify="left",
    )
    both = "upstream" in kinds
    for column in ("workload", "figure", *kinds, *(("bookiesim ÷ upstream",) if both else ())):
        table.add_column(column, justify="left" if column in {"workload", "figure"} else "right")
    for key in workload_keys(plan):
        for index, figure in enumerate(figures_of(key)):
            row = [workload_label(key, plan) if index == 0 else "", LABELS[figure]]
            row += [_num(summary["medians"][key][kind][figure]) for kind in kinds]
            if both:
                row.append(_ratio(summary["ratios"][key][figure]))
            table.add_row(*row)
    console.print(table)
    for kind, ratios in summary["scaling"].items():
        for name, spread in ratios.items():
            console.print(f"{kind} scaling ({load} load), {name}: {_ratio(spread)}")
    for failure in summary["failures"]:
        console.print(f"failed ({load} load): {failure}")


def _main(args: argparse.Namespace) -> int:
    console = make_console(sys.stderr if args.json else sys.stdout)
    if not console.is_terminal:
        console.width = 132
    plan = plan_of(args)
    found = installation(args.bookkeeper_home)
    home = found if isinstance(found, Path) else None
    if "java" in plan.loads and home is None:
        console.print(f"--load {args.load} needs upstream's client: {found}", soft_wrap=True)
        return 2
    kinds = KINDS if home is not None else KINDS[:1]
    started = datetime.datetime.now(datetime.UTC)
    workdir = args.dir or Path.cwd()
    steps = plan.pairs * len(plan.loads) * len(workload_keys(plan)) * len(kinds)
    with tempfile.TemporaryDirectory(dir=workdir, prefix="bench-compare-java-") as java:
        classes = None
        if home is not None and "java" in plan.loads:
            try:
                classes = compile_load(home, Path(java))
            except RuntimeError as exc:
                console.print(f"--load {args.load}: {exc}", soft_wrap=True)
                return 2
        with step_progress(console, steps) as step:
            runs = run_pairs(plan, workdir, home, step, classes)
    results = {load: {**summarize(plan, runs[load], kinds), "runs": runs[load]} for load in runs}
    refused = None if home is not None else f"ratios refused: {found}"
    for load, result in results.items():
        _print_load(console, plan, load, result, kinds)
    if refused:
        console.print(refused, soft_wrap=True)
    seconds = (datetime.datetime.now(datetime.UTC) - started).total_seconds()
    console.print(f"{seconds:.0f} s in all")
    if args.json:
        report = {
            "benchmark": "compare",
            "command": command_of(args),
            "date": started.isoformat(timespec="seconds"),
            "machine": machine_info(workdir),
            "plan": dataclasses.asdict(plan),
            "loads": list(plan.loads),
            "channels": plan.channels,
            "settings": SETTINGS,
            "upstream": None if home is None else str(home),
            "ratios_refused": refused,
            "results": results,
        }
        sys.stdout.write(json.dumps(report) + "\n")
        sys.stdout.flush()
    return 0
