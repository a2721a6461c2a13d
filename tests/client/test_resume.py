"""Resuming an OPEN ledger whose writer went away (``bookiesim ledger write`` in a new process).

Why these tests: the command-line tool writes to one ledger from several processes one after
the other; each must continue exactly after what the previous one left on the bookies,
keep the entries past the LAC a vanished writer had sent, and refuse ledgers that are
closed, being recovered, or whose password is wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from bookiesim.client import (
    BookKeeper,
    LedgerClosedError,
    LedgerFencedError,
    UnauthorizedError,
)
from bookiesim.metadata.ledgers import LedgerMetadata, LedgerState
from tests.client.conftest import TEST_CONFIG
from tests.client.helpers import holders, payload

if TYPE_CHECKING:
    from bookiesim.cluster.in_process import LocalCluster


async def _write_and_vanish(cluster: LocalCluster, count: int, password: bytes = b"") -> int:
    """A writer in its own client adds ``count`` entries and leaves without closing."""
    async with BookKeeper(cluster.store, config=TEST_CONFIG) as first:
        lh = await first.create_ledger(3, 2, 2, password=password)
        for i in range(count):
            await lh.add_entry(payload(lh.ledger_id, i))
        return lh.ledger_id


async def test_resume_continues_after_the_entries_the_bookies_hold(
    cluster: LocalCluster, bk: BookKeeper
) -> None:
    lid = await _write_and_vanish(cluster, 10)
    writer = await bk.resume_ledger(lid)
    # The bookies' LAC was 8 (entry 9 carried it); entry 9 was found past it and kept.
    assert writer.last_add_confirmed == 9
    assert [await writer.add_entry(payload(lid, i)) for i in range(10, 15)] == list(range(10, 15))
    await writer.close()
    reader = await bk.open_ledger(lid)
    assert reader.metadata.state is LedgerState.CLOSED
    assert reader.metadata.last_entry_id == 14
    entries = await reader.read_entries(0, 14)
    assert [e.payload for e in entries] == [payload(lid, i) for i in range(15)]
    assert reader.metadata.length == sum(len(payload(lid, i)) for i in range(15))
    # The re-added tail entry is on its whole write set.
    assert len(await holders(bk, lid, reader.metadata, 9)) == 2


async def test_resume_twice_in_a_row_keeps_one_sequence(
    cluster: LocalCluster, bk: BookKeeper
) -> None:
    lid = await _write_and_vanish(cluster, 3)
    for start in (3, 6):
        async with BookKeeper(cluster.store, config=TEST_CONFIG) as other:
            writer = await other.resume_ledger(lid)
            for i in range(start, start + 3):
                assert await writer.add_entry(payload(lid, i)) == i
            await writer.write_lac()
    reader = await bk.open_ledger(lid)
    assert reader.last_add_confirmed == 8
    assert [e.payload for e in await reader.read_entries(0, 8)] == [
        payload(lid, i) for i in range(9)
    ]


async def test_resume_of_an_empty_ledger_starts_at_entry_zero(
    cluster: LocalCluster, bk: BookKeeper
) -> None:
    lid = await _write_and_vanish(cluster, 0)
    writer = await bk.resume_ledger(lid)
    assert await writer.add_entry(b"first") == 0


async def test_resume_refuses_closed_recovering_and_wrong_password(
    cluster: LocalCluster, bk: BookKeeper
) -> None:
    closed = await bk.create_ledger(3, 2, 2)
    await closed.add_entry(b"x")
    await closed.close()
    with pytest.raises(LedgerClosedError, match="closed at entry 0"):
        await bk.resume_ledger(closed.ledger_id)

    lid = await _write_and_vanish(cluster, 2, password=b"secret")
    with pytest.raises(UnauthorizedError):
        await bk.resume_ledger(lid, password=b"wrong")

    def mark(current: LedgerMetadata) -> LedgerMetadata:
        return current.in_recovery()

    await bk.ledger_manager.update_with_retry(lid, mark)
    with pytest.raises(LedgerFencedError, match="recovery"):
        await bk.resume_ledger(lid, password=b"secret")
