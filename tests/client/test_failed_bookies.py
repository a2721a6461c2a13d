"""The backoff rule for reusing bookies that failed a ledger handle (:mod:`.failed_bookies`),
against a model: failures in a row since the bookie last acknowledged an add."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.client.failed_bookies import STRIKES_AT_MAX, FailedBookies

BOOKIES = ("a", "b", "c")

events = st.lists(
    st.tuples(
        st.sampled_from(["failed", "acknowledged"]),
        st.sampled_from(BOOKIES),
        st.floats(min_value=0, max_value=10, allow_nan=False),
    ),
    max_size=60,
)


@given(
    events,
    st.floats(min_value=0, max_value=1, allow_nan=False),
    st.floats(min_value=1, max_value=30, allow_nan=False),
)
def test_backoff_doubles_per_failure_in_a_row_and_restarts_after_an_ack(
    steps: list[tuple[str, str, float]], first: float, cap: float
) -> None:
    bad = FailedBookies(first, cap)
    in_a_row: dict[str, int] = {}
    last_failed: dict[str, float] = {}
    now = 0.0
    for kind, bookie, advance in steps:
        now += advance
        if kind == "failed":
            bad.failed(bookie, now)
            in_a_row[bookie] = in_a_row.get(bookie, 0) + 1
            last_failed[bookie] = now
        else:
            bad.acknowledged(bookie)
            if bookie in in_a_row:
                in_a_row[bookie] = 0
        for b in BOOKIES:
            assert (b in bad) == (b in last_failed)  # once failed, always last to be chosen
            if b not in last_failed:
                assert bad.due_at(b) == -math.inf
                continue
            n = in_a_row[b]
            expected = 0.0 if n == 0 else min(cap, first * 2.0 ** (n - 1))
            assert bad.backoff(b) == pytest.approx(expected)
            assert bad.due_at(b) == pytest.approx(last_failed[b] + expected)
            assert bad.backoff(b) <= cap


def test_hours_of_failures_stay_at_the_cap() -> None:
    bad = FailedBookies(0.1, 5.0)
    for second in range(100_000):
        bad.failed("a", float(second))
    assert bad.backoff("a") == 5.0
    assert bad.due_at("a") == 99_999 + 5.0


def test_a_backoff_longer_than_its_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="first backoff <= max backoff"):
        FailedBookies(2.0, 1.0)


def test_a_bookie_is_exhausted_once_it_keeps_failing_at_the_longest_backoff() -> None:
    bad = FailedBookies(0.1, 5.0)  # backoffs 0.1, 0.2, ..., 3.2, then 5.0 (the 7th failure)
    assert bad.give_up_after == 7 + STRIKES_AT_MAX
    for n in range(1, 7 + STRIKES_AT_MAX):
        bad.failed("a", float(n))
        assert not bad.exhausted("a"), n
    assert bad.backoff("a") == 5.0
    bad.failed("a", 100.0)  # failed again after waiting the longest backoff out, once more
    assert bad.exhausted("a")
    bad.acknowledged("a")  # back: its next failure starts afresh
    assert not bad.exhausted("a")
    assert not bad.exhausted("never-failed")


@given(
    first=st.floats(0.0, 10.0),
    extra=st.floats(0.0, 100.0),
    failures=st.integers(0, 80),
)
def test_exhausted_exactly_after_its_failures_at_the_longest_backoff(
    first: float, extra: float, failures: int
) -> None:
    bad = FailedBookies(first, first + extra)
    for n in range(failures):
        bad.failed("a", float(n))
    # The failure that reaches the longest backoff, then one more after waiting it out.
    reach = next((d for d in range(65) if first == 0 or first * 2.0**d >= bad.max_backoff), 64)
    assert bad.give_up_after == reach + 1 + STRIKES_AT_MAX
    assert bad.exhausted("a") == (failures >= reach + 1 + STRIKES_AT_MAX)
    if failures >= reach + 1 and first > 0 and first * 2.0**64 >= bad.max_backoff:
        assert bad.backoff("a") == bad.max_backoff
