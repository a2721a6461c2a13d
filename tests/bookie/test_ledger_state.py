"""The per-ledger fence and master-key state machine, without a bookie.

Hypothesis feeds random event sequences to :class:`LedgerStateMachine` and holds it to an
independent model written as the bookie used to decode its four loose fields (``fenced``,
``key_journaled``, a fence event, a fence error): every legal event moves as the model says,
every illegal one is refused with a message naming the ledger, the state and the event, and
leaves the state alone; ``_check()`` after every step. The descriptor's trio side (fencing
reads sharing one journal write, each seeing its own write's outcome) is driven by hand, the
test playing the journal's completions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from bookiesim.bookie.errors import BookieIOError, UnauthorizedError
from bookiesim.bookie.handles import LedgerDescriptor
from bookiesim.bookie.journal import FenceRecord, MasterKeyRecord
from bookiesim.bookie.ledger_state import (
    FENCED_STATES,
    KEY_JOURNALED_STATES,
    TRANSITIONS,
    IllegalTransitionError,
    LedgerEvent,
    LedgerState,
    LedgerStateMachine,
    check_table,
)


@dataclass(frozen=True)
class Model:
    """The old fields: fenced, key_journaled, and the fence write (None, "pending", "ok",
    "failed")."""

    fenced: bool
    key: bool = False
    write: str | None = None

    def step(self, event: LedgerEvent) -> Model | None:
        """The next model, or None where the old bookie code would never have done this."""
        if event is LedgerEvent.JOURNAL_KEY:
            return None if self.key or self.write is not None else replace(self, key=True)
        if event is LedgerEvent.FENCE:
            # fence(): a new record unless one is in flight or durable.
            if self.write in ("pending", "ok"):
                return None
            return Model(fenced=True, key=True, write="pending")
        if self.write != "pending":
            return None
        return replace(self, write="ok" if event is LedgerEvent.FENCE_SYNCED else "failed")

    def state(self) -> LedgerState:
        if self.write == "pending":
            return LedgerState.FENCING
        if self.write == "ok":
            return LedgerState.FENCED
        if self.write == "failed":
            return LedgerState.FENCE_FAILED
        if self.fenced:
            return LedgerState.FENCED_STORED if self.key else LedgerState.FENCED_STORED_KEY_PENDING
        return LedgerState.OPEN if self.key else LedgerState.KEY_PENDING


@given(st.booleans(), st.lists(st.sampled_from(LedgerEvent), max_size=30))
def test_random_event_sequences_follow_the_model(fenced: bool, events: list[LedgerEvent]) -> None:
    machine = LedgerStateMachine(fenced=fenced, ledger_id=7)
    model = Model(fenced=fenced)
    machine._check()
    for event in events:
        nxt = model.step(event)
        before = machine.state
        assert machine.can(event) == (nxt is not None)
        if nxt is None:
            with pytest.raises(IllegalTransitionError, match=f"ledger 7: {event.name} is illegal"):
                machine.process(event)
            assert machine.state is before
        else:
            assert machine.process(event) is nxt.state()
            assert machine.fenced == nxt.fenced
            assert machine.key_journaled == nxt.key
            model = nxt
        machine._check()
        assert machine.state is model.state()
        assert machine.fence_durable == (model.write == "ok")
        assert machine.fence_in_flight == (model.write == "pending")


def test_the_table_is_the_model() -> None:
    check_table()
    for state in LedgerState:
        for event in LedgerEvent:
            legal = event in TRANSITIONS[state]
            models = [
                Model(fenced, key, write)
                for fenced in (False, True)
                for key in (False, True)
                for write in (None, "pending", "ok", "failed")
                if Model(fenced, key, write).state() is state
                and (write is None or (fenced and key))
            ]
            assert models, state
            for model in models:
                nxt = model.step(event)
                assert (nxt is not None) == legal, (state, event)
                if nxt is not None:
                    assert TRANSITIONS[state][event] is nxt.state()


def test_fencing_is_irreversible_and_the_error_names_what_is_legal() -> None:
    machine = LedgerStateMachine(fenced=False)
    machine.process(LedgerEvent.FENCE)
    machine.process(LedgerEvent.FENCE_SYNCED)
    assert machine.state in FENCED_STATES & KEY_JOURNALED_STATES
    for event in LedgerEvent:
        with pytest.raises(
            IllegalTransitionError, match=r"^ledger: .* in FENCED \(legal: nothing\)"
        ):
            machine.process(event)
    assert repr(machine) == "LedgerStateMachine(ledger_id=None, state=FENCED)"


def test_check_catches_a_flag_out_of_step() -> None:
    machine = LedgerStateMachine(fenced=False)
    machine.fenced = True
    with pytest.raises(AssertionError):
        machine._check()


class DescriptorMachine(RuleBasedStateMachine):
    """A descriptor driven as the bookie drives it: key records, fences, journal outcomes."""

    @initialize(fenced=st.booleans())
    def start(self, fenced: bool) -> None:
        self.handle = LedgerDescriptor(3, b"key", fenced=fenced)
        self.model = Model(fenced=fenced)

    @rule()
    def journal_key(self) -> None:
        record = self.handle.key_record()
        if self.model.key or self.model.write is not None:
            assert record is None
        else:
            assert record == MasterKeyRecord(3, b"key")
            self.model = replace(self.model, key=True)

    @rule()
    def fence(self) -> None:
        if not self.handle.needs_fence_record:
            assert self.model.write in ("pending", "ok")
            with pytest.raises(IllegalTransitionError):
                self.handle.begin_fence()
            return
        records = self.handle.begin_fence()
        expected: list[object] = [FenceRecord(3)]
        if not self.model.key:
            expected.insert(0, MasterKeyRecord(3, b"key"))
        assert records == expected
        self.model = Model(fenced=True, key=True, write="pending")

    @rule(ok=st.booleans())
    def journal_answers(self, ok: bool) -> None:
        if self.model.write != "pending":
            return
        self.handle.fence_logged(None if ok else OSError("disk gone"))
        self.model = replace(self.model, write="ok" if ok else "failed")

    @invariant()
    def agrees(self) -> None:
        if not hasattr(self, "handle"):
            return
        self.handle._check()
        assert self.handle.state is self.model.state()
        assert self.handle.fenced == self.model.fenced
        assert self.handle.fence_is_durable == (self.model.write == "ok")


TestDescriptor = DescriptorMachine.TestCase


async def test_fencing_reads_share_one_write_and_each_sees_its_own_outcome() -> None:
    handle = LedgerDescriptor(9, b"k", fenced=False)
    results: list[str] = []

    async def waiter() -> None:
        try:
            await handle.wait_fence_durable()
        except BookieIOError as exc:
            results.append(str(exc))
        else:
            results.append("ok")

    assert handle.begin_fence() == [MasterKeyRecord(9, b"k"), FenceRecord(9)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        handle.fence_logged(OSError("no space"))
        # A retry starts before the first waiters run: they still see the failure.
        assert handle.needs_fence_record
        assert handle.begin_fence() == [FenceRecord(9)]
    assert results == ["fence of ledger 9 not persisted: no space"] * 2
    handle.fence_logged(None)
    await handle.wait_fence_durable()
    assert handle.fence_is_durable
    assert handle.state is LedgerState.FENCED  # so needs_fence_record is False
    handle._check()


def test_keys_and_lac() -> None:
    handle = LedgerDescriptor(1, b"k", fenced=True, lac=4)
    handle.check_key(b"k")
    with pytest.raises(UnauthorizedError, match="ledger 1"):
        handle.check_key(b"x")
    handle.advance_lac(3)
    assert handle.lac == 4
    handle.advance_lac(5)
    assert handle.lac == 5
    assert repr(handle) == "LedgerDescriptor(1, FENCED_STORED_KEY_PENDING, lac=5)"
    assert handle.with_key([]) == [MasterKeyRecord(1, b"k")]
    assert handle.with_key([]) == []
