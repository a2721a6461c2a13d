"""What a bookie knows about one ledger's fence and master-key records: a pure state machine.

Theory of operation
-------------------
Two facts about a ledger matter to the add and fence paths (reference §6.3, §7):

* whether *this process* has journaled the ledger's master-key record yet: upstream writes it
  once per ledger per process, just ahead of the first record it journals for the ledger
  (an entry, a fence or an explicit LAC), so that replay can recreate the ledger;
* how far fencing has got: not fenced; fenced in storage by an earlier process (the index
  header's fence bit) with no fence record from this one; a fence record handed to the
  journal and not yet synced; durable; or the journal failed to write it (a later fencing
  read tries again). Fencing is irreversible.

Both live in one enum, :class:`LedgerState`, because they are not independent: a fence
record always carries the master-key record ahead of it when the key is still pending, so
every state past ``FENCING`` has the key journaled. The legal moves are the one table
:data:`TRANSITIONS`; :class:`LedgerStateMachine` refuses anything else with
:class:`IllegalTransitionError`, so a bookie bug shows up as a named error instead of a
quietly wrong answer to a fencing read.

No I/O and no trio here (h11's habit): waiting for a fence to become durable, and waking
long polls, belong to the handle that owns a machine
(:class:`~bookiesim.bookie.handles.LedgerDescriptor`). Hypothesis drives this module
directly (``tests/bookie/test_ledger_state.py``).
"""

from __future__ import annotations

import enum
import functools
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "FENCED_STATES",
    "INITIAL_STATES",
    "KEY_JOURNALED_STATES",
    "TRANSITIONS",
    "IllegalTransitionError",
    "LedgerEvent",
    "LedgerState",
    "LedgerStateMachine",
    "check_table",
]


class LedgerState(enum.Enum):
    """Where one ledger stands in this bookie process."""

    KEY_PENDING = "key_pending"
    """Open for adds; this process has not journaled the master key yet."""
    OPEN = "open"
    """Open for adds; the master key is journaled."""
    FENCED_STORED_KEY_PENDING = "fenced_stored_key_pending"
    """Fenced in storage by an earlier process (or by replay); nothing journaled here yet."""
    FENCED_STORED = "fenced_stored"
    """Fenced in storage; the key is journaled (a recovery add or an explicit LAC) but this
    process has journaled no fence record: a fencing read writes one and waits for it."""
    FENCING = "fencing"
    """A fence record is in the journal, not yet synced; fencing reads wait for it."""
    FENCED = "fenced"
    """The fence record is durable: fencing reads answer at once."""
    FENCE_FAILED = "fence_failed"
    """The journal could not write the fence record; the next fencing read tries again."""


class LedgerEvent(enum.Enum):
    """What the bookie does to a ledger's records."""

    JOURNAL_KEY = "journal_key"
    """The master-key record goes into the journal ahead of an entry or an explicit LAC."""
    FENCE = "fence"
    """A fence record (with the key record first, if still pending) goes into the journal."""
    FENCE_SYNCED = "fence_synced"
    """The journal synced the fence record."""
    FENCE_WRITE_FAILED = "fence_write_failed"
    """The journal failed before the fence record was durable."""


_S = LedgerState
_E = LedgerEvent

TRANSITIONS: Final[Mapping[LedgerState, Mapping[LedgerEvent, LedgerState]]] = MappingProxyType(
    {
        state: MappingProxyType(row)
        for state, row in {
            _S.KEY_PENDING: {_E.JOURNAL_KEY: _S.OPEN, _E.FENCE: _S.FENCING},
            _S.OPEN: {_E.FENCE: _S.FENCING},
            _S.FENCED_STORED_KEY_PENDING: {
                _E.JOURNAL_KEY: _S.FENCED_STORED,
                _E.FENCE: _S.FENCING,
            },
            _S.FENCED_STORED: {_E.FENCE: _S.FENCING},
            _S.FENCING: {_E.FENCE_SYNCED: _S.FENCED, _E.FENCE_WRITE_FAILED: _S.FENCE_FAILED},
            _S.FENCED: {},
            _S.FENCE_FAILED: {_E.FENCE: _S.FENCING},
        }.items()
    }
)
"""The legal transitions, the only place they are written down: state → event → next state.

Anything missing is a bug in the caller: journaling the key twice, a second fence record
while one is in flight (concurrent fencing reads share it), or fencing again once durable.
Read-only all the way down, so that :func:`check_table` holds for good once it passed."""

INITIAL_STATES: Final = frozenset({_S.KEY_PENDING, _S.FENCED_STORED_KEY_PENDING})
"""A ledger's state when the process first meets it: from storage's fence bit."""

FENCED_STATES: Final = frozenset(set(LedgerState) - {_S.KEY_PENDING, _S.OPEN})
"""Normal adds are refused (EFENCED); recovery adds still go through."""

KEY_JOURNALED_STATES: Final = frozenset(
    set(LedgerState) - {_S.KEY_PENDING, _S.FENCED_STORED_KEY_PENDING}
)


class IllegalTransitionError(RuntimeError):
    """An event the table does not allow in the current state."""

    def __init__(self, ledger_id: int | None, state: LedgerState, event: LedgerEvent) -> None:
        self.ledger_id = ledger_id
        self.state = state
        self.event = event
        legal = ", ".join(e.name for e in TRANSITIONS[state]) or "nothing"
        who = "ledger" if ledger_id is None else f"ledger {ledger_id}"
        super().__init__(f"{who}: {event.name} is illegal in {state.name} (legal: {legal})")


class LedgerStateMachine:
    """One ledger's :class:`LedgerState`, moved only through :data:`TRANSITIONS`.

    :attr:`fenced` and :attr:`key_journaled` are kept as plain attributes (the add path reads
    them on every entry); :meth:`_check` holds them to the state.
    """

    __slots__ = ("fenced", "key_journaled", "ledger_id", "state")

    def __init__(self, *, fenced: bool, ledger_id: int | None = None) -> None:
        self.ledger_id = ledger_id
        self.state = _S.FENCED_STORED_KEY_PENDING if fenced else _S.KEY_PENDING
        self.fenced = fenced
        self.key_journaled = False

    @property
    def fence_durable(self) -> bool:
        """A fencing read has nothing to wait for."""
        return self.state is _S.FENCED

    @property
    def fence_in_flight(self) -> bool:
        """A fence record is on its way: another fencing read shares it."""
        return self.state is _S.FENCING

    def can(self, event: LedgerEvent) -> bool:
        return event in TRANSITIONS[self.state]

    def process(self, event: LedgerEvent) -> LedgerState:
        """Apply ``event``; raises :class:`IllegalTransitionError` (state unchanged) if the
        table has no such move."""
        try:
            new = TRANSITIONS[self.state][event]
        except KeyError:
            raise IllegalTransitionError(self.ledger_id, self.state, event) from None
        self.state = new
        self.fenced = new in FENCED_STATES
        self.key_journaled = new in KEY_JOURNALED_STATES
        return new

    def _check(self) -> None:
        """Assert every invariant; O(number of states), for tests."""
        assert isinstance(self.state, LedgerState), self.state
        assert self.fenced == (self.state in FENCED_STATES), (self.state, self.fenced)
        assert self.key_journaled == (self.state in KEY_JOURNALED_STATES), (
            self.state,
            self.key_journaled,
        )
        _table_checked()

    def __repr__(self) -> str:
        return f"LedgerStateMachine(ledger_id={self.ledger_id}, state={self.state.name})"


@functools.cache
def _table_checked() -> bool:
    """:func:`check_table`, once per process: the table is a constant (read-only proxies),
    and every ledger's :meth:`LedgerStateMachine._check` ran it again (the simulator checks
    every bookie's handles after every step: 3% of a fault campaign's time). A failure is
    not cached, so a broken table fails every check."""
    check_table()
    return True


def check_table() -> None:
    """The table's own invariants: every state has a row, fencing is irreversible, a fence
    record always leaves the key journaled, and every state is reachable from an initial
    one."""
    assert set(TRANSITIONS) == set(LedgerState)
    for state, row in TRANSITIONS.items():
        for event, new in row.items():
            assert isinstance(event, LedgerEvent)
            assert isinstance(new, LedgerState)
            assert state not in FENCED_STATES or new in FENCED_STATES, (state, event, new)
            assert state not in KEY_JOURNALED_STATES or new in KEY_JOURNALED_STATES
            if event is _E.FENCE:
                assert new is _S.FENCING
                assert new in KEY_JOURNALED_STATES
    seen = set(INITIAL_STATES)
    todo = list(INITIAL_STATES)
    while todo:
        for new in TRANSITIONS[todo.pop()].values():
            if new not in seen:
                seen.add(new)
                todo.append(new)
    assert seen == set(LedgerState), set(LedgerState) - seen
