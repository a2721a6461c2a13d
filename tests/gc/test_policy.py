"""The sans-IO rules: usage buckets, candidates, compaction choice, throttle, disks, ledgers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.bookie.config import BookieConfig, ConfigError
from bookiesim.entrylog.metadata import EntryLogMetadata
from bookiesim.gc.ledgers import deleted_ledgers
from bookiesim.gc.policy import (
    CompactionKind,
    CompactionSettings,
    DiskAction,
    DiskState,
    Throttle,
    choose_compaction,
    classify_disk,
    disk_actions,
)
from bookiesim.gc.usage import EntryLogUsage, compaction_candidates, usage_bucket, usage_of


def test_usage_buckets() -> None:
    # testCalculateUsageBucket: 0..1 in ten buckets, 1.0 in the last one.
    assert [usage_bucket(i / 100) for i in (0, 9, 10, 55, 99, 100)] == [0, 0, 1, 5, 9, 9]
    with pytest.raises(ValueError, match="not in"):
        usage_bucket(1.5)


def meta(log_id: int, live: int, dead: int) -> EntryLogMetadata:
    m = EntryLogMetadata(log_id)
    if live:
        m.add_ledger_size(1, live)
    if dead:
        m.add_ledger_size(2, dead)
        m.remove_ledger(2)
    return m


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 100)), max_size=20), st.floats(0, 1))
def test_candidates_are_below_threshold_emptiest_first(
    sizes: list[tuple[int, int]], threshold: float
) -> None:
    metas = [meta(i, live, dead) for i, (live, dead) in enumerate(sizes)]
    chosen = compaction_candidates(metas, threshold)
    usage = {m.entry_log_id: usage_of(m) for m in metas}
    assert set(chosen) == {i for i, u in usage.items() if threshold > 0 and u < threshold}
    buckets = [usage_bucket(usage[i]) for i in chosen]
    assert buckets == sorted(buckets)


def test_target_size_makes_small_logs_emptier() -> None:
    m = meta(0, 100, 0)
    assert usage_of(m) == 1.0
    assert usage_of(m, 1000) == 0.1


def test_entry_log_usage_tracks_dead_bytes() -> None:
    usage = EntryLogUsage()
    usage.add(meta(7, 10, 0))
    assert usage.remove_deleted_ledgers(lambda ledger: ledger != 1) == 10
    assert usage.holds_dead_bytes(1)
    assert usage.empty_logs() == [7]
    usage._check()
    usage.forget(7)
    assert not usage.holds_dead_bytes(1)
    assert len(usage) == 0
    usage._check()


SETTINGS = CompactionSettings(0.2, 3600, None, 0.8, 86400, None)


@pytest.mark.parametrize(
    ("now", "force", "suspend_major", "suspend_minor", "expected"),
    [
        (10, False, False, False, None),
        (3601, False, False, False, CompactionKind.MINOR),
        (86401, False, False, False, CompactionKind.MAJOR),
        (86401, False, True, False, CompactionKind.MINOR),
        (86401, False, True, True, None),
        (10, True, False, False, CompactionKind.MAJOR),
        (10, True, True, False, CompactionKind.MINOR),
    ],
)
def test_choose_compaction(
    now: float,
    force: bool,
    suspend_major: bool,
    suspend_minor: bool,
    expected: CompactionKind | None,
) -> None:
    got = choose_compaction(
        SETTINGS,
        now=now,
        last_major=0,
        last_minor=0,
        force=force,
        suspend_major=suspend_major,
        suspend_minor=suspend_minor,
    )
    assert got is expected


def test_forced_compaction_when_disabled_needs_force_allow() -> None:
    # testForceGarbageCollectionWhenDisableCompactionConfigurationSettings: intervals 0.
    disabled = CompactionSettings(0.2, 0, None, 0.8, 0, None)
    kw = {"now": 1e9, "last_major": 0.0, "last_minor": 0.0, "suspend_major": False}
    assert choose_compaction(disabled, force=True, suspend_minor=False, **kw) is None  # type: ignore[arg-type]
    allowed = CompactionSettings(0.2, 0, None, 0.8, 0, None, force_allow=True)
    assert allowed.force_major_allowed
    assert allowed.force_minor_allowed
    got = choose_compaction(allowed, force=True, suspend_minor=False, **kw)  # type: ignore[arg-type]
    assert got is CompactionKind.MAJOR


def test_config_validation_is_upstreams() -> None:
    with pytest.raises(ConfigError, match="majorCompactionThreshold"):
        BookieConfig.from_mapping({"majorCompactionThreshold": "1.5"})
    with pytest.raises(ConfigError, match="minorCompactionThreshold"):
        BookieConfig.from_mapping(
            {"minorCompactionThreshold": "0.9", "majorCompactionThreshold": "0.5"}
        )
    cfg = BookieConfig.from_mapping({"minorCompactionMaxTimeMillis": "250"})
    assert CompactionSettings.from_config(cfg).minor_max_time == 0.25


def test_throttle_paces_entries_and_bytes() -> None:
    by_entries = Throttle(10, by_bytes=False)
    assert [by_entries.reserve(1000, 0.0) for _ in range(3)] == [0.0, 0.1, 0.2]
    assert by_entries.reserve(1, 5.0) == 5.0  # no permits saved up while idle
    by_bytes = Throttle(1000, by_bytes=True)
    assert by_bytes.reserve(500, 0.0) == 0.0
    assert by_bytes.reserve(500, 0.0) == 0.5
    with pytest.raises(ValueError, match="positive"):
        Throttle(0, by_bytes=True)


def test_disk_rules() -> None:
    assert classify_disk(0.96, 0.90, 0.95) is DiskState.FULL
    assert classify_disk(0.91, 0.90, 0.95) is DiskState.ALMOST_FULL
    assert classify_disk(0.5, 0.90, 0.95) is DiskState.WRITABLE
    w, a, f = DiskState.WRITABLE, DiskState.ALMOST_FULL, DiskState.FULL
    assert disk_actions(w, a, force_gc_allowed=False) == [DiskAction.SUSPEND_MAJOR]
    assert disk_actions(a, f, force_gc_allowed=False) == [
        DiskAction.SUSPEND_MAJOR,
        DiskAction.SUSPEND_MINOR,
    ]
    assert disk_actions(f, a, force_gc_allowed=False) == [DiskAction.RESUME_MINOR]
    assert disk_actions(a, w, force_gc_allowed=False) == [
        DiskAction.RESUME_MAJOR,
        DiskAction.RESUME_MINOR,
    ]
    assert disk_actions(w, w, force_gc_allowed=False) == []
    assert disk_actions(w, f, force_gc_allowed=True) == [DiskAction.FORCE_GC]
    assert disk_actions(f, w, force_gc_allowed=True) == [DiskAction.STOP_FORCING]


@given(st.sets(st.integers(0, 50)), st.sets(st.integers(0, 50)))
def test_deleted_ledgers_are_local_minus_metadata(local: set[int], meta_ids: set[int]) -> None:
    assert deleted_ledgers(local, meta_ids) == sorted(local - meta_ids)
