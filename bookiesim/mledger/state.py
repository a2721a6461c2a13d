"""The managed ledger's life cycle: its states and the ONE table of legal transitions.

Sans-IO, as h11's ``_state.py``: :class:`ManagedLedgerLifecycle` holds the state and moves
it on two events, and nothing else may change it. Theory of operation:

* A managed ledger is **OPEN** from :meth:`ManagedLedger.open` on.
* **FENCE** — another owner took over (a lost compare-and-set on the record, or our ledger
  fenced by a recovery): no more writes, the rollover timer stops. Learning it again changes
  nothing (two in-flight operations may both find out).
* **CLOSE** — the owner closed it (:meth:`ManagedLedger.close`), which happens at most once.

The two are independent facts, so both orders end in **CLOSED_FENCED**: a fenced ledger is
still closed by its owner (to stop the timer), and a close's final record write can lose its
compare-and-set (or a property write after the close can), which fences a closed ledger::

    OPEN ──FENCE──► FENCED ──CLOSE──► CLOSED_FENCED
      └───CLOSE──► CLOSED ──FENCE───────▲
"""

from __future__ import annotations

import enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["TRANSITIONS", "IllegalTransitionError", "MLEvent", "MLState", "ManagedLedgerLifecycle"]


class MLState(enum.Enum):
    OPEN = "open"
    FENCED = "fenced"
    CLOSED = "closed"
    CLOSED_FENCED = "closed+fenced"


class MLEvent(enum.Enum):
    FENCE = "fence"
    CLOSE = "close"


TRANSITIONS: Final[Mapping[tuple[MLState, MLEvent], MLState]] = MappingProxyType(
    {
        (MLState.OPEN, MLEvent.FENCE): MLState.FENCED,
        (MLState.OPEN, MLEvent.CLOSE): MLState.CLOSED,
        (MLState.FENCED, MLEvent.FENCE): MLState.FENCED,
        (MLState.FENCED, MLEvent.CLOSE): MLState.CLOSED_FENCED,
        (MLState.CLOSED, MLEvent.FENCE): MLState.CLOSED_FENCED,
        (MLState.CLOSED_FENCED, MLEvent.FENCE): MLState.CLOSED_FENCED,
    }
)
"""Every legal ``(state, event) → state``; an event missing here is a bug in the caller."""

_FENCED: Final = frozenset({MLState.FENCED, MLState.CLOSED_FENCED})
_CLOSED: Final = frozenset({MLState.CLOSED, MLState.CLOSED_FENCED})


class IllegalTransitionError(AssertionError):
    """An event the table does not allow in the current state (a programming error)."""


class ManagedLedgerLifecycle:
    """The current state; changed only by :meth:`fire`, along :data:`TRANSITIONS`."""

    def __init__(self) -> None:
        self.state = MLState.OPEN

    def __repr__(self) -> str:
        return f"ManagedLedgerLifecycle({self.state.name})"

    def fire(self, event: MLEvent) -> MLState:
        """Move along the table; raises :class:`IllegalTransitionError` off it."""
        try:
            self.state = TRANSITIONS[self.state, event]
        except KeyError:
            raise IllegalTransitionError(f"{event.name} is illegal in {self.state.name}") from None
        return self.state

    @property
    def fenced(self) -> bool:
        return self.state in _FENCED

    @property
    def closed(self) -> bool:
        return self.state in _CLOSED

    def _check(self) -> None:
        """Assert the invariants (O(1)): the state is one the table reaches from OPEN."""
        assert isinstance(self.state, MLState), self.state
        reachable = {MLState.OPEN} | set(TRANSITIONS.values())
        assert self.state in reachable, self.state
