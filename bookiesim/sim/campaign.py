"""A campaign: many seeds, one run each, and what failed.

Seeds run one after the other in this process (each is its own ``trio.run``); a failing
seed's result keeps its violations, its trace and the command that replays it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from bookiesim.sim.bugs import BUGS
from bookiesim.sim.runner import RunResult, SimSettings, run_simulation

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = ["BUGS", "CampaignResult", "failure_report", "run_campaign"]


@dataclass
class CampaignResult:
    seeds: list[int] = field(default_factory=list)
    failures: list[RunResult] = field(default_factory=list)
    simulated_seconds: float = 0.0
    wall_seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "seeds": len(self.seeds),
            "failures": len(self.failures),
            "simulated_seconds": round(self.simulated_seconds, 3),
            "wall_seconds": round(self.wall_seconds, 3),
            "failing_seeds": [r.settings.seed for r in self.failures],
        }


def run_campaign(
    base: SimSettings,
    seeds: Iterable[int],
    on_result: Callable[[RunResult], None] | None = None,
) -> CampaignResult:
    """Run ``base`` once per seed."""
    result = CampaignResult()
    started = time.perf_counter()
    for seed in seeds:
        run = run_simulation(replace(base, seed=seed))
        result.seeds.append(seed)
        result.simulated_seconds += run.simulated_seconds
        if not run.ok:
            result.failures.append(run)
        if on_result is not None:
            on_result(run)
    result.wall_seconds = time.perf_counter() - started
    return result


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
