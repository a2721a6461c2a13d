"""Ledger metadata as upstream's shell prints it, and which bookies hold a ledger's entries.

Pure functions (no I/O), for ``listledgers -m``, ``listledgers -bookieid`` and
``ledgermetadata``.

Upstream prints a ledger's metadata as one line, ``LedgerMetadata{formatVersion=3,
ensembleSize=3, writeQuorumSize=2, ackQuorumSize=2, state=CLOSED, length=1024,
lastEntryId=9, digestType=CRC32C, password=base64:, ensembles={0=[b1, b2, b3]},
customMetadata={k=base64:dg==}}``: length and lastEntryId only when CLOSED, the digest type
and password only when the metadata holds a password (the password in base64, as upstream's
shell shows it), custom values in base64. Upstream's digest names differ from the
protobuf's in one place: HMAC is ``MAC``. The custom metadata's order is upstream's hash
map's; ours is sorted by key.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from bookiesim.metadata.ledgers import DigestType, LedgerState

if TYPE_CHECKING:
    from bookiesim.metadata.ledgers import LedgerMetadata

__all__ = ["METADATA_FORMAT_VERSION", "metadata_line", "stores_entries"]

METADATA_FORMAT_VERSION = 3
"""The stored form bookiesim writes and reads (upstream's current one)."""

_DIGEST_NAMES = {DigestType.HMAC: "MAC"}


def _b64(data: bytes) -> str:
    return "base64:" + base64.b64encode(data).decode("ascii")


def metadata_line(metadata: LedgerMetadata, *, with_password: bool = True) -> str:
    fields = [
        f"formatVersion={METADATA_FORMAT_VERSION}",
        f"ensembleSize={metadata.ensemble_size}",
        f"writeQuorumSize={metadata.write_quorum_size}",
        f"ackQuorumSize={metadata.ack_quorum_size}",
        f"state={metadata.state.name}",
    ]
    if metadata.state is LedgerState.CLOSED:
        fields += [f"length={metadata.length}", f"lastEntryId={metadata.last_entry_id}"]
    # bookiesim always stores a password field (empty by default), as upstream's client does.
    digest = _DIGEST_NAMES.get(metadata.digest_type, metadata.digest_type.name)
    fields.append(f"digestType={digest}")
    fields.append(f"password={_b64(metadata.password) if with_password else 'OMITTED'}")
    ensembles = ", ".join(
        f"{first}=[{', '.join(bookies)}]" for first, bookies in sorted(metadata.ensembles.items())
    )
    fields.append(f"ensembles={{{ensembles}}}")
    custom = ", ".join(
        f"{key}={_b64(value)}" for key, value in sorted(metadata.custom_metadata.items())
    )
    fields.append(f"customMetadata={{{custom}}}")
    return "LedgerMetadata{" + ", ".join(fields) + "}"


def stores_entries(metadata: LedgerMetadata, bookie_id: str) -> bool:
    """Whether the metadata places any entry on ``bookie_id``, as upstream's
    ``areEntriesOfLedgerStoredInTheBookie`` decides: a segment of the bookie's holds one of
    its entries in the round-robin write sets; an open ledger's last segment counts whole
    (its end is not known yet), a closed ledger's empty last segment not at all."""
    segments = sorted(metadata.ensembles.items())
    size, write_quorum = metadata.ensemble_size, metadata.write_quorum_size
    closed = metadata.state is LedgerState.CLOSED
    for index, (first, bookies) in enumerate(segments):
        if bookie_id not in bookies:
            continue
        last_segment = index == len(segments) - 1
        if last_segment and closed and metadata.last_entry_id < first:
            continue
        if (last_segment and not closed) or size == write_quorum:
            return True
        last = metadata.last_entry_id if last_segment else segments[index + 1][0] - 1
        position = list(bookies).index(bookie_id)
        for entry_id in range(first, min(first + size, last + 1)):
            if (position - entry_id) % size < write_quorum:
                return True
    return False
