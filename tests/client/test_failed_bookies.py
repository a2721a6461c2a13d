"""The backoff rule for reusing bookies that failed a ledger handle (:mod:`.failed_bookies`),
against a model: failures in a row since the bookie last acknowledged an add."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.client.failed_bookies import FailedBookies

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
