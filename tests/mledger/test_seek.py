"""Seek by timestamp and by index against a brute-force scan, on random in-memory topics.

Why: the three narrowings (PIP-345 properties, #22792 close times, none) must give the
answer a scan of every entry gives — for random ledger sizes, empty ledgers, the open
ledger — and the properties must make it cheap. With publish times out of order no search
short of a scan has one answer: then the result must be a *boundary* (an entry before the
target followed by one that is not), which is what a monotone neighbour of the data gives.
"""

from __future__ import annotations

import itertools
import math
from array import array
from dataclasses import dataclass

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from bookiesim.mledger.memory_topic import MemoryLedger, MemoryTopic
from bookiesim.mledger.position import LedgerList, Position
from bookiesim.mledger.seek import SeekOutcome, SeekStrategy, seek_by_index, seek_by_timestamp

SKEW = 100
STRATEGIES = list(SeekStrategy)


@dataclass
class Topic:
    topic: MemoryTopic
    timestamps: list[int]
    indexes: list[int]


@st.composite
def topics(draw: st.DrawFn, *, ordered: bool) -> Topic:
    """Ledgers of 0..30 entries (the last one open), timestamps rising by 0..20 ms (with
    jitter up to SKEW/2 when not ``ordered``), batch indexes, close times within the skew
    allowance of what the ledger holds."""
    sizes = draw(st.lists(st.integers(0, 30), min_size=1, max_size=8))
    base = draw(st.integers(0, 10**12))
    index = -1
    ledgers: list[MemoryLedger] = []
    timestamps: list[int] = []
    indexes: list[int] = []
    high = base
    for n, size in enumerate(sizes):
        ledger = MemoryLedger(ledger_id=3 * n + 1)
        for _ in range(size):
            base += draw(st.integers(0, 20))
            jitter = 0 if ordered else draw(st.integers(0, SKEW // 2))
            index += draw(st.integers(1, 3))
            ledger.timestamps.append(base + jitter)
            ledger.indexes.append(index)
            high = max(high, base + jitter)
        if n < len(sizes) - 1:  # closed: the broker's clock a little after the last add
            ledger.close_timestamp = high + draw(st.integers(0, SKEW // 4))
        timestamps.extend(ledger.timestamps)
        indexes.extend(ledger.indexes)
        ledgers.append(ledger)
    return Topic(MemoryTopic(ledgers), timestamps, indexes)


def _flat(ledgers: LedgerList) -> list[Position]:
    return [ledgers.position_at(i) for i in range(ledgers.total_entries)]


def _check(outcome: SeekOutcome, ledgers: LedgerList, matches: list[bool], *, exact: bool) -> None:
    positions = _flat(ledgers)
    if exact:
        newest = max((i for i, m in enumerate(matches) if m), default=None)
        assert outcome.found == (None if newest is None else positions[newest])
    elif outcome.found is None:
        assert not matches or not matches[0]
    else:
        i = positions.index(outcome.found)
        assert matches[i]
        assert i == len(matches) - 1 or not matches[i + 1]
    expected_reset = (
        ledgers.next_position(outcome.found)
        if outcome.found is not None
        else ledgers.first_position() or Position(ledgers.ledgers[0].ledger_id, 0)
    )
    assert outcome.reset_to == expected_reset


def _monotone(matches: list[bool]) -> bool:
    return all(a or not b for a, b in itertools.pairwise(matches))


def _run(topic: Topic, target: int, strategy: SeekStrategy, by_index: bool) -> SeekOutcome:
    ledgers = topic.topic.ledger_list()

    async def go() -> SeekOutcome:
        if by_index:
            return await seek_by_index(ledgers, topic.topic, target, strategy=strategy)
        return await seek_by_timestamp(
            ledgers, topic.topic, target, max_clock_skew_ms=SKEW, strategy=strategy
        )

    return trio.run(go)


@given(
    topic=topics(ordered=True),
    offset=st.integers(-5, 1000),
    strategy=st.sampled_from(STRATEGIES),
)
@settings(max_examples=300)
def test_seek_by_timestamp_equals_a_scan(topic: Topic, offset: int, strategy: SeekStrategy) -> None:
    start = topic.timestamps[0] if topic.timestamps else 0
    target = start + offset
    outcome = _run(topic, target, strategy, by_index=False)
    matches = [ts < target for ts in topic.timestamps]
    _check(outcome, topic.topic.ledger_list(), matches, exact=True)


@given(
    topic=topics(ordered=False),
    offset=st.integers(-5, 1000),
    strategy=st.sampled_from(STRATEGIES),
)
@settings(max_examples=300)
def test_seek_with_out_of_order_times_finds_a_boundary(
    topic: Topic, offset: int, strategy: SeekStrategy
) -> None:
    start = min(topic.timestamps, default=0)
    target = start + offset
    outcome = _run(topic, target, strategy, by_index=False)
    matches = [ts < target for ts in topic.timestamps]
    ledgers = topic.topic.ledger_list()
    _check(outcome, ledgers, matches, exact=_monotone(matches))


@given(
    topic=topics(ordered=True),
    offset=st.integers(-3, 200),
    strategy=st.sampled_from([SeekStrategy.AUTO, SeekStrategy.PROPERTIES, SeekStrategy.FULL]),
)
@settings(max_examples=300)
def test_seek_by_index_equals_a_scan(topic: Topic, offset: int, strategy: SeekStrategy) -> None:
    outcome = _run(topic, offset, strategy, by_index=True)
    matches = [index < offset for index in topic.indexes]
    _check(outcome, topic.topic.ledger_list(), matches, exact=True)
    if outcome.found is not None and outcome.reset_to in _flat(topic.topic.ledger_list()):
        # The reset position is the entry holding message ``offset``.
        ledgers = topic.topic.ledger_list()
        i = _flat(ledgers).index(outcome.reset_to)
        assert topic.indexes[i] >= offset


@given(
    topic=topics(ordered=True),
    offset=st.integers(0, 1000),
    by_index=st.booleans(),
)
@settings(max_examples=200)
def test_properties_bound_the_reads(topic: Topic, offset: int, by_index: bool) -> None:
    """At most ⌈log2(entries per ledger)⌉ + 2 reads with properties (issue 7's target)."""
    target = offset if by_index else (topic.timestamps[0] if topic.timestamps else 0) + offset
    outcome = _run(topic, target, SeekStrategy.PROPERTIES, by_index)
    assert outcome.strategy is SeekStrategy.PROPERTIES
    largest = max(len(ledger.timestamps) for ledger in topic.topic.ledgers)
    assert outcome.entries_read <= math.ceil(math.log2(max(1, largest))) + 2


def test_without_properties_auto_falls_back_to_close_time_then_full() -> None:
    ledgers = [
        MemoryLedger(1, array("q", range(0, 100, 10)), array("q", range(10)), 95),
        MemoryLedger(2, array("q", range(100, 200, 10)), array("q", range(10, 20)), 195),
        MemoryLedger(3, array("q", range(200, 250, 10)), array("q", range(20, 25)), 0),
    ]
    topic = MemoryTopic(ledgers)

    async def go() -> None:
        bare = topic.ledger_list(properties=False)
        outcome = await seek_by_timestamp(bare, topic, 155, max_clock_skew_ms=0)
        assert outcome.strategy is SeekStrategy.CLOSE_TIME
        assert outcome.found == Position(2, 5)
        outcome = await seek_by_timestamp(bare, topic, 155, max_clock_skew_ms=-1)
        assert outcome.strategy is SeekStrategy.FULL
        assert outcome.found == Position(2, 5)
        outcome = await seek_by_index(bare, topic, 15)
        assert (outcome.strategy, outcome.found) == (SeekStrategy.FULL, Position(2, 4))
        with_props = topic.ledger_list()
        outcome = await seek_by_timestamp(with_props, topic, 155)
        assert (outcome.strategy, outcome.found) == (SeekStrategy.PROPERTIES, Position(2, 5))
        assert outcome.reset_to == Position(2, 6)

    trio.run(go)
