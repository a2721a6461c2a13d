"""Striping and quorum arithmetic (sans-IO), checked exhaustively with hypothesis.

Why: these few functions decide when an add is acknowledged and when recovery may stop
looking for an entry; invariants §4.7 gives four equivalent definitions of quorum coverage
from the TLA+ model, and our functions must agree with all four for every cohort, quorum and
set of answers.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.client.distribution import (
    FenceTracker,
    ReadOutcome,
    RecoveryReadTracker,
    RoundRobinDistribution,
    ensemble_covered,
    write_set_covered,
)

POSITIVE, NEGATIVE, PENDING = "positive", "negative", "pending"


@st.composite
def shapes(draw: st.DrawFn, max_e: int = 7) -> RoundRobinDistribution:
    e = draw(st.integers(1, max_e))
    qw = draw(st.integers(1, e))
    qa = draw(st.integers(1, qw))
    return RoundRobinDistribution(e, qw, qa)


@given(shapes(), st.integers(0, 2**40))
def test_write_set_is_qw_consecutive_positions(dist: RoundRobinDistribution, entry_id: int) -> None:
    ws = dist.write_set(entry_id)
    e = dist.ensemble_size
    assert len(ws) == dist.write_quorum
    assert len(set(ws)) == len(ws)
    assert ws[0] == entry_id % e
    assert all((b - a) % e == 1 for a, b in itertools.pairwise(ws))
    for position in range(e):
        assert dist.stores(entry_id, position) == (position in ws)


@given(shapes(), st.integers(0, 2**20))
def test_every_bookie_stores_qw_of_every_e_consecutive_entries(
    dist: RoundRobinDistribution, start: int
) -> None:
    counts = [0] * dist.ensemble_size
    for entry_id in range(start, start + dist.ensemble_size):
        for position in dist.write_set(entry_id):
            counts[position] += 1
    assert counts == [dist.write_quorum] * dist.ensemble_size


def test_upstream_example_e3_qw2() -> None:
    dist = RoundRobinDistribution(3, 2, 2)
    assert [dist.write_set(e) for e in range(4)] == [(0, 1), (1, 2), (2, 0), (0, 1)]


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="E >= Qw >= Qa"):
        RoundRobinDistribution(2, 3, 1)
    with pytest.raises(ValueError, match="E >= Qw >= Qa"):
        RoundRobinDistribution(3, 2, 0)


# --- quorum coverage: the four definitions of invariants §4.7 -------------------------------


@st.composite
def cohorts(draw: st.DrawFn) -> tuple[int, list[str]]:
    n = draw(st.integers(1, 7))
    aq = draw(st.integers(1, n))
    answers = draw(st.lists(st.sampled_from([POSITIVE, NEGATIVE, PENDING]), min_size=n, max_size=n))
    return aq, answers


@given(cohorts())
def test_coverage_agrees_with_the_four_model_definitions(cohort: tuple[int, list[str]]) -> None:
    aq, answers = cohort
    n = len(answers)
    members = range(n)
    positive = {i for i in members if answers[i] == POSITIVE}
    ours = write_set_covered(members, positive, aq)
    d1 = len(positive) >= n - aq + 1
    d2 = bool(positive) and all(
        any(i in positive for i in subset) for subset in itertools.combinations(members, aq)
    )
    d3 = sum(1 for a in answers if a != POSITIVE) < aq
    d4 = not any(
        all(i not in positive for i in subset) for subset in itertools.combinations(members, aq)
    )
    assert ours == d1 == d2 == d3 == d4


@given(shapes(), st.data())
def test_ensemble_coverage_is_coverage_of_every_write_set(
    dist: RoundRobinDistribution, data: st.DataObject
) -> None:
    positive = data.draw(st.sets(st.integers(0, dist.ensemble_size - 1)))
    expected = all(
        write_set_covered(dist.write_set(e), positive, dist.ack_quorum)
        for e in range(dist.ensemble_size)
    )
    assert ensemble_covered(dist, positive) == expected
    # The property that makes fencing safe: with coverage, no write set has Qa bookies
    # that are not fenced, so no add can be acknowledged by unfenced bookies alone.
    if ensemble_covered(dist, positive):
        for e in range(dist.ensemble_size):
            unfenced = [p for p in dist.write_set(e) if p not in positive]
            assert len(unfenced) < dist.ack_quorum


def test_striped_coverage_needs_more_than_a_count() -> None:
    # E=4, Qw=2, Qa=2: positions {0, 2} cover every write set ({0,1},{1,2},{2,3},{3,0}),
    # {0, 1} do not ({2,3} is untouched) though it is as many answers.
    dist = RoundRobinDistribution(4, 2, 2)
    assert ensemble_covered(dist, {0, 2})
    assert not ensemble_covered(dist, {0, 1})


# --- recovery reads (invariants A6) -----------------------------------------------------------


@given(
    shapes(),
    st.lists(st.sampled_from(["found", "missing", "failed"]), max_size=7),
)
def test_recovery_read_outcome(dist: RoundRobinDistribution, answers: list[str]) -> None:
    answers = answers[: dist.write_quorum]
    tracker = RecoveryReadTracker(dist.write_quorum, dist.ack_quorum)
    outcome = tracker.outcome()
    for answer in answers:
        outcome = getattr(tracker, f"record_{answer}")()
    found = answers.count("found")
    missing = answers.count("missing")
    if found:
        assert outcome is ReadOutcome.FOUND
    elif missing >= dist.write_quorum - dist.ack_quorum + 1:
        assert outcome is ReadOutcome.MISSING
    elif len(answers) == dist.write_quorum:
        assert outcome is ReadOutcome.UNKNOWN
    else:
        assert outcome is ReadOutcome.PENDING
    # Errors never count as "missing": an entry on Qa bookies can never be declared missing
    # as long as those bookies answered with an error or not at all.
    if outcome is ReadOutcome.MISSING:
        assert dist.write_quorum - missing < dist.ack_quorum


def test_fence_tracker() -> None:
    dist = RoundRobinDistribution(3, 3, 2)
    tracker = FenceTracker(dist)
    tracker.record_fenced(0, lac=4)
    assert not tracker.covered()
    tracker.record_failed(1)
    assert not tracker.all_answered()
    tracker.record_fenced(2, lac=7)
    assert tracker.covered()
    assert tracker.all_answered()
    assert tracker.lac == 7
