"""The overlapping nemesis against fake injections on trio's virtual clock: the down budget
holds over what is down in fact (a restart outlasts its fault's planned end), a bookie takes
one process fault at a time, and a network fault never waits for either."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from bookiesim.chaos.history import Recorder
from bookiesim.chaos.nemesis import PlannedFault
from bookiesim.chaos.overlap_run import run_overlapping

if TYPE_CHECKING:
    from trio.testing import MockClock

    from bookiesim.chaos.netns import FaultRecord

BOOKIES = ["b1", "b2", "b3", "b4"]
RESTART = 5.0
"""How long a crashed bookie's restart takes here: past its fault's planned end."""


def _fault(start: float, length: float, kind: str, target: str) -> PlannedFault:
    family = "net" if kind in ("isolate", "loss") else kind
    return PlannedFault(start, length, family, kind, (target,))


async def _run(schedule: list[PlannedFault]) -> list[tuple[float, str, str, str]]:
    """(time, 'inject' or 'healed', kind, target) in the order they happened."""
    t0 = trio.current_time()
    events: list[tuple[float, str, str, str]] = []

    def note(what: str, fault: PlannedFault) -> None:
        events.append((round(trio.current_time() - t0, 3), what, fault.kind, fault.targets[0]))

    async def inject(fault: PlannedFault) -> FaultRecord | None:
        note("inject", fault)
        return None

    async def heal(fault: PlannedFault, record: FaultRecord | None) -> dict[str, Any]:
        if fault.kind == "crash":
            await trio.sleep(RESTART)
        note("healed", fault)
        return {}

    rec = Recorder(lambda record: None, clock=lambda: trio.current_time() - t0)
    await run_overlapping(schedule, t0, BOOKIES, 1, inject, heal, rec, lambda text: None)
    return events


async def test_a_restart_keeps_its_bookie_down_and_the_budget_waits_for_it(
    autojump_clock: MockClock,
) -> None:
    events = await _run(
        [
            _fault(1.0, 2.0, "crash", "b1"),  # planned 1..3, restarted at 8
            _fault(4.0, 2.0, "pause", "b2"),  # would make two down: waits, then its end passed
            _fault(5.0, 6.0, "pause", "b1"),  # its bookie's lock: from 8 to 11
            _fault(5.5, 1.0, "loss", "b3"),  # takes no bookie down: at once
            _fault(6.0, 3.0, "isolate", "b1"),  # a network fault on b1: at once
        ]
    )
    assert events == [
        (1.0, "inject", "crash", "b1"),
        (5.5, "inject", "loss", "b3"),
        (6.0, "inject", "isolate", "b1"),
        (6.5, "healed", "loss", "b3"),
        (8.0, "healed", "crash", "b1"),
        (8.0, "inject", "pause", "b1"),
        (9.0, "healed", "isolate", "b1"),
        (11.0, "healed", "pause", "b1"),
    ]
