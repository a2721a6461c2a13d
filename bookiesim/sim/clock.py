"""The simulation's virtual clock: trio's ``MockClock`` with autojump, read cheaply.

Every simulated run (and ``sim elpl``'s virtual-time runs) uses
``MockClock(autojump_threshold=0)``: time stands still while any task can run and jumps to
the next deadline when none can. Its two hot paths cost more than they need to at rate 0:

* ``current_time()`` reads the real clock and scales it by the rate, which is 0: the virtual
  time is the base the jumps moved, whatever the real clock says. trio asks for the time in
  every scheduling batch and at every deadline set, the simulation's code in every timeout
  (some 350,000 reads a seed of ``sim faults``);
* each jump asks ``trio.lowlevel.current_statistics()`` for the next deadline, which also
  counts the living tasks and asks the I/O manager for its statistics; the deadline alone is
  one call on the run's deadline heap.

:func:`virtual_clock` gives a ``MockClock`` (so ``isinstance`` checks, such as
:func:`bookiesim.bookie.blocking.in_virtual_time`, see it as one) whose two methods do only
that. The times are the same floats either way, so a seed's run is the same run. It reaches
into trio's runner (private API: the deadline heap, the clock's virtual base), so it lives in
this one place, beside :mod:`.rng`'s scheduling pin, and falls back to the plain clock where
a trio release has moved them.
"""

from __future__ import annotations

import math

import trio.testing
from trio._core._run import GLOBAL_RUN_CONTEXT

__all__ = ["virtual_clock"]


def virtual_clock() -> trio.testing.MockClock:
    """A ``MockClock(autojump_threshold=0)`` with the cheap reads of the module docstring."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    if not isinstance(getattr(clock, "_virtual_base", None), float):
        return clock  # another trio's internals: its own methods are correct, if slower

    def current_time() -> float:
        # rate 0: _real_to_virtual(real) is _virtual_base + 0 * (real - _real_base)
        return clock._virtual_base

    def autojump() -> None:
        # What MockClock._autojump does, without the rest of the run's statistics.
        jump = GLOBAL_RUN_CONTEXT.runner.deadlines.next_deadline() - current_time()
        if 0 < jump < math.inf:
            clock.jump(jump)

    # Instance attributes: trio calls clock.current_time() and clock._autojump() through the
    # instance (MockClock is final, so no subclass).
    clock.current_time = current_time  # type: ignore[method-assign]
    clock._autojump = autojump  # type: ignore[method-assign]
    return clock
