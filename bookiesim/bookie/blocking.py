"""Where blocking file-system calls (fsync, lastMark writes) run.

In real time they go to a worker thread so adds keep flowing while the disk works. Under
virtual time (``trio.testing.MockClock``) they run inline: with autojump, trio sees every
task blocked while a thread works and jumps the clock to the next timer, so a 2 ms fsync
could appear to take hours of virtual time and timers would fire in an order no real
bookie shows. Inline calls keep a virtual-time run deterministic.
"""

from __future__ import annotations

import sys
from contextvars import ContextVar
from typing import TYPE_CHECKING, TypeVar, TypeVarTuple

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


disk_latency: ContextVar[Callable[[], float] | None] = ContextVar("disk_latency", default=None)
"""Set by a simulator for the tasks of one bookie: under virtual time each blocking call
first sleeps this many (virtual) seconds, a slow disk. Unset everywhere else."""


def in_virtual_time() -> bool:
    # trio.testing is looked up, not imported: it imports pytest (a tenth of a bookie
    # process's start), and no clock can be a MockClock before something imported it.
    testing = sys.modules.get("trio.testing")
    return testing is not None and isinstance(trio.lowlevel.current_clock(), testing.MockClock)


async def run_blocking(fn: Callable[[*Ts], T], *args: *Ts) -> T:
    """Run ``fn(*args)`` in a worker thread, or inline under virtual time."""
    if in_virtual_time():
        latency = disk_latency.get()
        if latency is not None and (delay := latency()) > 0:
            await trio.sleep(delay)
        result = fn(*args)
        await trio.lowlevel.checkpoint()
        return result
    return await trio.to_thread.run_sync(fn, *args)


async def run_in_worker(fn: Callable[[*Ts], T], *args: *Ts) -> T:
    """Run ``fn(*args)`` in a worker thread, or inline under virtual time *without* the
    simulated disk's latency: for copies into the page cache (a flush's writes), which take
    the CPU's time, not the disk's. Inline, it does not yield to other tasks either; the
    caller decides where to."""
    if in_virtual_time():
        return fn(*args)
    return await trio.to_thread.run_sync(fn, *args)
