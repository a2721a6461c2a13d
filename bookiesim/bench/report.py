"""What every benchmark reports, and how: repeated figures, paired ratios, the machine.

Honesty rules (sortedcontainers style), shared by all benchmarks:

* every figure is measured ``repeats`` times and shown as min / median / max, so the reader
  sees the variance instead of one lucky number;
* a figure is judged against a baseline measured *in the same repetition* (the same minute,
  the same disk state): the ratio is computed per repetition and its median decides
  PASS/FAIL. Absolute figures on shared 2-core machines move by more than the effects we
  care about; paired ratios move much less;
* the report names the machine (cores, architecture, Python, file system).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bookiesim.console import make_console

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping
    from pathlib import Path

    from rich.console import Console

__all__ = [
    "BenchRun",
    "Figure",
    "Ratio",
    "Report",
    "command_line",
    "describe_machine",
    "filesystem_type",
    "machine_info",
    "positive_int",
    "publish",
    "step_progress",
]


@dataclass
class Figure:
    """One measured quantity and its value in each repetition."""

    key: str
    label: str
    unit: str
    runs: list[float] = field(default_factory=list)

    @property
    def min(self) -> float:
        return min(self.runs)

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def max(self) -> float:
        return max(self.runs)

    def to_json(self) -> dict[str, object]:
        return {
            "label": self.label,
            "unit": self.unit,
            "min": self.min,
            "median": self.median,
            "max": self.max,
            "runs": list(self.runs),
        }


def new_figures(specs: Iterable[tuple[str, str, str]]) -> dict[str, Figure]:
    """Figures with no runs yet, by key, from ``(key, label, unit)`` triples."""
    return {key: Figure(key, label, unit) for key, label, unit in specs}


@dataclass(frozen=True)
class Ratio:
    """``figure / baseline`` per repetition (or ``figure / constant`` for an absolute target).

    ``threshold`` None means the ratio is shown for information, without a verdict.
    """

    key: str
    label: str
    figure: str
    baseline: str | None = None
    constant: float | None = None
    threshold: float | None = None

    def values(self, figures: Mapping[str, Figure]) -> list[float]:
        runs = figures[self.figure].runs
        if self.baseline is not None:
            return [f / b for f, b in zip(runs, figures[self.baseline].runs, strict=True)]
        assert self.constant is not None
        return [f / self.constant for f in runs]

    def against(self, figures: Mapping[str, Figure]) -> str:
        if self.baseline is not None:
            return figures[self.baseline].label
        return f"{self.constant:,.0f} {figures[self.figure].unit}"


@dataclass
class Report:
    """Figures and ratios of one benchmark run, printable as tables or JSON."""

    name: str
    command: str
    date: str
    settings: dict[str, object]
    figures: dict[str, Figure]
    ratios: list[Ratio]
    machine: dict[str, object]

    def verdict(self, ratio: Ratio) -> str | None:
        if ratio.threshold is None:
            return None
        return (
            "PASS" if statistics.median(ratio.values(self.figures)) >= ratio.threshold else "FAIL"
        )

    def to_json(self) -> dict[str, object]:
        ratios = []
        for r in self.ratios:
            values = r.values(self.figures)
            ratios.append(
                {
                    "key": r.key,
                    "label": r.label,
                    "figure": r.figure,
                    "baseline": r.baseline,
                    "constant": r.constant,
                    "min": min(values),
                    "median": statistics.median(values),
                    "max": max(values),
                    "runs": values,
                    "threshold": r.threshold,
                    "result": self.verdict(r),
                }
            )
        return {
            "benchmark": self.name,
            "command": self.command,
            "date": self.date,
            "machine": self.machine,
            **self.settings,
            "figures": {k: f.to_json() for k, f in self.figures.items()},
            "ratios": ratios,
        }

    def print_tables(self, console: Console) -> None:
        repeats = len(next(iter(self.figures.values())).runs)
        runs = f"{repeats} run{'' if repeats == 1 else 's'}"
        figures = Table(title=f"{self.name}: figures ({runs} each)", title_justify="left")
        figures.add_column("measurement")
        for col in ("min", "median", "max"):
            figures.add_column(col, justify="right")
        figures.add_column("unit")
        for f in self.figures.values():
            figures.add_row(f.label, _num(f.min), _num(f.median), _num(f.max), f.unit)
        console.print(figures)

        ratios = Table(
            title=f"{self.name}: ratios, paired per run (median decides)", title_justify="left"
        )
        ratios.add_column("figure")
        ratios.add_column("against")
        for col in ("min", "median", "max", "target"):
            ratios.add_column(col, justify="right")
        ratios.add_column("result")
        for r in self.ratios:
            values = r.values(self.figures)
            verdict = self.verdict(r)
            shown = {"PASS": "[green]PASS[/]", "FAIL": "[bold red]FAIL[/]", None: "-"}[verdict]
            ratios.add_row(
                r.label,
                r.against(self.figures),
                _ratio(min(values)),
                _ratio(statistics.median(values)),
                _ratio(max(values)),
                "-" if r.threshold is None else f"≥ {_ratio(r.threshold)}",
                shown,
            )
        console.print(ratios)


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"


def _ratio(x: float) -> str:
    return f"{x:.0%}" if x < 10 else f"{x:,.1f}x"


def filesystem_type(path: str | os.PathLike[str]) -> str:
    """The file system type of the mount holding ``path`` (what ``df -T`` shows)."""
    target = os.path.realpath(path)
    best, fstype = "", "unknown"
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if len(fields) < 3:
                    continue
                mount = fields[1].replace("\\040", " ")
                inside = target == mount or target.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best):
                    best, fstype = mount, fields[2]
    except OSError:
        pass
    return fstype


def machine_info(directory: Path) -> dict[str, object]:
    return {
        "nproc": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "filesystem": filesystem_type(directory),
    }


def describe_machine(info: Mapping[str, object]) -> str:
    return (
        f"{info['nproc']} cores, {info['machine']}, Python {info['python']}, "
        f"{info['filesystem']} file system"
    )


# --- What every benchmark command does around its measurements ------------------------------


def command_line(benchmark: str, args: argparse.Namespace, defaults: Mapping[str, object]) -> str:
    """``bookiesim bench NAME`` with the options that differ from ``defaults`` (attribute
    names, spelled ``--kebab-case``) and ``--json``: what reproduces this run."""
    argv = ["bookiesim", "bench", benchmark]
    for name, default in defaults.items():
        value = getattr(args, name)
        if value is not None and value != default:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    if getattr(args, "json", False):
        argv.append("--json")
    return shlex.join(argv)


@contextmanager
def step_progress(console: Console, total: int) -> Iterator[Callable[[str], None]]:
    """A progress bar of ``total`` named steps; the block calls ``step(name)`` as each
    starts."""
    progress = Progress(
        TextColumn("{task.description:<40}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with progress:
        task = progress.add_task("starting", total=total)
        done = -1

        def step(name: str) -> None:
            nonlocal done
            done += 1
            progress.update(task, completed=done, description=name)

        yield step
        progress.update(task, completed=total)


def publish(report: Report, started: datetime.datetime, *, as_json: bool) -> int:
    """The tables (on stderr when ``as_json``, so stdout is the JSON alone), the total time,
    and the report as one JSON line; returns the exit code."""
    tables = make_console(sys.stderr if as_json else sys.stdout)
    if not tables.is_terminal:
        tables.width = 132  # a pipe or a file has no width; rich would assume 80 and wrap
    report.print_tables(tables)
    seconds = (datetime.datetime.now(datetime.UTC) - started).total_seconds()
    tables.print(f"{seconds:.0f} s in all")
    if as_json:
        sys.stdout.write(json.dumps(report.to_json()) + "\n")
        sys.stdout.flush()
    return 0


@dataclass(frozen=True)
class BenchRun:
    """One ``bookiesim bench NAME`` command from its start to its report.

    Every benchmark opened and closed the same way (status console, reproducing command,
    start time; then a report named, dated and timed from that start); one object keeps
    the name, command and clock in step instead of each ``_main`` repeating them.
    """

    name: str
    command: str
    status: Console
    started: datetime.datetime

    @classmethod
    def start(cls, name: str, args: argparse.Namespace, defaults: Mapping[str, object]) -> BenchRun:
        """The status console (stderr), the command that reproduces ``args``, and now."""
        status = make_console(sys.stderr)
        command = command_line(name, args, defaults)
        return cls(name, command, status, datetime.datetime.now(datetime.UTC))

    def finish(
        self,
        settings: dict[str, object],
        figures: dict[str, Figure],
        ratios: Iterable[Ratio],
        machine: dict[str, object],
        *,
        as_json: bool,
    ) -> int:
        """Report the run (see ``publish``) and return the exit code; ``settings`` go into
        the JSON as given, so each benchmark keeps its own keys."""
        report = Report(
            name=self.name,
            command=self.command,
            date=self.started.isoformat(timespec="seconds"),
            settings=settings,
            figures=figures,
            ratios=list(ratios),
            machine=machine,
        )
        return publish(report, self.started, as_json=as_json)


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (sizes, repetitions)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not positive")
    return value
