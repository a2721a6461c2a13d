"""Overlapping faults (``chaos run --overlap``): one fault may begin while others last (sans-IO).

The faults are those of the one-at-a-time schedule (:func:`~bookiesim.chaos.nemesis.
plan_schedule` over a longer span: same kinds, targets, parameters and lengths, families in
the same seeded round-robin), placed again by a second seeded generator: each one, with
probability :data:`OVERLAP_CHANCE`, starts while the one before it lasts, otherwise after
everything placed has ended and a quiet gap. An overlapping start is kept only when it
respects the rules below, as drawn or with the fault (if it hits one bookie) moved to a
bookie the lasting faults already took down; when neither does, the fault goes after the
others instead. So the
schedule is still a pure function of (seed, duration, families, bookies, ``max_down``), and
the replay, which repeats them, repeats it.

The rules, wherever two or more faults last at once:

* at most ``max_down`` bookies are down (:func:`bookies_down`): the harness passes
  ``bookies - max(E)``, what the writers' ensembles survive by ensemble changes. With the
  default 4 bookies and E=3 that is 1: a fault that takes a bookie down then overlaps only
  faults on that same bookie or faults that take no bookie down;
* two faults on a common node are not both process faults (pause, crash, power loss, a full
  disk, read errors: anything but a network fault): a bookie carries one at a time, since
  their injections and heals act on the same process (a crash's restart must not race a
  power loss's). A network fault may overlap anything on its node: a bookie may be paused,
  killed or restarted behind a partition;
* at most one lasting fault touches a node that is not a bookie (a ZooKeeper server, an
  auto-recovery daemon): a ZooKeeper ensemble's quorum is not this planner's to budget.

A fault that lasts alone is as in the one-at-a-time schedule (a split may take more than
``max_down`` bookies then, as it does there).
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import TYPE_CHECKING

from bookiesim.chaos.nemesis import FAULT_SECONDS, GAP_SECONDS, ZK_FAULT_SECONDS, plan_schedule

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from bookiesim.chaos.nemesis import PlannedFault

__all__ = [
    "NETWORK_KINDS",
    "OVERLAP_CHANCE",
    "SOFT_KINDS",
    "bookies_down",
    "plan_overlapping",
    "shares_process",
]

OVERLAP_CHANCE = 0.6
"""How often a fault tries to start while the one before it lasts."""
STAGGER_SECONDS = 1.0
"""At least this between two starts: the harness injects them one after the other."""
NETWORK_KINDS = frozenset({"isolate", "split", "one-way", "loss", "session-expiry", "zk-isolate"})
"""Faults the harness lays as nft rules of their own and lifts alone: they may overlap any
fault on their nodes. Any other kind (a family added later included) counts as a process
fault, the safe side."""
SOFT_KINDS = frozenset({"loss", "slow"})
"""Faults after which their bookies still serve (slower): they take no bookie down. Packet
loss leaves TCP to retransmit, a token bucket queues; a one-way cut does not (the client
cannot reach the bookie)."""
LONGEST_FAULT = max(FAULT_SECONDS[1], ZK_FAULT_SECONDS[1])


def bookies_down(fault: PlannedFault, bookies: Iterable[str]) -> frozenset[str]:
    """The bookies ``fault`` leaves unable to take a writer's adds while it lasts: its
    bookie targets, unless it is a :data:`SOFT_KINDS` fault. (The history's ``down`` list,
    what the availability check excuses, is every target still: a lossy link may stall a
    journey step past its timeout.)"""
    if fault.kind in SOFT_KINDS:
        return frozenset()
    return frozenset(fault.targets) & frozenset(bookies)


def shares_process(a: PlannedFault, b: PlannedFault) -> bool:
    """Both are process faults (not :data:`NETWORK_KINDS`) on a common node."""
    process = a.kind not in NETWORK_KINDS and b.kind not in NETWORK_KINDS
    return process and bool(set(a.targets) & set(b.targets))


def _fits(
    fault: PlannedFault, lasting: Sequence[PlannedFault], bookies: Sequence[str], max_down: int
) -> bool:
    """Whether ``fault`` may start while ``lasting`` last (module docstring's rules)."""
    if not lasting:
        return True
    down = bookies_down(fault, bookies).union(*(bookies_down(f, bookies) for f in lasting))
    if len(down) > max_down:
        return False
    if any(shares_process(fault, other) for other in lasting):
        return False
    beyond = [f for f in (fault, *lasting) if set(f.targets) - set(bookies)]
    return len(beyond) <= 1


def _fitting(
    fault: PlannedFault, lasting: Sequence[PlannedFault], bookies: Sequence[str], max_down: int
) -> PlannedFault | None:
    """``fault`` if it may start while ``lasting`` last; else, for a fault on one bookie, the
    same fault moved to the first bookie (in name order) that ``lasting`` took down where it
    fits (a partition of a crashed bookie, a pause of an isolated one); else None."""
    if _fits(fault, lasting, bookies, max_down):
        return fault
    if len(fault.targets) != 1 or fault.targets[0] not in bookies:
        return None
    taken = sorted(set().union(*(bookies_down(f, bookies) for f in lasting)))
    for bookie in taken:
        moved = replace(fault, targets=(bookie,))
        if _fits(moved, lasting, bookies, max_down):
            return moved
    return None


def plan_overlapping(
    seed: int,
    duration: float,
    families: list[str],
    bookies: list[str],
    max_down: int,
    *,
    zookeepers: Sequence[str] = (),
    autorecovery: Sequence[str] = (),
) -> list[PlannedFault]:
    """Faults within ``duration`` seconds, each ending by then, starts in order and at least
    :data:`STAGGER_SECONDS` apart, overlapping under the module docstring's rules;
    ``zookeepers`` and ``autorecovery`` as :func:`plan_schedule` takes them."""
    # Every start is at least STAGGER_SECONDS after the one before: this span's one-at-a-time
    # schedule holds more faults than can be placed.
    span = (duration / STAGGER_SECONDS + 1) * (LONGEST_FAULT + GAP_SECONDS[1])
    pool = plan_schedule(
        seed, span, families, bookies, zookeepers=zookeepers, autorecovery=autorecovery
    )
    rng = random.Random(f"overlap/{seed}")
    placed: list[PlannedFault] = []
    ends_by = rng.uniform(*GAP_SECONDS)
    """The first start when nothing is lasting: every end so far plus a gap."""
    for fault in pool:
        start = ends_by
        if placed and rng.random() < OVERLAP_CHANCE:
            before = placed[-1]
            earliest = before.start + STAGGER_SECONDS
            latest = max(earliest, before.end - STAGGER_SECONDS)
            candidate = round(rng.uniform(earliest, latest), 3)
            lasting = [f for f in placed if f.end > candidate]
            fitting = _fitting(fault, lasting, bookies, max_down)
            if fitting is not None:
                fault, start = fitting, candidate
        start = round(start, 3)
        if start + fault.length > duration:
            break
        placed.append(replace(fault, start=start))
        ends_by = max(f.end for f in placed) + rng.uniform(*GAP_SECONDS)
    return placed
