"""The client's exceptions: one small hierarchy under :class:`BKError`.

Why our own classes rather than the bookie's status codes or the metadata store's errors:
callers react to *what happened to their ledger* — it was fenced by a recoverer, it is closed,
there are not enough bookies, an entry does not exist — not to which layer noticed. Each
class carries the ledger id and, where it applies, the entry id and the bookie, and says them
in its message, so one log line is enough to find the ledger and the bookie concerned.

:class:`~bookiesim.client.digest.DigestMismatchError` is the digest module's class (a
``ValueError`` that tools and the pipeline already catch); it also derives from
:class:`BKError`, so ``except BKError`` catches every error the client raises on purpose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bookiesim.proto import BookkeeperProtocol_pb2 as pb

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = [
    "BKError",
    "BookieRequestError",
    "BookieUnavailableError",
    "LedgerClosedError",
    "LedgerFencedError",
    "LedgerRecoveryError",
    "MetadataConflictError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NotEnoughBookiesError",
    "UnauthorizedError",
    "read_only_note",
    "status_name",
]


def status_name(status: int) -> str:
    """``EFENCED`` for 504, or the number if the code is unknown."""
    try:
        return pb.StatusCode.Name(status)  # type: ignore[arg-type]
    except ValueError:
        return str(status)


def _where(ledger_id: int | None, entry_id: int | None, bookie: str | None) -> str:
    parts = []
    if ledger_id is not None:
        parts.append(f"ledger {ledger_id}")
    if entry_id is not None:
        parts.append(f"entry {entry_id}")
    if bookie is not None:
        parts.append(f"bookie {bookie}")
    return " ".join(parts)


class BKError(Exception):
    """Root of every error the client raises on purpose.

    ``ledger_id``, ``entry_id`` and ``bookie`` are set when known; the message names them.
    """

    def __init__(
        self,
        message: str,
        *,
        ledger_id: int | None = None,
        entry_id: int | None = None,
        bookie: str | None = None,
    ) -> None:
        where = _where(ledger_id, entry_id, bookie)
        super().__init__(f"{where}: {message}" if where else message)
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.bookie = bookie


class BookieUnavailableError(BKError):
    """A bookie could not be reached, broke the connection, or did not answer in time."""


class BookieRequestError(BKError):
    """A bookie answered with a status other than EOK; ``status`` is the v3 code."""

    def __init__(
        self,
        status: int,
        *,
        ledger_id: int | None = None,
        entry_id: int | None = None,
        bookie: str | None = None,
        operation: str = "request",
    ) -> None:
        super().__init__(
            f"{operation} failed with {status_name(status)}",
            ledger_id=ledger_id,
            entry_id=entry_id,
            bookie=bookie,
        )
        self.status = status


class UnauthorizedError(BKError):
    """Wrong password: the master key did not match (EUA), or ``open_ledger`` was given a
    password other than the ledger's."""


class LedgerFencedError(BKError):
    """The ledger was fenced (a recoverer took over): this writer can add nothing more."""


class LedgerClosedError(BKError):
    """The ledger is closed (by this handle or by someone else); it takes no more adds."""


class NotEnoughBookiesError(BKError):
    """Fewer live bookies than an ensemble (or a replacement) needs."""


def read_only_note(read_only: Collection[str]) -> str:
    """What a NotEnoughBookiesError adds about bookies that are there but read-only: a user
    whose disks filled up sees why none of the running bookies counts."""
    if not read_only:
        return ""
    return (
        f"; {len(read_only)} more registered read-only ({sorted(read_only)}): full disks, "
        "or made read-only by an operator"
    )


class NoSuchLedgerError(BKError):
    """The ledger has no metadata: never created, or deleted."""


class NoSuchEntryError(BKError):
    """The entry is not in the ledger (past its end), or no replica holds it."""


class LedgerRecoveryError(BKError):
    """Recovery could not decide where the ledger ends (not enough bookies answered, or an
    entry's fate is unknown); the ledger stays IN_RECOVERY and recovery can be retried."""


class MetadataConflictError(BKError):
    """The ledger's metadata changed under this handle in a way it cannot reconcile."""
