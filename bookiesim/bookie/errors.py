"""Errors raised by bookie operations, each carrying the v3 status code it is answered with.

Request handlers catch :class:`BookieError` and answer ``error.status``; anything else that
escapes an operation is a bug and is answered EBADREQ (as upstream's default branch), logged.
"""

from __future__ import annotations

from bookiesim.proto import BookkeeperProtocol_pb2 as pb


class BookieError(Exception):
    status: pb.StatusCode.ValueType = pb.EBADREQ


class NoLedgerError(BookieError):
    status = pb.ENOLEDGER

    def __init__(self, ledger_id: int) -> None:
        super().__init__(f"ledger {ledger_id} is not on this bookie")
        self.ledger_id = ledger_id


class NoEntryError(BookieError):
    status = pb.ENOENTRY

    def __init__(self, ledger_id: int, entry_id: int) -> None:
        super().__init__(f"entry {entry_id} of ledger {ledger_id} is not on this bookie")


class UnauthorizedError(BookieError):
    status = pb.EUA


class FencedError(BookieError):
    status = pb.EFENCED

    def __init__(self, ledger_id: int) -> None:
        super().__init__(f"ledger {ledger_id} is fenced")


class BadRequestError(BookieError):
    status = pb.EBADREQ


class BookieIOError(BookieError):
    status = pb.EIO


class ReadOnlyError(BookieError):
    status = pb.EREADONLY


class StorageFailedError(OSError):
    """An fsync of entry logs or index files failed: this storage takes no more adds and
    completes no more checkpoints until the process restarts (see the module docstring)."""
