"""The disk check's rules (upstream's LedgerDirsMonitor), without a disk: which directories
are full after each check, when a full group comes back, and that it does not flap."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bookiesim.bookie.config import BookieConfig
from bookiesim.bookie.disk_state import (
    DirSpace,
    DirsState,
    DiskThresholds,
    check,
    total_usage,
)
from bookiesim.gc.policy import DiskState

T = DiskThresholds(full=0.95, warn=0.90, lwm=0.80)
DIRS = ("/a", "/b", "/c")

fractions = st.floats(0.0, 1.0, allow_nan=False)
thresholds = st.tuples(fractions, fractions, fractions).map(
    lambda t: DiskThresholds(full=max(t), warn=sorted(t)[1], lwm=min(t))
)


@st.composite
def groups(draw: st.DrawFn) -> DirsState:
    dirs = DIRS[: draw(st.integers(1, len(DIRS)))]
    filled = draw(st.sets(st.sampled_from(dirs)))
    return DirsState(dirs, frozenset(filled))


def test_thresholds_are_upstreams_keys_and_the_mark_defaults_to_the_threshold() -> None:
    assert DiskThresholds.from_config(BookieConfig()) == DiskThresholds(0.95, 0.90, 0.95)
    cfg = BookieConfig().replace(disk_usage_lwm_threshold=0.7)
    assert DiskThresholds.from_config(cfg).lwm == 0.7


def test_a_writable_dir_above_the_threshold_is_filled_and_above_warn_almost_full() -> None:
    result = check(DirsState(DIRS), {"/a": 0.96, "/b": 0.91, "/c": 0.5}, 0.79, T)
    assert result.state.filled == {"/a"}
    assert result.newly_filled == ("/a",)
    assert result.almost_full == ("/b",)
    assert not result.state.all_full
    assert result.disk_state is DiskState.FULL


def test_the_last_writable_dir_filled_makes_the_group_full() -> None:
    result = check(DirsState(("/a",)), {"/a": 0.99}, 0.99, T)
    assert result.state.all_full


def test_a_full_group_comes_back_only_below_the_low_water_mark() -> None:
    full = DirsState(("/a",), frozenset({"/a"}))
    # Below the threshold but above the mark: still full (no flapping at the threshold).
    assert check(full, {"/a": 0.85}, 0.85, T).state.all_full
    back = check(full, {"/a": 0.79}, 0.79, T)
    assert not back.state.all_full
    assert back.recovered == ("/a",)
    assert back.disk_state is DiskState.WRITABLE


def test_below_the_mark_a_dir_still_above_the_threshold_stays_full() -> None:
    # Two dirs on two disks: the group's total is low, but /a itself is still full.
    full = DirsState(("/a", "/b"), frozenset({"/a", "/b"}))
    result = check(full, {"/a": 0.97, "/b": 0.2}, 0.58, T)
    assert result.state.filled == {"/a"}
    assert result.recovered == ("/b",)


def test_while_a_dir_is_writable_a_filled_one_comes_back_at_the_threshold() -> None:
    # Upstream's rule: the mark applies only to a read-only bookie.
    state = DirsState(("/a", "/b"), frozenset({"/a"}))
    result = check(state, {"/a": 0.93, "/b": 0.5}, 0.71, T)
    assert result.recovered == ("/a",)
    assert result.almost_full == ("/a",)
    assert result.disk_state is DiskState.ALMOST_FULL


def test_out_of_space_fills_every_dir_until_the_mark() -> None:
    state = DirsState(DIRS).all_filled()
    assert state.all_full
    assert check(state, dict.fromkeys(DIRS, 0.9), 0.9, T).state.all_full
    assert not check(state, dict.fromkeys(DIRS, 0.5), 0.5, T).state.all_full


def test_total_usage_counts_each_file_system_once() -> None:
    same = DirSpace(fs=1, total=100, available=10)
    other = DirSpace(fs=2, total=300, available=290)
    assert total_usage([same, same, other]) == 1 - 300 / 400
    assert total_usage([]) == 0.0
    assert DirSpace(3, 0, 0).used == 0.0


@given(groups(), st.dictionaries(st.sampled_from(DIRS), fractions), fractions, thresholds)
def test_check_follows_upstreams_rules(
    state: DirsState, usage: dict[str, float], group_usage: float, t: DiskThresholds
) -> None:
    result = check(state, usage, group_usage, t)
    after = result.state
    assert after.dirs == state.dirs
    assert after.filled <= set(state.dirs)
    assert set(result.newly_filled) <= set(state.writable)
    assert set(result.recovered) <= state.filled
    for d in state.dirs:
        used = usage.get(d)
        if used is None:  # not measured: unchanged
            assert (d in after.filled) == (d in state.filled)
        elif used > t.full:  # above the threshold: never writable
            assert d in after.filled
        elif d in state.filled and d not in after.filled:  # came back
            some_stayed_writable = any(w not in after.filled for w in state.writable)
            assert some_stayed_writable or group_usage < t.lwm
            assert used <= t.full
        elif d not in state.filled:  # writable and not above the threshold: stays so
            assert d not in after.filled
    if state.writable == () and group_usage >= t.lwm:
        assert result.recovered == ()  # read-only above the mark: nothing comes back
    assert after.all_full == (not after.writable)


@given(st.lists(st.floats(0.81, 0.95), max_size=30))
def test_a_full_disk_hovering_between_the_mark_and_the_threshold_stays_full(
    usages: list[float],
) -> None:
    state = check(DirsState(("/a",)), {"/a": 0.96}, 0.96, T).state
    for used in usages:
        state = check(state, {"/a": used}, used, T).state
        assert state.all_full
    state = check(state, {"/a": 0.5}, 0.5, T).state
    assert not state.all_full
