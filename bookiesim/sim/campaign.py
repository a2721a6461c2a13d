"""A campaign: many seeds, one run each, and what failed.

Each seed is its own ``trio.run``, one after the other in this process, or with ``jobs`` > 1
spread over that many worker processes (a seed's run depends on its seed alone, so where it
runs changes nothing in it: ``tests/sim/test_campaign.py`` compares the histories). A failing
seed's result keeps its violations, its trace and the command that replays it.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bookiesim.sim.bugs import BUGS
from bookiesim.sim.runner import (
    RunResult,
    SimSettings,
    quiet_logs,
    run_simulation,
    scratch_base,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

__all__ = ["BUGS", "CampaignResult", "available_cores", "failure_report", "run_campaign"]


@dataclass
class CampaignResult:
    seeds: list[int] = field(default_factory=list)
    failures: list[RunResult] = field(default_factory=list)
    simulated_seconds: float = 0.0
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    """The runs' own CPU time, summed over the processes that ran them."""
    jobs: int = 1

    def summary(self) -> dict[str, Any]:
        return {
            "seeds": len(self.seeds),
            "failures": len(self.failures),
            "simulated_seconds": round(self.simulated_seconds, 3),
            "wall_seconds": round(self.wall_seconds, 3),
            "cpu_seconds": round(self.cpu_seconds, 3),
            "jobs": self.jobs,
            "failing_seeds": [r.settings.seed for r in self.failures],
        }


def available_cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0))


def run_campaign(
    base: SimSettings,
    seeds: Iterable[int],
    on_result: Callable[[RunResult], None] | None = None,
    jobs: int = 1,
) -> CampaignResult:
    """Run ``base`` once per seed, in ``jobs`` processes at a time (1: in this one).

    ``on_result`` hears each run as it ends (in seed order with one job, in the order they
    end with more); the result lists seeds and failures in seed order either way."""
    settings = [replace(base, seed=seed) for seed in seeds]
    jobs = max(1, min(jobs, len(settings)))
    result = CampaignResult(jobs=jobs)
    started = time.perf_counter()
    runs = _in_workers(settings, jobs) if jobs > 1 else map(run_simulation, settings)
    for run in runs:
        result.seeds.append(run.settings.seed)
        result.simulated_seconds += run.simulated_seconds
        result.cpu_seconds += run.cpu_seconds
        if not run.ok:
            result.failures.append(run)
        if on_result is not None:
            on_result(run)
    result.wall_seconds = time.perf_counter() - started
    result.seeds.sort()
    result.failures.sort(key=lambda run: run.settings.seed)
    return result


def _in_workers(settings: list[SimSettings], jobs: int) -> Iterator[RunResult]:
    """Each run in one of ``jobs`` fresh processes, as it ends.

    Spawned, not forked: the caller may have threads (the progress bar's), and a fork copies
    their locks mid-use. A worker that dies (the OOM killer, a signal) fails the campaign with
    :class:`~concurrent.futures.process.BrokenProcessPool` rather than leaving it waiting
    for the seed it took."""
    # The runs' work directories go under one of the campaign's own, removed here: a worker
    # stopped mid-run cannot remove its run's.
    scratch = Path(tempfile.mkdtemp(prefix="bookiesim-campaign-", dir=scratch_base()))
    already = set(multiprocessing.active_children())
    try:
        with _ignoring_ctrl_c():
            # ^C reaches the whole process group: the campaign's process stops the workers
            # itself, so they must not each print a KeyboardInterrupt traceback. Started with
            # SIGINT ignored (a submit starts one while fewer than ``jobs`` run), a worker
            # keeps ignoring it (Python installs its handler only over the default) from its
            # first import on.
            pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"))
            # One seed per task: seeds differ in cost several times over, and a worker takes
            # the next one when it is free.
            pending = [pool.submit(_run_quietly, one, scratch) for one in settings]
        try:
            for done in as_completed(pending):
                yield done.result()
        except BaseException:
            # ^C, a dead worker, an error: the seeds still running stop now, not at their end.
            pool.shutdown(wait=False, cancel_futures=True)
            workers = set(multiprocessing.active_children()) - already
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.join()
            raise
        pool.shutdown()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextmanager
def _ignoring_ctrl_c() -> Iterator[None]:
    """SIGINT ignored in the block, where this is the main thread (only it may set one)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _run_quietly(settings: SimSettings, root: Path) -> RunResult:
    with quiet_logs():
        return run_simulation(settings, root=root)


def failure_report(run: RunResult, trace_lines: int = 15) -> dict[str, Any]:
    """What a person needs about one failing seed."""
    first = run.first_violation
    assert first is not None
    return {
        "seed": run.settings.seed,
        "invariant": first.invariant,
        "message": first.message,
        "time": round(first.time, 3),
        "violations": len(run.violations),
        "trace": run.trace[-trace_lines:],
        "replay": run.settings.replay_command(),
    }
