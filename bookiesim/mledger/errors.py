"""Errors of the managed ledger, named after upstream's ``ManagedLedgerException`` family.

Every message names the managed ledger (and the ledger, cursor or metadata node concerned),
so one log line is enough to find the problem.
"""

from __future__ import annotations

from bookiesim.mledger.compression import CorruptManagedInfoError

__all__ = [
    "CorruptManagedInfoError",
    "CursorNotFoundError",
    "LedgerNotFoundError",
    "ManagedLedgerClosedError",
    "ManagedLedgerError",
    "ManagedLedgerFencedError",
]


class ManagedLedgerError(Exception):
    """Root of the errors the managed ledger raises on purpose."""


class ManagedLedgerFencedError(ManagedLedgerError):
    """Another owner changed the managed ledger's metadata under us (a lost compare-and-set),
    so this instance stops writing: upstream's ``ManagedLedgerFencedException``."""


class ManagedLedgerClosedError(ManagedLedgerError):
    """The managed ledger (or cursor) was closed."""


class LedgerNotFoundError(ManagedLedgerError):
    """A ledger id that is not (or no longer) one of the managed ledger's ledgers. Upstream
    raises ``ManagedLedgerNotFoundException("Ledger not found")`` for it; the name here says
    what is missing."""


class CursorNotFoundError(ManagedLedgerError):
    """No cursor of that name."""
