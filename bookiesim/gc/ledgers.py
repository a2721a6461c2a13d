"""Which local ledgers were deleted: upstream's ``ScanAndCompareGarbageCollector``.

The order matters. The bookie's own ledgers are listed *first*, the metadata store's
*second*: a client creates a ledger's metadata before it writes to any bookie, so a ledger
present locally when the first list was taken either had metadata then, or was deleted since
— and the second listing, taken later, can only show it missing because it was deleted. The
other order would delete a ledger created between the two listings.

With ``verifyMetadataOnGC`` each candidate's metadata is read once more before it goes, so
that a listing that missed a ledger (a store that lists inconsistently) cannot delete it.
Errors talking to the store end the comparison for this pass; nothing is deleted on doubt.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bookiesim.metadata.errors import MetadataError, NoSuchLedgerError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from bookiesim.gc.interfaces import LedgerSource

__all__ = ["deleted_ledgers", "find_deleted_ledgers"]

log = logging.getLogger(__name__)


def deleted_ledgers(local: Iterable[int], in_metadata: Iterable[int]) -> list[int]:
    """Local ledgers the metadata store no longer has, sorted."""
    known = set(in_metadata)
    return sorted(ledger_id for ledger_id in set(local) if ledger_id not in known)


async def find_deleted_ledgers(
    local: Iterable[int], source: LedgerSource, *, verify: bool = False
) -> list[int]:
    """``local`` (listed before this call) minus the store's ledgers; [] if the store fails."""
    snapshot = list(local)
    if not snapshot:
        return []
    try:
        candidates = deleted_ledgers(snapshot, await source.list_ledgers())
    except MetadataError as exc:
        log.warning("gc: cannot list ledgers in the metadata store, none deleted: %s", exc)
        return []
    if not verify:
        return candidates
    confirmed = []
    for ledger_id in candidates:
        try:
            await source.read(ledger_id)
        except NoSuchLedgerError:
            confirmed.append(ledger_id)
        except MetadataError as exc:
            log.warning("gc: cannot verify ledger %d, kept: %s", ledger_id, exc)
        else:
            log.info("gc: ledger %d is in the metadata store after all, kept", ledger_id)
    return confirmed
