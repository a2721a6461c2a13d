"""The schedule with a ZooKeeper ensemble and auto-recovery nodes (sans-IO): its targets are
nodes of the run, at most one bookie, one ZooKeeper server and one auto-recovery daemon are
away at any moment (a quorum of three stays), and over enough seeds every kind appears."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

from hypothesis import given
from hypothesis import strategies as st

from bookiesim.chaos.daemons import AUTORECOVERY_NODES
from bookiesim.chaos.nemesis import FAMILIES, ZK_KINDS, PlannedFault, plan_schedule
from bookiesim.chaos.zookeepers import zookeeper_nodes

if TYPE_CHECKING:
    from pathlib import Path

BOOKIES = ["b1", "b2", "b3", "b4", "b5"]


def _schedule(seed: int, duration: float, families: list[str], zks: int) -> list[PlannedFault]:
    return plan_schedule(
        seed,
        duration,
        families,
        BOOKIES,
        zookeepers=zookeeper_nodes(zks),
        autorecovery=AUTORECOVERY_NODES,
    )


def _away_at(
    schedule: list[PlannedFault], t: float, nodes: list[str] | tuple[str, ...]
) -> set[str]:
    return {n for f in schedule if f.start <= t <= f.end for n in f.targets if n in nodes}


@given(
    seed=st.integers(0, 2**32),
    duration=st.floats(5, 400),
    families=st.lists(st.sampled_from(list(FAMILIES)), min_size=1, unique=True),
    zks=st.sampled_from([1, 3]),
)
def test_at_most_one_bookie_one_zookeeper_and_one_daemon_are_away_at_once(
    seed: int, duration: float, families: list[str], zks: int
) -> None:
    zookeepers = zookeeper_nodes(zks)
    schedule = _schedule(seed, duration, families, zks)
    assert schedule == _schedule(seed, duration, families, zks)
    for fault in schedule:
        assert set(fault.targets) <= {*BOOKIES, *zookeepers, *AUTORECOVERY_NODES}
        if fault.family == "zk":
            assert fault.kind in (ZK_KINDS if zks == 3 else ("session-expiry",))
            zk_kind = fault.kind != "session-expiry"
            assert set(fault.targets) <= set(zookeepers if zk_kind else BOOKIES)
        if set(fault.targets) & set(AUTORECOVERY_NODES):
            assert fault.family in ("crash", "pause")
        if set(fault.targets) & set(zookeepers):
            assert fault.kind in ("split", "zk-crash", "zk-isolate")
        # Every moment a fault starts or ends: what it takes away, with whatever overlaps.
        for t in (fault.start, fault.end):
            assert len(_away_at(schedule, t, BOOKIES)) <= (len(BOOKIES) - 1) // 2
            assert len(_away_at(schedule, t, zookeepers)) <= max(0, (zks - 1) // 2)
            assert len(_away_at(schedule, t, AUTORECOVERY_NODES)) <= 1


def test_over_enough_seeds_every_zk_kind_mixed_split_and_daemon_fault_appears() -> None:
    seen: set[str] = set()
    for seed in range(20):
        for fault in _schedule(seed, 120, ["zk", "net", "crash", "pause"], 3):
            if set(fault.targets) & set(AUTORECOVERY_NODES):
                seen.add(f"{fault.kind} on auto-recovery")
            elif fault.kind == "split" and any(t.startswith("zk") for t in fault.targets):
                seen.add("split with a ZooKeeper server")
            else:
                seen.add(fault.kind)
    assert seen >= {
        *ZK_KINDS,
        "split with a ZooKeeper server",
        "crash on auto-recovery",
        "pause on auto-recovery",
    }


def test_one_zookeeper_server_is_never_crashed_or_cut_off_alone() -> None:
    kinds = {f.kind for seed in range(20) for f in _schedule(seed, 120, ["zk", "net"], 1)}
    assert kinds & set(ZK_KINDS) == {"session-expiry"}
    assert not any(
        t.startswith("zk") for seed in range(20) for f in _schedule(seed, 120, ["net"], 1)
        for t in f.targets
    )  # fmt: skip


def test_a_zookeeper_count_other_than_one_or_three_is_refused_in_one_line(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "bookiesim", "chaos", "run", "--out", str(tmp_path / "r")]
    argv += ["--metadata", "zk", "--zookeepers", "2"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == ["chaos run: --zookeepers must be 1 or 3"]
