"""Small helpers shared by the client tests: self-describing payloads and direct reads from
one bookie (to check where replicas are, bypassing the client's replica choice)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from bookiesim.client import BookieUnavailableError, BookKeeper
from bookiesim.client.distribution import RoundRobinDistribution
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.v3 import read_request

if TYPE_CHECKING:
    from collections.abc import Callable

    from bookiesim.metadata.ledgers import LedgerMetadata


def payload(ledger_id: int, entry_id: int, size: int = 16) -> bytes:
    """A payload that names its ledger and entry (invariants S4: self-describing)."""
    head = f"L{ledger_id}E{entry_id}:".encode()
    return head + b"." * max(0, size - len(head))


async def read_direct(bk: BookKeeper, bookie: str, ledger_id: int, entry_id: int) -> pb.Response:
    """A plain read of one entry from one bookie."""
    return await bk.pool.call(bookie, read_request(ledger_id, entry_id))


async def holders(
    bk: BookKeeper, ledger_id: int, metadata: LedgerMetadata, entry_id: int
) -> list[str]:
    """The bookies of ``entry_id``'s write set (per ``metadata``) that return it."""
    dist = RoundRobinDistribution(
        metadata.ensemble_size, metadata.write_quorum_size, metadata.ack_quorum_size
    )
    ensemble = metadata.ensemble_at(entry_id)
    out = []
    for position in dist.write_set(entry_id):
        try:
            response = await read_direct(bk, ensemble[position], ledger_id, entry_id)
        except BookieUnavailableError:
            continue
        if response.status == pb.EOK:
            out.append(ensemble[position])
    return out


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll ``predicate`` (state that callbacks change, with no event to wait on); fails
    after ten seconds."""
    with trio.fail_after(10):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.002)
