"""The life cycle of a writing ledger handle: one state enum and one table of transitions.

Sans-IO (as h11 writes its connection states): :mod:`.ledger_handle` calls
:func:`next_state` at each event and asks the predicates below instead of testing flags, so
every combination the handle can be in is named here, and nowhere else.

Why the states are products: an ensemble change runs in the background, and the handle may
be closed, or fail, while it does; adds made meanwhile wait for it, and ``close`` waits for
it to end. A failure absorbs closing: a failed handle raises its error on every add, closed
or not, and ``close`` on it still writes the ledger's end (as before).

::

    OPEN ──bookie_failed──▶ CHANGING ──change_done──▶ OPEN
      │close                  │close
      ▼                       ▼
    CLOSING ◀──change_done── CLOSING_CHANGING
      │closed
      ▼
    CLOSED        fail: OPEN, CLOSING → FAILED; CHANGING, CLOSING_CHANGING → FAILED_CHANGING
                  FAILED_CHANGING ──change_done──▶ FAILED ──closed──▶ CLOSED
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = [
    "ACCEPTS_ADDS",
    "CHANGING",
    "FAILED",
    "RUNNING",
    "TRANSITIONS",
    "HandleEvent",
    "HandleState",
    "IllegalTransition",
    "next_state",
]


class HandleState(enum.Enum):
    OPEN = "open"
    """Taking adds, sending each at once."""
    CHANGING = "changing"
    """Taking adds; an ensemble change is under way, so they wait and none completes."""
    CLOSING = "closing"
    """``close`` waits for the pending adds; no new add is taken."""
    CLOSING_CHANGING = "closing, changing"
    """``close`` waits for the pending adds and for the ensemble change under way."""
    FAILED = "failed"
    """Stopped for good (fenced, closed by another client, no bookies): adds raise the error."""
    FAILED_CHANGING = "failed, changing"
    """Failed while an ensemble change was under way; the change has yet to notice."""
    CLOSED = "closed"
    """The ledger's end is in the metadata."""


class HandleEvent(enum.Enum):
    BOOKIE_FAILED = "bookie_failed"
    """A bookie of the ensemble failed an add: an ensemble change starts."""
    CHANGE_DONE = "change_done"
    """The ensemble change ended (done, failed or cancelled)."""
    FAIL = "fail"
    """An error every pending and future add gets."""
    CLOSE = "close"
    """``close`` was called."""
    CLOSED = "closed"
    """``close`` wrote (or found) the ledger's end in the metadata."""


class IllegalTransition(RuntimeError):
    """An event the handle's state has no transition for: a bug in the handle."""


_S = HandleState
_E = HandleEvent

TRANSITIONS: Final[dict[tuple[HandleState, HandleEvent], HandleState]] = {
    (_S.OPEN, _E.BOOKIE_FAILED): _S.CHANGING,
    (_S.CLOSING, _E.BOOKIE_FAILED): _S.CLOSING_CHANGING,
    (_S.CHANGING, _E.CHANGE_DONE): _S.OPEN,
    (_S.CLOSING_CHANGING, _E.CHANGE_DONE): _S.CLOSING,
    (_S.FAILED_CHANGING, _E.CHANGE_DONE): _S.FAILED,
    (_S.OPEN, _E.FAIL): _S.FAILED,
    (_S.CLOSING, _E.FAIL): _S.FAILED,
    (_S.FAILED, _E.FAIL): _S.FAILED,
    (_S.CHANGING, _E.FAIL): _S.FAILED_CHANGING,
    (_S.CLOSING_CHANGING, _E.FAIL): _S.FAILED_CHANGING,
    (_S.FAILED_CHANGING, _E.FAIL): _S.FAILED_CHANGING,
    (_S.CLOSED, _E.FAIL): _S.CLOSED,
    (_S.OPEN, _E.CLOSE): _S.CLOSING,
    (_S.CHANGING, _E.CLOSE): _S.CLOSING_CHANGING,
    (_S.CLOSING, _E.CLOSE): _S.CLOSING,
    (_S.CLOSING_CHANGING, _E.CLOSE): _S.CLOSING_CHANGING,
    (_S.FAILED, _E.CLOSE): _S.FAILED,
    (_S.FAILED_CHANGING, _E.CLOSE): _S.FAILED_CHANGING,
    (_S.CLOSING, _E.CLOSED): _S.CLOSED,
    (_S.FAILED, _E.CLOSED): _S.CLOSED,
    (_S.CLOSED, _E.CLOSED): _S.CLOSED,
}
"""Every legal (state, event) → state. A pair not here is a bug (:class:`IllegalTransition`)."""

CHANGING: Final = frozenset({_S.CHANGING, _S.CLOSING_CHANGING, _S.FAILED_CHANGING})
"""States in which an ensemble change is under way."""

ACCEPTS_ADDS: Final = frozenset({_S.OPEN, _S.CHANGING})
"""States in which ``append_async`` takes a new add."""

RUNNING: Final = frozenset({_S.OPEN, _S.CHANGING, _S.CLOSING, _S.CLOSING_CHANGING})
"""Neither failed nor closed: a bookie's failure starts (or joins) an ensemble change, and
the explicit-LAC timer keeps running."""

FAILED: Final = frozenset({_S.FAILED, _S.FAILED_CHANGING})


def next_state(state: HandleState, event: HandleEvent) -> HandleState:
    """The state after ``event``; raises :class:`IllegalTransition` if it has none."""
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise IllegalTransition(f"{event.value} in state {state.value}") from None
