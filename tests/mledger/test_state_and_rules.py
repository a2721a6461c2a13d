"""The managed ledger's pure parts: its life-cycle table, the rollover rules, the record.

Why: these decide when a ledger is closed and what the stored record says; tested here with
hypothesis and no bookies, so every branch is reached cheaply (the managed-ledger tests on
real bookies then call ``ManagedLedger._check()`` after their steps).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from bookiesim.mledger.config import ManagedLedgerConfig
from bookiesim.mledger.ledger_properties import set_properties
from bookiesim.mledger.position import LedgerList, LedgerSummary, Position
from bookiesim.mledger.publishing import Message, encode_messages
from bookiesim.mledger.record import (
    INDEX_PROPERTY,
    LedgerInfo,
    build_record,
    ledger_infos_of,
    ledger_list_of,
    max_end_index,
)
from bookiesim.mledger.rollover import (
    ROLLOVER_JITTER,
    LedgerFill,
    entries_that_fit,
    is_full,
    is_idle,
    rollover_after_ms,
)
from bookiesim.mledger.seek import END_INDEX
from bookiesim.mledger.state import (
    TRANSITIONS,
    IllegalTransitionError,
    ManagedLedgerLifecycle,
    MLEvent,
    MLState,
)
from bookiesim.proto import MLDataFormats_pb2 as ml_pb
from bookiesim.proto.pulsar_entry import decode_pulsar_entry

# -- the life cycle ----------------------------------------------------------------------------


class LifecycleMachine(RuleBasedStateMachine):
    """Fences and closes in any order against a model of two independent facts."""

    def __init__(self) -> None:
        super().__init__()
        self.life = ManagedLedgerLifecycle()
        self.fenced = self.closed = False

    @rule()
    def fence(self) -> None:
        self.life.fire(MLEvent.FENCE)  # always legal: learning it twice changes nothing
        self.fenced = True

    @rule()
    def close(self) -> None:
        if self.closed:
            with pytest.raises(IllegalTransitionError):
                self.life.fire(MLEvent.CLOSE)
        else:
            self.life.fire(MLEvent.CLOSE)
            self.closed = True

    @invariant()
    def agrees(self) -> None:
        self.life._check()
        assert self.life.fenced == self.fenced
        assert self.life.closed == self.closed
        assert repr(self.life) == f"ManagedLedgerLifecycle({self.life.state.name})"


TestLifecycle = LifecycleMachine.TestCase


def test_the_table_reaches_every_state_and_only_forward() -> None:
    assert {MLState.OPEN} | set(TRANSITIONS.values()) == set(MLState)
    order = list(MLState)  # OPEN, FENCED, CLOSED, CLOSED_FENCED: nothing goes back to OPEN
    for (old, _event), new in TRANSITIONS.items():
        assert new is not MLState.OPEN
        assert order.index(new) >= order.index(old)


# -- the rollover rules ------------------------------------------------------------------------

configs = st.builds(
    ManagedLedgerConfig,
    max_entries_per_ledger=st.integers(1, 20),
    max_size_per_ledger_mb=st.integers(0, 1),
    minimum_rollover_time_ms=st.integers(0, 100),
    maximum_rollover_time_ms=st.integers(1, 1000),
    inactive_ledger_rollover_time_ms=st.integers(0, 100),
)


@given(
    config=configs,
    entries=st.integers(0, 25),
    size=st.integers(0, 2 << 20),
    age=st.integers(0, 1200),
    sizes=st.lists(st.integers(0, 1 << 20), min_size=1, max_size=30),
)
def test_a_batch_stops_at_the_add_that_fills_the_ledger(
    config: ManagedLedgerConfig, entries: int, size: int, age: int, sizes: list[int]
) -> None:
    after = float(config.maximum_rollover_time_ms)
    n = entries_that_fit(config, entries, size, age, after, sizes)
    assert 1 <= n <= len(sizes)
    if config.minimum_rollover_time_ms > 0 and age <= config.minimum_rollover_time_ms:
        assert n == len(sizes)  # too young to roll: the batch goes in whole
        assert not is_full(config, entries + n, size + sum(sizes), age, after)
        return
    if n < len(sizes):  # the n-th add makes it full
        assert is_full(config, entries + n, size + sum(sizes[:n]), age, after)
    for k in range(1, n):  # and no earlier one did, unless age alone does
        full_before = is_full(config, entries + k, size + sum(sizes[:k]), age, after)
        assert not full_before or age >= after


@given(config=configs, idle=st.integers(0, 200))
def test_idle_only_when_the_rule_is_on(config: ManagedLedgerConfig, idle: int) -> None:
    inactive = config.inactive_ledger_rollover_time_ms
    assert is_idle(config, idle) == (inactive > 0 and idle >= inactive)


def test_the_timer_is_spread_by_at_most_the_jitter() -> None:
    config = ManagedLedgerConfig(maximum_rollover_time_ms=1000)
    rng = random.Random(3)
    spreads = [rollover_after_ms(config, rng) for _ in range(200)]
    assert all(1000 <= s <= 1000 * (1 + ROLLOVER_JITTER) for s in spreads)


def test_ledger_fill_counts_adds_and_asks_the_rules() -> None:
    config = ManagedLedgerConfig(
        max_entries_per_ledger=2, minimum_rollover_time_ms=0, inactive_ledger_rollover_time_ms=5
    )
    fill = LedgerFill.new(config, 100, random.Random(1))
    assert fill.created_ms == fill.last_add_ms == 100
    assert fill.fits(config, 100, [b"a", b"b", b"c"]) == 2
    fill.add(b"abc")
    assert (fill.entries, fill.size) == (1, 3)
    assert fill.bounds.unparsed == 1  # not a Pulsar entry: no bounds claimed
    assert not fill.is_full(config, 100)
    assert fill.is_idle(config, 105)
    fill.add(b"d")
    assert fill.is_full(config, 100)


# -- the record --------------------------------------------------------------------------------


def test_the_record_round_trips_the_ledgers_index_and_terminated_position() -> None:
    first, extra = LedgerInfo(ledgerId=3, entries=2, size=9, timestamp=0), LedgerInfo(ledgerId=7)
    end = ml_pb.NestedPositionInfo(ledgerId=3, entryId=1)
    record = build_record([first], {"k": "v"}, 41, end, extra)
    assert [li.ledgerId for li in record.ledgerInfo] == [3, 7]
    assert {kv.key: kv.value for kv in record.properties} == {"k": "v", INDEX_PROPERTY: "41"}
    assert record.terminatedPosition == end
    bare = build_record([], {}, -1, None)
    assert not bare.properties
    assert not bare.HasField("terminatedPosition")
    infos = ledger_infos_of(record, now=555)
    assert list(infos) == [3, 7]
    assert infos[3].timestamp == 555  # a 0 close time is patched to now, as upstream does
    assert infos[3].entries == 2


def test_the_ledger_list_shows_the_open_ledger_as_filled_so_far() -> None:
    closed = LedgerInfo(ledgerId=1, entries=4, timestamp=10)
    open_ = LedgerInfo(ledgerId=2)
    fill = LedgerFill(entries=3)
    ledgers = ledger_list_of({1: closed, 2: open_}, 2, fill).ledgers
    assert [(s.ledger_id, s.entries, s.close_timestamp) for s in ledgers] == [(1, 4, 10), (2, 3, 0)]
    unknown = ledger_list_of({2: open_}, None, fill).ledgers  # no open ledger: as recorded
    assert [(s.entries, s.close_timestamp) for s in unknown] == [(0, None)]


def test_the_index_continues_from_the_largest_recorded_end_index() -> None:
    infos = [LedgerInfo(ledgerId=i) for i in range(4)]
    set_properties(infos[0], {END_INDEX: "7"})
    set_properties(infos[1], {END_INDEX: "not a number"})
    set_properties(infos[2], {END_INDEX: "12"})
    assert max_end_index(infos) == 12
    assert max_end_index(infos[3:]) == -1


@given(counts=st.lists(st.integers(1, 5), max_size=6), metadata=st.booleans())
def test_published_entries_carry_the_running_index(counts: list[int], metadata: bool) -> None:
    messages = [Message(b"m", num_messages=n, publish_time=None if n % 2 else 9) for n in counts]
    payloads = encode_messages(messages, lambda: 1234, last_index=4, broker_entry_metadata=metadata)
    index = 4
    for message, payload in zip(messages, payloads, strict=True):
        entry = decode_pulsar_entry(payload)
        index += message.num_messages
        assert entry.index == (index if metadata else None)
        assert entry.metadata.publish_time == (1234 if message.publish_time is None else 9)


# -- the ledger list ---------------------------------------------------------------------------


@given(
    counts=st.lists(st.integers(0, 4), max_size=6),
    probe=st.tuples(st.integers(0, 8), st.integers(-2, 6)),
)
def test_ledger_list_agrees_with_a_flat_list_of_positions(
    counts: list[int], probe: tuple[int, int]
) -> None:
    ledgers = LedgerList([LedgerSummary(2 * i + 1, n, None) for i, n in enumerate(counts)])
    flat = [Position(2 * i + 1, e) for i, n in enumerate(counts) for e in range(n)]
    assert ledgers.total_entries == len(flat)
    assert len(ledgers) == len(counts)
    assert [ledgers.position_at(o) for o in range(len(flat))] == flat
    assert [ledgers.offset_of(p) for p in flat] == list(range(len(flat)))
    assert ledgers.first_position() == (flat[0] if flat else None)
    assert ledgers.last_position() == (flat[-1] if flat else None)
    position = Position(*probe)
    after = sum(1 for p in flat if p < position)
    assert ledgers.clamp_offset(position, after=True) == after
    assert ledgers.clamp_offset(position, after=False) == sum(1 for p in flat if p <= position) - 1
    following = [p for p in flat if p > position]
    if following:
        assert ledgers.next_position(position) == following[0]
    with pytest.raises(IndexError):
        ledgers.position_at(len(flat))
    with pytest.raises(KeyError):
        ledgers.index_of(0)  # ids are odd
    if position not in flat:
        with pytest.raises(KeyError):
            ledgers.offset_of(position)


def test_ledger_list_edges() -> None:
    assert LedgerList([]).next_position(Position(4, 7)) == Position(4, 8)
    tail = LedgerList([LedgerSummary(1, 2, None), LedgerSummary(3, 0, 0)])
    assert tail.next_position(Position(1, 1)) == Position(3, 0)  # the open ledger's next
    assert tail.last_of(0) == Position(1, 1)
    with pytest.raises(ValueError, match="ascend"):
        LedgerList([LedgerSummary(3, 1, None), LedgerSummary(1, 1, None)])
    assert Position.parse("12:-1") == Position(12, -1)
    assert str(Position(12, 3)) == "12:3"
    with pytest.raises(ValueError, match="LEDGER:ENTRY"):
        Position.parse("12")
