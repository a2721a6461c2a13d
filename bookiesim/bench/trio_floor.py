"""trio's own floor under a simulation: how fast virtual time can pass at a run's event rates
when the tasks do nothing at all.

A simulated run's CPU goes to two things: the code its tasks run (the bookies, clients and
simulator) and trio's scheduling of them: each task step (a coroutine resumed), each pass of
the run loop (a batch of runnable tasks, an I/O poll, the deadlines expired) and each jump of
the virtual clock (a sleep's deadline: a cancel scope and a ``Cancelled`` raised and caught).
:class:`SchedulingCounter` counts the three over a run; :func:`run_floor` then runs a trio
program whose tasks only wait, with as many steps, passes and jumps per simulated second,
and times it. Its simulated seconds per wall second bound the simulation's from above: no
change to what the tasks do can make a run faster than its own scheduling.

The program: a driver sleeps ``1/jumps`` virtual seconds per tick (a jump, then a pass in
which it runs); each tick it wakes some waiter tasks (one pass), and each waiter then yields
at a few checkpoints (a pass each). A tick is ``3 + c`` passes and ``1 + w (1 + c)`` steps
for ``w`` waiters of ``c`` checkpoints each; fractional ``w`` and ``c`` are spread over the
ticks, so the three rates come out as asked (``tests/bench/test_trio_floor.py``) wherever
each jump brings at least as many steps as passes, as a simulation's do (a frame's arrival
wakes its reader, the reader its handler; a timer's task runs more than one step).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import trio
import trio.testing

from bookiesim.sim.rng import deterministic_run

__all__ = ["SchedulingCounter", "SchedulingRates", "run_floor"]


@dataclass(frozen=True)
class SchedulingRates:
    """A run's scheduling per simulated second."""

    steps: float
    """Task steps: a coroutine resumed until its next wait."""
    passes: float
    """Passes of trio's run loop (an I/O poll each, then a batch of runnable tasks)."""
    jumps: float
    """Jumps of the virtual clock to the next deadline."""

    def describe(self) -> str:
        return (
            f"{self.steps:,.0f} task steps, {self.passes:,.0f} run-loop passes and "
            f"{self.jumps:,.0f} clock jumps per simulated second"
        )


class SchedulingCounter(trio.abc.Instrument):
    """Counts a run's task steps, run-loop passes and clock jumps (give it to ``trio.run``)."""

    def __init__(self) -> None:
        self.steps = 0
        self.passes = 0
        self.jumps = 0
        self._last_time = -math.inf

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1

    def before_io_wait(self, timeout: float) -> None:
        self.passes += 1
        now = trio.current_time()
        if now != self._last_time:
            self.jumps += 1
            self._last_time = now

    def rates(self, simulated: float) -> SchedulingRates:
        """The counts per simulated second of a run that lasted ``simulated`` seconds."""
        return SchedulingRates(
            self.steps / simulated, self.passes / simulated, self.jumps / simulated
        )


def run_floor(
    rates: SchedulingRates, simulated: float, counter: SchedulingCounter | None = None
) -> float:
    """Run ``simulated`` virtual seconds of tasks that only wait, scheduled at ``rates``;
    the wall seconds it took. ``counter`` (optional) watches the run."""
    if rates.jumps <= 0 or simulated <= 0:
        raise ValueError("the floor needs clock jumps and simulated time")
    checkpoints = max(0.0, rates.passes / rates.jumps - 3)
    waiters = max(0.0, (rates.steps / rates.jumps - 1) / (1 + checkpoints))
    ticks = max(1, round(simulated * rates.jumps))
    period = simulated / ticks
    most = math.ceil(waiters)

    async def main() -> None:
        wakes = [trio.Event() for _ in range(most)]
        per_waiter = [0]

        async def waiter(i: int) -> None:
            while True:
                await wakes[i].wait()
                for _ in range(per_waiter[0]):
                    await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            for i in range(most):
                nursery.start_soon(waiter, i)
            owed_waiters = owed_checkpoints = 0.0
            for _ in range(ticks):
                await trio.sleep(period)
                owed_waiters += waiters
                owed_checkpoints += checkpoints
                woken, owed_waiters = _whole(owed_waiters)
                per_waiter[0], owed_checkpoints = _whole(owed_checkpoints)
                for i in range(min(woken, most)):
                    wakes[i].set()
                    wakes[i] = trio.Event()
            nursery.cancel_scope.cancel()

    clock = trio.testing.MockClock(autojump_threshold=0)  # the simulation's clock
    started = time.perf_counter()
    with deterministic_run(0):
        trio.run(main, clock=clock, instruments=[counter] if counter else [])
    return time.perf_counter() - started


def _whole(owed: float) -> tuple[int, float]:
    """The whole part of what is owed, and what stays owed."""
    whole = math.floor(owed + 1e-9)
    return whole, owed - whole
