"""Overlapping faults (``--overlap``): the schedule's rules, for any seed (sans-IO)."""

from __future__ import annotations

import hashlib
import itertools
import json

from hypothesis import given
from hypothesis import strategies as st

from bookiesim.chaos.nemesis import (
    FAULT_SECONDS,
    GAP_SECONDS,
    ZK_FAULT_SECONDS,
    PlannedFault,
    plan_schedule,
)
from bookiesim.chaos.overlap import (
    STAGGER_SECONDS,
    bookies_down,
    plan_overlapping,
    shares_process,
)

FAMILIES = ["net", "pause", "crash", "disk", "zk", "power", "eio"]
"""The families this test knows (not nemesis.FAMILIES: a family added later keeps it valid)."""


def _lasting_at(schedule: list[PlannedFault], t: float) -> list[PlannedFault]:
    return [f for f in schedule if f.start <= t < f.end]


@given(
    seed=st.integers(0, 2**32),
    duration=st.floats(5, 300),
    families=st.lists(st.sampled_from(FAMILIES), min_size=1, unique=True),
    count=st.integers(3, 7),
    max_down=st.integers(0, 3),
)
def test_overlapping_faults_never_take_more_bookies_down_than_allowed(
    seed: int, duration: float, families: list[str], count: int, max_down: int
) -> None:
    bookies = [f"b{i}" for i in range(1, count + 1)]
    schedule = plan_overlapping(seed, duration, families, bookies, max_down)
    assert schedule == plan_overlapping(seed, duration, families, bookies, max_down)
    for fault in schedule:
        assert fault.family in families
        assert 0 < fault.start < fault.end <= duration
        assert set(fault.targets) <= set(bookies)
    for before, after in itertools.pairwise(schedule):
        assert after.start - before.start >= STAGGER_SECONDS - 1e-9
    # The set of lasting faults changes only at a start or an end: look at every start.
    for fault in schedule:
        lasting = _lasting_at(schedule, fault.start)
        if len(lasting) < 2:
            continue
        down = set().union(*(bookies_down(f, bookies) for f in lasting))
        assert len(down) <= max_down, (fault, lasting)
        for i, a in enumerate(lasting):
            assert not any(shares_process(a, b) for b in lasting[i + 1 :])


@given(
    seed=st.integers(0, 2**32),
    families=st.lists(st.sampled_from(FAMILIES), min_size=1, unique=True),
)
def test_every_family_comes_when_the_run_is_long_enough(seed: int, families: list[str]) -> None:
    # A fault starts at the latest a gap after every earlier one ended: the one-at-a-time
    # bound.
    longest = max(FAULT_SECONDS[1], ZK_FAULT_SECONDS[1])
    enough = GAP_SECONDS[1] + len(families) * (longest + GAP_SECONDS[1])
    schedule = plan_overlapping(seed, enough, families, ["b1", "b2", "b3", "b4"], 1)
    assert {f.family for f in schedule} == set(families)


def test_overlaps_happen_and_combine_a_bookie_fault_with_network_faults() -> None:
    bookies = ["b1", "b2", "b3", "b4"]
    pairs: set[tuple[str, str]] = set()
    for seed in range(30):
        schedule = plan_overlapping(seed, 120, ["net", "pause", "crash"], bookies, 1)
        for i, a in enumerate(schedule):
            for b in schedule[i + 1 :]:
                if b.start < a.end:
                    pairs.add((a.kind, b.kind))
                    # With 4 bookies and E=3 only one bookie may be down: a second fault
                    # is lossy or on the same bookie.
                    if bookies_down(a, bookies) and bookies_down(b, bookies):
                        assert a.targets == b.targets
    assert len(pairs) >= 5, pairs
    assert any("crash" in p and ("isolate" in p or "split" in p) for p in pairs), pairs


def test_without_overlap_the_schedule_is_the_one_of_before() -> None:
    """The one-at-a-time schedules of these seeds, as the commit before --overlap planned
    them: a history recorded then replays the same."""
    digest = hashlib.sha256()
    for seed in range(40):
        for families in (
            ["net", "pause", "crash", "disk", "zk", "power"],
            ["net"],
            ["crash", "pause"],
            ["power", "net", "zk"],
        ):
            for f in plan_schedule(seed, 120.0, families, ["b1", "b2", "b3", "b4"]):
                record = [f.start, f.length, f.family, f.kind, f.targets, sorted(f.params.items())]
                digest.update(json.dumps(record).encode())
    assert digest.hexdigest() == "90af9c45ce525702f042098fa9e72bb5a5926062fc8d258c51e7afe8e67f43c2"
