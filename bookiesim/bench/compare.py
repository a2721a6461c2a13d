"""``bookiesim bench compare``: bookiesim's bookie beside upstream's, under the same load.

One load client (:mod:`bookiesim.bench.load_client`, a pipelining v3 client sending entries
with real digests, as a BookKeeper client does) runs against one bookie at a time: bookiesim's
(``bookiesim bookie``) and upstream's (``server.Main`` from an installation, see
:mod:`bookiesim.bench.upstream`), both with the same upstream keys (:data:`SETTINGS`:
``journalSyncData=true``, a 2 ms group wait, ``flushInterval`` 10 s, entry log per ledger with
500 active logs, ``SortedLedgerStorage``), their journal and ledger dirs in one fresh directory
(the same disk), upstream with its default 1 GiB heap.

Runs alternate, bookiesim then upstream, workload by workload; a *pair* is one run of each.
The workloads: the peak (the client saturating, up to 2,000 adds in flight) at 10, 1,000 and
10,000 ledgers round robin, ``--adds`` adds each (3M by default: long enough for a dozen
checkpoints; the client builds every frame before it starts, about 3.5 GB for 3M adds of
1 KiB, so the build is not timed), then 10 ledgers paced at half the lower of the pair's two
10-ledger peaks for at least ``--latency-seconds`` (p50/p99/p99.9 at a load both carry).

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
alone, prints its figures, and refuses the ratios in one line saying why. Either way it
prints each bookie's own scaling: 1,000 ledgers against 10 (adds/s and CPU per add), which
needs nobody else's bookie.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from bookiesim.bench.bookie import process_cpu_seconds, run_client
from bookiesim.bench.report import machine_info, positive_int, step_progress
from bookiesim.bench.upstream import upstream_bookie
from bookiesim.cluster.processes import BOOKIE_PROGRAM, bookie_process
from bookiesim.console import make_console
from bookiesim.upstream.installation import installation

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

STOP_TIMEOUT = 600.0
"""Seconds a bookie may take to stop (its last checkpoint after millions of adds)."""

SETTINGS: dict[str, object] = {
    "journalSyncData": "true",
    "journalMaxGroupWaitMSec": 2,
    "flushInterval": 10_000,
    "entryLogPerLedgerEnabled": "true",
    "maximumNumberOfActiveEntryLogs": 500,
    "ledgerStorageClass": "org.apache.bookkeeper.bookie.SortedLedgerStorage",
    "journalPreAllocSizeMB": 1,
}
"""The settings both bookies run with (upstream's keys and units)."""

KINDS = ("bookiesim", "upstream")
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


QUICK = ComparePlan(adds=20_000, latency_seconds=3.0, pairs=1)
"""``--quick``: every workload, small enough to finish in about a minute."""


def workload_keys(plan: ComparePlan) -> list[str]:
    return [f"peak_{n}" for n in plan.ledgers] + [FIXED]


def workload_label(key: str, plan: ComparePlan) -> str:
    if key == FIXED:
        return f"{plan.ledgers[0]:,} ledgers at half the lower peak"
    return f"{int(key.removeprefix('peak_')):,} ledgers, peak"


# -- /proc of a bookie and its descendants --------------------------------------------------


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process descended from it (a bookie may run helpers)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, ()))
    return tree


def _cpu_seconds(pid: int) -> float:
    try:
        return process_cpu_seconds(pid)
    except OSError:  # gone between listing and reading
        return 0.0


def tree_cpu_seconds(pids: list[int]) -> dict[int, float]:
    return {pid: _cpu_seconds(pid) for pid in pids}


def _status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class Sampler:
    """Peaks of the resident set and open descriptors of a process tree, every 0.2 s, and
    the CPU each of its processes used (a helper that exits mid-run keeps what it used)."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.pid = pid
        self.interval = interval
        self.rss_kib = 0
        self.fds = 0
        self._cpu_start = tree_cpu_seconds(process_tree(pid))
        self._cpu_last = dict(self._cpu_start)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="compare-sampler", daemon=True)

    def _sample(self) -> None:
        pids = process_tree(self.pid)
        rss = sum(_status_kib(p, "VmRSS") for p in pids)
        fds = sum(_fd_count(p) for p in pids)
        cpu = tree_cpu_seconds(pids)
        with self._lock:  # the sampling thread and cpu_so_far both fold samples in
            self.rss_kib = max(self.rss_kib, rss)
            self.fds = max(self.fds, fds)
            for pid, seconds in cpu.items():
                self._cpu_last[pid] = max(seconds, self._cpu_last.get(pid, 0.0))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def cpu_so_far(self) -> float:
        """CPU the tree used since the sampler started, sampled now; the main process's own
        peak resident set (``VmHWM``) is taken in too, while it still runs."""
        self._sample()
        with self._lock:
            self.rss_kib = max(self.rss_kib, _status_kib(self.pid, "VmHWM"))
        return sum(t - self._cpu_start.get(pid, 0.0) for pid, t in self._cpu_last.items())


def count_files(directory: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(directory))


# -- one run ---------------------------------------------------------------------------------


def _load(
    port: int, pid: int, *, ledgers: int, adds: int, size: int, rate: float | None
) -> dict[str, Any]:
    """The load client's summary; a run the bookie failed (errors, a dropped connection) is
    kept with ``failed`` saying how."""
    try:
        result: dict[str, Any] = run_client(
            port, pid, ledgers=ledgers, adds=adds, size=size, rate=rate
        )
    except subprocess.CalledProcessError as exc:
        result = json.loads(exc.stdout) if exc.stdout.strip().startswith("{") else {}
        lines = (exc.stderr or "").strip().splitlines()
        result["failed"] = (
            f"{result['errors']} adds failed"
            if result.get("errors")
            else (lines[-1] if lines else f"load client exited with {exc.returncode}")
        )
    # run_client's CPU figures see the main process only; the tree's replace them below.
    for key in ("bookie_cpu_us_per_add", "bookie_cpu_share", "client_cpu_us_per_add"):
        result.pop(key, None)
    return result


def _lifetime_cpu_seconds(pid: int) -> float:
    """CPU of a process since it started, with the children it has reaped (``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _reaped_children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def _bookie(
    kind: str, root: Path, home: Path | None, open_files_limit: int | None
) -> Iterator[tuple[int, int, Path, Any]]:
    """(port, pid, ledgers dir, stop) of a fresh bookie of ``kind`` under ``root``."""
    # prlimit execs the bookie: the pid sampled is the bookie's.
    limit = () if open_files_limit is None else limited(open_files_limit)
    if kind == "bookiesim":
        settings = (f"{k}={v}" for k, v in SETTINGS.items())
        with bookie_process(root, *settings, program=(*limit, *BOOKIE_PROGRAM)) as ours:
            yield ours.bookie_port, ours.proc.pid, ours.ledgers_dir, ours.stop
    else:
        assert home is not None
        with upstream_bookie(home, root, SETTINGS, prefix=limit) as theirs:
            yield theirs.port, theirs.proc.pid, theirs.ledgers_dir, theirs.stop


def run_one(
    kind: str,
    root: Path,
    home: Path | None,
    *,
    ledgers: int,
    adds: int,
    size: int,
    rate: float | None = None,
    open_files_limit: int | None = None,
) -> dict[str, Any]:
    """One bookie, one load, in a fresh ``root`` removed afterwards."""
    try:
        with _bookie(kind, root, home, open_files_limit) as (port, pid, ledgers_dir, stop):
            # Sampled through the stop: its last checkpoint writes what the adds left in
            # memory (all of it, in a run shorter than flushInterval), and holds descriptors.
            with Sampler(pid) as sampler:
                result = _load(port, pid, ledgers=ledgers, adds=adds, size=size, rate=rate)
                load_cpu = sampler.cpu_so_far()
                before_stop = _lifetime_cpu_seconds(pid)
                reaped = _reaped_children_cpu()
                stopping = time.perf_counter()
                stop(timeout=STOP_TIMEOUT)
                result["stop_seconds"] = round(time.perf_counter() - stopping, 2)
                # Once reaped its /proc is gone; what it used stopping is in our rusage.
                stop_cpu = max(0.0, _reaped_children_cpu() - reaped - before_stop)
            result["files"] = count_files(ledgers_dir)
    finally:
        shutil.rmtree(root, ignore_errors=True)  # millions of adds: gigabytes per run
    done = max(1, int(result.get("adds", 0)))
    if "seconds" in result:
        result["bookie_cpu_share"] = round(load_cpu / result["seconds"], 3)
    result["stop_cpu_seconds"] = round(stop_cpu, 3)
    result["bookie_cpu_us_per_add"] = round((load_cpu + stop_cpu) / done * 1e6, 1)
    result["rss_peak_mib"] = round(sampler.rss_kib / 1024, 1)
    result["fds_peak"] = sampler.fds
    result["ledgers"] = ledgers
    if rate is not None:
        result["target_rate"] = round(rate, 1)
    return result


def run_pairs(
    plan: ComparePlan, workdir: Path, home: Path | None, step: Callable[[str], None]
) -> list[dict[str, dict[str, Any]]]:
    """Every workload, bookiesim then upstream (when there is one), ``plan.pairs`` times."""
    kinds = KINDS if home is not None else KINDS[:1]
    pairs: list[dict[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(dir=workdir, prefix="bench-compare-") as tmp:
        for n in range(plan.pairs):
            pair: dict[str, dict[str, Any]] = {}
            for ledgers in plan.ledgers:
                key = f"peak_{ledgers}"
                for kind in kinds:
                    step(f"{kind}: {ledgers:,} ledgers ({n + 1}/{plan.pairs})")
                    pair.setdefault(key, {})[kind] = run_one(
                        kind, Path(tmp, f"{n}-{key}-{kind}"), home,
                        ledgers=ledgers, adds=plan.adds, size=plan.size,
                        open_files_limit=plan.open_files_limit,
                    )  # fmt: skip
            peaks = [
                float(run["adds_per_second"])
                for run in pair[f"peak_{plan.ledgers[0]}"].values()
                if "failed" not in run
            ]
            rate = min(peaks) / 2 if peaks else 1_000.0
            adds = max(1, int(rate * plan.latency_seconds))
            for kind in kinds:
                step(f"{kind}: {rate:,.0f} adds/s ({n + 1}/{plan.pairs})")
                pair.setdefault(FIXED, {})[kind] = run_one(
                    kind, Path(tmp, f"{n}-{FIXED}-{kind}"), home,
                    ledgers=plan.ledgers[0], adds=adds, size=plan.size, rate=rate,
                    open_files_limit=plan.open_files_limit,
                )  # fmt: skip
            pairs.append(pair)
    return pairs


def limited(open_files: int) -> tuple[str, ...]:
    """A command prefix that runs the rest under ``ulimit -n open_files``, hard limit too:
    a bookie raises its soft limit to the hard one at start, as the JVM does."""
    return ("prlimit", f"--nofile={open_files}:{open_files}", "--")


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
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.set_defaults(func=_main)


def plan_of(args: argparse.Namespace) -> ComparePlan:
    base = QUICK if args.quick else ComparePlan()
    given = {
        name: getattr(args, name)
        for name in ("adds", "ledgers", "size", "latency_seconds", "pairs", "open_files_limit")
        if getattr(args, name) is not None
    }
    return dataclasses.replace(base, **given)


def command_of(args: argparse.Namespace) -> str:
    """The command line that repeats this run (``--bookkeeper-home`` shown as given)."""
    argv = ["bookiesim", "bench", "compare"]
    if args.quick:
        argv.append("--quick")
    names = ("bookkeeper_home", "dir", "adds", "size", "latency_seconds", "pairs")
    for name in (*names, "open_files_limit"):
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


def _main(args: argparse.Namespace) -> int:
    console = make_console(sys.stderr if args.json else sys.stdout)
    if not console.is_terminal:
        console.width = 132
    plan = plan_of(args)
    found = installation(args.bookkeeper_home)
    home = found if isinstance(found, Path) else None
    kinds = KINDS if home is not None else KINDS[:1]
    started = datetime.datetime.now(datetime.UTC)
    workdir = args.dir or Path.cwd()
    steps = plan.pairs * len(workload_keys(plan)) * len(kinds)
    with step_progress(console, steps) as step:
        pairs = run_pairs(plan, workdir, home, step)
    summary = summarize(plan, pairs, kinds)
    refused = None if home is not None else f"ratios refused: {found}"

    table = Table(
        title=f"bench compare: {plan.adds:,} adds of {plan.size} B per peak run, "
        f"{plan.pairs} pair{'' if plan.pairs == 1 else 's'}; medians",
        title_justify="left",
    )
    for column in ("workload", "figure", *kinds, *(("bookiesim ÷ upstream",) if home else ())):
        table.add_column(column, justify="left" if column in {"workload", "figure"} else "right")
    for key in workload_keys(plan):
        for index, figure in enumerate(figures_of(key)):
            row = [workload_label(key, plan) if index == 0 else "", LABELS[figure]]
            row += [_num(summary["medians"][key][kind][figure]) for kind in kinds]
            if home is not None:
                row.append(_ratio(summary["ratios"][key][figure]))
            table.add_row(*row)
    console.print(table)
    for kind, ratios in summary["scaling"].items():
        for name, spread in ratios.items():
            console.print(f"{kind} scaling, {name}: {_ratio(spread)}")
    for failure in summary["failures"]:
        console.print(f"failed: {failure}")
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
            "settings": SETTINGS,
            "upstream": None if home is None else str(home),
            "ratios_refused": refused,
            **summary,
            "runs": pairs,
        }
        sys.stdout.write(json.dumps(report) + "\n")
        sys.stdout.flush()
    return 0
