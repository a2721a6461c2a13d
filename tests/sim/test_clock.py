"""The simulation's virtual clock reads what trio's MockClock reads, more cheaply: a run under
it is the same run."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import trio
import trio.testing

import bookiesim.sim.runner as runner
from bookiesim.bookie.blocking import in_virtual_time
from bookiesim.sim.clock import virtual_clock
from bookiesim.sim.runner import SimSettings, run_simulation

if TYPE_CHECKING:
    import pytest


def test_time_jumps_to_each_deadline_and_stands_still_while_tasks_run() -> None:
    seen: list[float] = []

    async def main() -> None:
        assert in_virtual_time()
        start = trio.current_time()
        await trio.sleep(1.5)
        seen.append(trio.current_time() - start)
        with trio.move_on_after(0.25):
            await trio.sleep_forever()
        seen.append(trio.current_time() - start)
        for _ in range(1000):  # work without waiting: no time passes
            await trio.lowlevel.checkpoint()
        seen.append(trio.current_time() - start)
        async with trio.open_nursery() as nursery:  # the earliest of several deadlines first
            for delay in (3.0, 0.5, 2.0):
                nursery.start_soon(_sleep_and_note, delay, start, seen)

    clock = virtual_clock()
    trio.run(main, clock=clock)
    assert seen == [1.5, 1.75, 1.75, 2.25, 3.75, 4.75]
    assert clock.current_time() == 4.75


async def _sleep_and_note(delay: float, start: float, seen: list[float]) -> None:
    await trio.sleep(delay)
    seen.append(trio.current_time() - start)


def test_a_seed_runs_the_same_under_trios_own_mock_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = replace(SimSettings(steps=5, bookies=4, writers=1, recoverers=2), seed=2)
    ours = run_simulation(settings)
    monkeypatch.setattr(
        runner, "virtual_clock", lambda: trio.testing.MockClock(autojump_threshold=0)
    )
    theirs = run_simulation(settings)
    assert ours.digest == theirs.digest  # every frame's fate at the same virtual time
    assert ours.trace == theirs.trace
    assert ours.simulated_seconds == theirs.simulated_seconds
