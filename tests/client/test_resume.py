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
    BookieUnavailableError,
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


async def _write_and_vanish(
    cluster: LocalCluster,
    count: int,
    password: bytes = b"",
    shape: tuple[int, int, int] = (3, 2, 2),
) -> int:
    """A writer in its own client adds ``count`` entries and leaves without closing."""
    async with BookKeeper(cluster.store, config=TEST_CONFIG) as first:
        lh = await first.create_ledger(*shape, password=password)
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


@pytest.mark.parametrize("shape", [(2, 2, 2), (3, 2, 2), (3, 3, 2)])
async def test_resume_with_a_dead_bookie_finds_the_end_and_replaces_it(
    cluster: LocalCluster, bk: BookKeeper, shape: tuple[int, int, int]
) -> None:
    """Issue 32: a bookie of the ensemble dies (still registered, as after kill -9). Its
    silence must not block finding the end: the others' "no such entry" answers rule out
    an ack quorum past it (upstream's coverage), and the first add replaces the dead
    bookie by an ensemble change."""
    lid = await _write_and_vanish(cluster, 10, shape=shape)
    metadata, _ = await bk.read_metadata(lid)
    victim = metadata.last_ensemble[1][0]
    await cluster.stop_bookie(victim, unregister=False)
    writer = await bk.resume_ledger(lid)
    assert writer.last_add_confirmed == 9
    assert [await writer.add_entry(payload(lid, i)) for i in range(10, 15)] == list(range(10, 15))
    assert victim not in writer.ensemble
    await writer.close()
    metadata, _ = await bk.read_metadata(lid)
    assert metadata.last_entry_id == 14
    first, last_ensemble = metadata.last_ensemble
    # Entry 9 was past the bookies' LAC (8): its re-add, to a write set with the dead
    # bookie in it, made the change.
    assert first == 9
    assert victim not in last_ensemble
    reader = await bk.open_ledger(lid)
    assert [e.payload for e in await reader.read_entries(0, 14)] == [
        payload(lid, i) for i in range(15)
    ]


async def test_the_lac_of_an_ensemble_that_cannot_answer_is_an_error(
    cluster: LocalCluster, bk: BookKeeper
) -> None:
    """Every bookie of the ensemble down: opening or resuming the ledger says so, as
    upstream's open without recovery fails, instead of showing an empty ledger."""
    lid = await _write_and_vanish(cluster, 3, shape=(2, 2, 2))
    metadata, _ = await bk.read_metadata(lid)
    for bookie in metadata.last_ensemble[1]:
        await cluster.stop_bookie(bookie, unregister=False)
    with pytest.raises(BookieUnavailableError, match="cannot learn the last add confirmed"):
        await bk.open_ledger(lid)
    with pytest.raises(BookieUnavailableError, match="cannot learn the last add confirmed"):
        await bk.resume_ledger(lid)
