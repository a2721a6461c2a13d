"""``bookiesim bench sim``: how fast the deterministic simulation runs (issue 9).

Two workloads, each on the simulated cluster of ``bookiesim sim faults`` (5 bookies with its
small timers: a checkpoint a second, GC every 4 s, log expiry after 6 s):

* **idle-heavy**: one client writes ``--ledgers`` ledgers of ``--entries`` entries each (20
  at a time, closed), then ``--idle`` seconds of virtual time pass with no traffic at all —
  only the bookies' timers run: checkpoints, entry-log expiry, GC and compaction passes, disk
  checks, the clients' own timers. Driven with :class:`~bookiesim.sim.stepper.SimStepper`
  (no fault plan, no writers of their own), so the write phase and the idle stretch are
  timed apart. The figure that matters is the idle stretch's simulated seconds per wall
  second (target ≥ 1,000): it is what long virtual runs cost when little happens;
* **busy**: ``--busy-seeds`` seeds of the default fault campaign (``bookiesim sim faults``:
  ``--busy-steps`` 30 plan steps, 2 writers, 3 recoverers, every fault family), each one
  ``run_simulation``;
* **trio's floor** under the busy seeds (:mod:`.trio_floor`): the same seeds run again,
  untimed, with an instrument counting their task steps, run-loop passes and clock jumps;
  then a trio program of tasks that only wait runs as many simulated seconds at those rates.
  Its rate is what the busy seeds would reach if every task's own code cost nothing: the
  bound trio's scheduling puts on them, beside the figure it bounds.

Per repetition: simulated seconds per wall second of the idle stretch, of the whole
idle-heavy run (start, writes and idle) and of the busy seeds, and seeds per minute of each
workload (60 / wall seconds per seed). Wall time includes the simulator's own work (the
network, the disk's images) and, for the busy seeds, the invariant checks after every step.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bookiesim.bench.report import (
    BenchRun,
    Figure,
    Ratio,
    describe_machine,
    machine_info,
    new_figures,
    step_progress,
)
from bookiesim.bench.trio_floor import SchedulingCounter, run_floor
from bookiesim.sim.runner import SimSettings, quiet_logs, run_simulation
from bookiesim.sim.stepper import SimStepper

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["RATIOS", "IdleRun", "measure_idle", "register", "run_sim_benchmark"]

DEFAULTS = {"ledgers": 1000, "entries": 3, "idle": 3600, "busy_seeds": 3, "busy_steps": 30}
WRITE_CONCURRENCY = 20

RATIOS = (
    Ratio(
        "idleVsTarget",
        "idle stretch, simulated s per wall s",
        "idleRate",
        constant=1000,
        threshold=1.0,
    ),
    Ratio(
        "idleVsBusy", "idle stretch vs busy seeds, simulated s per wall s", "idleRate", "busyRate"
    ),
    Ratio(
        "busyVsTrioFloor",
        "busy seeds vs trio's floor at their scheduling rates, simulated s per wall s",
        "busyRate",
        "busyTrioFloorRate",
    ),
)


@dataclass(frozen=True)
class IdleRun:
    """One idle-heavy run: its phases' simulated and wall seconds."""

    write_simulated: float
    write_wall: float
    idle_simulated: float
    idle_wall: float
    total_simulated: float
    total_wall: float
    violations: int


def measure_idle(seed: int, ledgers: int, entries: int, idle: float) -> IdleRun:
    """Write ``ledgers`` ledgers, then let ``idle`` virtual seconds pass; time each part."""
    settings = SimSettings(seed=seed, steps=0, writers=0, recoverers=1, faults=frozenset())
    started = time.perf_counter()
    with SimStepper(settings) as sim:
        before = sim.now
        t0 = time.perf_counter()
        sim.write(ledgers, entries, concurrency=WRITE_CONCURRENCY)
        t1 = time.perf_counter()
        written = sim.now
        sim.advance(idle)
        t2 = time.perf_counter()
        end = sim.now
        violations = len(sim.check())
    return IdleRun(
        write_simulated=written - before,
        write_wall=t1 - t0,
        idle_simulated=end - written,
        idle_wall=t2 - t1,
        total_simulated=end,
        total_wall=time.perf_counter() - started,
        violations=violations,
    )


def _figures() -> dict[str, Figure]:
    specs = [
        ("idleRate", "idle-heavy: idle stretch, simulated s per wall s", "sim s/s"),
        ("idleWallSeconds", "idle-heavy: idle stretch, wall time", "s"),
        ("idleWriteWallSeconds", "idle-heavy: writing the ledgers, wall time", "s"),
        ("idleRunRate", "idle-heavy: whole run, simulated s per wall s", "sim s/s"),
        ("idleSeedsPerMinute", "idle-heavy: seeds per minute", "seeds/min"),
        ("busyRate", "busy (default campaign): simulated s per wall s", "sim s/s"),
        ("busySimulatedPerSeed", "busy: simulated seconds per seed", "s"),
        ("busySeedsPerMinute", "busy: seeds per minute", "seeds/min"),
        ("busyTaskSteps", "busy: trio task steps per simulated s", "/sim s"),
        ("busyRunLoopPasses", "busy: trio run-loop passes per simulated s", "/sim s"),
        ("busyClockJumps", "busy: virtual clock jumps per simulated s", "/sim s"),
        ("busyTrioFloorRate", "busy: trio's floor at those rates, sim s per wall s", "sim s/s"),
    ]
    return new_figures(specs)


def run_sim_benchmark(args: argparse.Namespace, step: Callable[[str], None]) -> dict[str, Figure]:
    figures = _figures()
    for run in range(1, args.repeats + 1):
        step(f"run {run}: idle-heavy ({args.ledgers:,} ledgers, {args.idle:,.0f} s idle)")
        idle = measure_idle(run, args.ledgers, args.entries, args.idle)
        if idle.violations:
            raise RuntimeError(f"idle-heavy run {run} broke an invariant")
        simulated = wall = 0.0
        seeds = [(run - 1) * args.busy_seeds + n + 1 for n in range(args.busy_seeds)]
        for seed in seeds:
            step(f"run {run}: busy, seed {seed}")
            result = run_simulation(SimSettings(seed=seed, steps=args.busy_steps))
            simulated += result.simulated_seconds
            wall += result.wall_seconds
        # Counted apart: the instrument's own calls would slow the timed runs.
        step(f"run {run}: trio's floor at the busy seeds' scheduling rates")
        counter = SchedulingCounter()
        counted = sum(
            run_simulation(
                SimSettings(seed=seed, steps=args.busy_steps), instruments=[counter]
            ).simulated_seconds
            for seed in seeds
        )
        rates = counter.rates(counted)
        floor_wall = run_floor(rates, simulated)
        for key, value in (
            ("idleRate", idle.idle_simulated / idle.idle_wall),
            ("idleWallSeconds", idle.idle_wall),
            ("idleWriteWallSeconds", idle.write_wall),
            ("idleRunRate", idle.total_simulated / idle.total_wall),
            ("idleSeedsPerMinute", 60 / idle.total_wall),
            ("busyRate", simulated / wall),
            ("busySimulatedPerSeed", simulated / args.busy_seeds),
            ("busySeedsPerMinute", 60 * args.busy_seeds / wall),
            ("busyTaskSteps", rates.steps),
            ("busyRunLoopPasses", rates.passes),
            ("busyClockJumps", rates.jumps),
            ("busyTrioFloorRate", simulated / floor_wall),
        ):
            figures[key].runs.append(round(value, 3))
    return figures


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sim",
        help="simulated seconds per wall second and seeds per minute of the fault simulation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--ledgers", type=int, default=DEFAULTS["ledgers"], help="idle-heavy: ledgers written"
    )
    parser.add_argument(
        "--entries", type=int, default=DEFAULTS["entries"], help="idle-heavy: entries per ledger"
    )
    parser.add_argument(
        "--idle",
        type=int,
        default=DEFAULTS["idle"],
        help="idle-heavy: virtual seconds of no traffic after the writes",
    )
    parser.add_argument(
        "--busy-seeds",
        type=int,
        default=DEFAULTS["busy_seeds"],
        help="busy: default-campaign seeds per run",
    )
    parser.add_argument(
        "--busy-steps",
        type=int,
        default=DEFAULTS["busy_steps"],
        help="busy: plan steps per seed (the campaign's default: 30)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    for name in ("ledgers", "entries", "idle", "busy_seeds", "busy_steps", "repeats"):
        if getattr(args, name) <= 0:
            print(f"bench sim: --{name.replace('_', '-')} must be positive", file=sys.stderr)
            return 2
    bench = BenchRun.start("sim", args, {**DEFAULTS, "repeats": 3})
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    machine = machine_info(Path("/dev/shm") if Path("/dev/shm").is_dir() else Path.cwd())
    bench.status.print(
        f"bench sim: {args.ledgers:,} ledgers then {args.idle:,.0f} s idle, "
        f"{args.busy_seeds} busy seed(s), {args.repeats} run(s) ({describe_machine(machine)})"
    )
    with quiet_logs(), step_progress(bench.status, args.repeats * (2 + args.busy_seeds)) as step:
        figures = run_sim_benchmark(args, step)
    settings: dict[str, object] = {
        "ledgers": args.ledgers,
        "entriesPerLedger": args.entries,
        "idleSeconds": args.idle,
        "busySeeds": args.busy_seeds,
        "busySteps": args.busy_steps,
        "repeats": args.repeats,
        # On a shared 2-core machine a figure means little without the load it ran under.
        "loadAverageAtStart": load_at_start,
        "loadAverageAtEnd": [round(x, 2) for x in os.getloadavg()],
    }
    return bench.finish(settings, figures, RATIOS, machine, as_json=args.json)
