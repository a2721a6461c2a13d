"""Running a schedule whose faults overlap (``chaos run --overlap``; the schedule is
:mod:`bookiesim.chaos.overlap`'s): each fault in a task of its own.

Network faults are laid and lifted one at a time, since ``LiveNetwork`` numbers them as they
come. A process fault (pause, crash, power loss, full disk, read errors) holds its bookie's
lock from its injection to the end of its heal, so a restart still under way never meets the
next fault on that bookie; nothing else waits for it (a network fault's heal must not wait
for a restart that waits for that heal to register).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.chaos.overlap import NETWORK_KINDS

if TYPE_CHECKING:
    from bookiesim.chaos.history import Recorder
    from bookiesim.chaos.nemesis import PlannedFault
    from bookiesim.chaos.netns import FaultRecord

__all__ = ["run_overlapping"]

Inject = Callable[["PlannedFault"], Awaitable["FaultRecord | None"]]
Heal = Callable[["PlannedFault", "FaultRecord | None"], Awaitable[dict[str, Any]]]


async def run_overlapping(
    schedule: list[PlannedFault],
    started: float,
    bookies: Iterable[str],
    inject: Inject,
    heal: Heal,
    rec: Recorder,
    say: Callable[[str], None],
) -> None:
    """Inject and heal every fault of ``schedule`` at its times (seconds after ``started``,
    trio's clock), recording each as the one-at-a-time nemesis does."""
    network = trio.Lock()
    processes = {node: trio.Lock() for node in bookies}

    async def one(fault: PlannedFault) -> None:
        await trio.sleep_until(started + fault.start)
        is_network = fault.kind in NETWORK_KINDS
        async with contextlib.AsyncExitStack() as held:
            if not is_network:
                for node in sorted(set(fault.targets) & set(processes)):
                    await held.enter_async_context(processes[node])
            async with network if is_network else contextlib.nullcontext():
                record = await inject(fault)
            # Every target counts as down, as in the one-at-a-time nemesis.
            handle = rec.fault_start(fault.kind, fault.targets, fault.params, down=fault.targets)
            say(f"[yellow]fault {handle.id}[/yellow] {fault.describe()} for {fault.length:.1f} s")
            await trio.sleep_until(started + fault.end)
            async with network if is_network else contextlib.nullcontext():
                result = await heal(fault, record)
            rec.fault_end(handle, **result)
            say(f"[green]healed {handle.id}[/green] {fault.kind} {result.get('error', '')}")

    async with trio.open_nursery() as nursery:
        for fault in schedule:
            nursery.start_soon(one, fault)
