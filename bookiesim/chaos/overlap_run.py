"""Running a schedule whose faults overlap (``chaos run --overlap``; the schedule is
:mod:`bookiesim.chaos.overlap`'s): each fault in a task of its own.

The schedule keeps to ``max_down`` over the faults' planned spans, but a crash or a power
loss keeps its bookie down until the restart is ready, seconds after the planned end; so the
budget is kept here too, over what is down in fact: a fault that would take the bookies down
past ``max_down`` waits until enough heals have ended (and is skipped if its planned end has
passed by then). A process fault (pause, crash, power loss, full disk, read errors) also holds
its bookie's lock from its injection to the end of its heal, so a restart still under way never
meets the next fault on that bookie. Network faults are laid and lifted one at a time, since
``LiveNetwork`` numbers them as they come; nothing else waits for them (a network fault's heal
must never wait for a restart that needs that heal to register).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.chaos.overlap import NETWORK_KINDS, bookies_down

if TYPE_CHECKING:
    from bookiesim.chaos.history import Recorder
    from bookiesim.chaos.nemesis import PlannedFault
    from bookiesim.chaos.netns import FaultRecord

__all__ = ["run_overlapping"]

Inject = Callable[["PlannedFault"], Awaitable["FaultRecord | None"]]
Heal = Callable[["PlannedFault", "FaultRecord | None"], Awaitable[dict[str, Any]]]


class _DownBudget:
    """The bookies down in fact, by fault; :meth:`take` waits for room."""

    def __init__(self, max_down: int) -> None:
        self.max_down = max_down
        self._down: dict[int, frozenset[str]] = {}
        self._changed = trio.Condition()

    def _room(self, down: frozenset[str]) -> bool:
        if not down or not self._down:
            return True  # a fault alone is as the one-at-a-time schedule has it
        return len(down.union(*self._down.values())) <= self.max_down

    async def take(self, key: int, down: frozenset[str]) -> None:
        async with self._changed:
            while not self._room(down):
                await self._changed.wait()
            self._down[key] = down

    async def give_back(self, key: int) -> None:
        async with self._changed:
            self._down.pop(key, None)
            self._changed.notify_all()


async def run_overlapping(
    schedule: list[PlannedFault],
    started: float,
    bookies: list[str],
    max_down: int,
    inject: Inject,
    heal: Heal,
    rec: Recorder,
    say: Callable[[str], None],
    *,
    down_of: Callable[[PlannedFault], Sequence[str]] | None = None,
) -> None:
    """Inject and heal every fault of ``schedule`` at its times (seconds after ``started``,
    trio's clock), recording each as the one-at-a-time nemesis does."""
    network = trio.Lock()
    processes = {node: trio.Lock() for node in bookies}
    budget = _DownBudget(max_down)

    async def one(key: int, fault: PlannedFault) -> None:
        await trio.sleep_until(started + fault.start)
        is_network = fault.kind in NETWORK_KINDS
        async with contextlib.AsyncExitStack() as held:
            await budget.take(key, bookies_down(fault, bookies))
            held.push_async_callback(budget.give_back, key)
            if not is_network:
                for node in sorted(set(fault.targets) & set(processes)):
                    await held.enter_async_context(processes[node])
            if trio.current_time() >= started + fault.end:
                say(f"skipped {fault.describe()}: its bookies were still down until its end")
                return
            async with network if is_network else contextlib.nullcontext():
                record = await inject(fault)
            # Every target counts as down, as in the one-at-a-time nemesis (and what down_of adds).
            down = fault.targets if down_of is None else down_of(fault)
            handle = rec.fault_start(fault.kind, fault.targets, fault.params, down=down)
            say(f"[yellow]fault {handle.id}[/yellow] {fault.describe()} for {fault.length:.1f} s")
            await trio.sleep_until(started + fault.end)
            async with network if is_network else contextlib.nullcontext():
                result = await heal(fault, record)
            rec.fault_end(handle, **result)
            say(f"[green]healed {handle.id}[/green] {fault.kind} {result.get('error', '')}")

    async with trio.open_nursery() as nursery:
        for key, fault in enumerate(schedule):
            nursery.start_soon(one, key, fault)
