"""The requests a replication sends to single bookies: read one entry from the first good
replica, write it to the new bookie, ask a bookie whether it has an entry, and BP-32's
WriteClose with reason ``replication``.

Why a module of its own: the client's reader (:mod:`bookiesim.client.read_handle`) tries an
entry's whole write set in the metadata's order, lost bookie included; a replication knows
which replica is gone and which one it is replacing, so it names the sources itself. And it
forwards the body it read **as stored** — header, the writer's piggybacked LAC, digest and
payload — once its digest checks, so the new replica is byte for byte the other replicas'
copy (upstream's replicator re-packages the payload with its own reader's LAC instead; the
payload, length and digest type are the same either way).

Each function goes through the client's connection pool (one pipelined connection per
bookie) and raises the client's errors.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bookiesim.client.digest import DigestMismatchError
from bookiesim.client.errors import (
    BKError,
    BookieRequestError,
    BookieUnavailableError,
    NoSuchEntryError,
)
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.v3 import add_request, from_message, read_request

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from bookiesim.client.bookie_pool import BookiePool
    from bookiesim.client.digest import DigestManager

__all__ = ["has_entries", "read_first_good", "write_close_for_replication", "write_entry"]

log = logging.getLogger(__name__)

MISSING = (pb.ENOENTRY, pb.ENOLEDGER)
"""The answers that say a bookie does not have an entry."""


async def read_first_good(
    pool: BookiePool,
    digest: DigestManager,
    entry_id: int,
    sources: Sequence[str],
) -> tuple[bytes, int]:
    """The entry's stored body from the first of ``sources`` whose copy's digest checks, and
    its payload length. Raises :class:`NoSuchEntryError` when every source answered that it
    has none, else :class:`BookieUnavailableError` naming each source's failure."""
    ledger_id = digest.ledger_id
    errors: list[BKError] = []
    for bookie in sources:
        try:
            response = await pool.call(
                bookie, read_request(ledger_id, entry_id, high_priority=True)
            )
        except BookieUnavailableError as exc:
            errors.append(exc)
            continue
        read = response.readResponse
        if response.status == pb.EOK and read.HasField("body"):
            try:
                verified = digest.verify(read.body, expected_entry_id=entry_id)
            except DigestMismatchError as exc:
                log.warning("%s (from bookie %s); trying the next replica", exc, bookie)
                errors.append(exc)
                continue
            return read.body, len(verified.payload)
        status = response.status if response.status != pb.EOK else pb.ENOENTRY
        errors.append(
            BookieRequestError(
                status, ledger_id=ledger_id, entry_id=entry_id, bookie=bookie, operation="read"
            )
        )
    detail = "; ".join(str(e) for e in errors) or "no surviving replica"
    if errors and all(isinstance(e, BookieRequestError) and e.status in MISSING for e in errors):
        raise NoSuchEntryError(
            f"no surviving replica has it: {detail}", ledger_id=ledger_id, entry_id=entry_id
        )
    raise BookieUnavailableError(
        f"no surviving replica returned it: {detail}", ledger_id=ledger_id, entry_id=entry_id
    )


async def write_entry(
    pool: BookiePool,
    bookie: str,
    digest: DigestManager,
    entry_id: int,
    body: bytes,
    *,
    recovery: bool = True,
) -> None:
    """Add ``body`` to ``bookie`` — a RECOVERY_ADD (high priority; a bookie that has the
    ledger fenced still takes it) unless ``recovery`` is False. Raises on anything but EOK."""
    request = add_request(digest.ledger_id, entry_id, digest.master_key, body, recovery=recovery)
    response = await pool.call(bookie, request)
    if response.status != pb.EOK:
        raise BookieRequestError(
            response.status,
            ledger_id=digest.ledger_id,
            entry_id=entry_id,
            bookie=bookie,
            operation="recovery add" if recovery else "add",
        )


async def has_entries(
    pool: BookiePool, bookie: str, ledger_id: int, entries: Iterable[int]
) -> bool:
    """False if ``bookie`` answers that it lacks one of ``entries``. Any other failure proves
    nothing and counts as having them (the caller must not replace a bookie it cannot
    judge)."""
    for entry_id in entries:
        try:
            response = await pool.call(bookie, read_request(ledger_id, entry_id))
        except BKError:
            return True
        if response.status in MISSING:
            return False
    return True


async def write_close_for_replication(
    pool: BookiePool, bookie: str, ledger_id: int, master_key: bytes
) -> str:
    """WriteClose (reason replication) to ``bookie``: ``ok`` or ``failed`` (the metric's
    outcomes; whether to send at all is the caller's to decide)."""
    request = from_message(
        pb.Request(
            writeCloseRequest=pb.WriteCloseRequest(
                ledgerId=ledger_id, masterKey=master_key, reason=pb.WriteCloseRequest.REPLICATION
            )
        )
    )
    try:
        response = await pool.call(bookie, request)
    except BKError as exc:
        log.info("WriteClose of ledger %d to %s after replication: %s", ledger_id, bookie, exc)
        return "failed"
    if response.status != pb.EOK:
        name = pb.StatusCode.Name(response.status)
        log.info("WriteClose of ledger %d to %s after replication: %s", ledger_id, bookie, name)
        return "failed"
    return "ok"
