"""Ensemble changes: a writer that loses a bookie replaces it and loses nothing.

Why: quorum writes must survive the loss of a bookie (issue 4), and the way the writer
replaces it — new segment from LAC + 1, acks of the replaced bookie forgotten, unacknowledged
entries resent — is exactly where invariants S2, S3, S5 and A11 can break.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
import trio

from bookiesim.client import (
    BookKeeper,
    ClientConfig,
    LedgerClosedError,
    LedgerFencedError,
    LedgerHandle,
    NotEnoughBookiesError,
)
from bookiesim.cluster.in_process import FaultyConnector, LocalCluster, running_cluster
from bookiesim.metadata.registration import BookieInfo, register_bookie
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from tests.client.conftest import TEST_CONFIG
from tests.client.helpers import holders, payload, wait_until

if TYPE_CHECKING:
    from bookiesim.client.bookie_pool import OutcomeCallback
    from bookiesim.metadata.ledgers import LedgerMetadata
    from bookiesim.proto.v3 import WireRequest


async def check_closed_ledger(bk: BookKeeper, lh: LedgerHandle, acked: list[int]) -> None:
    """Every acknowledged entry is readable with its payload (S1, S2, S4), and every entry
    of the closed ledger is on >= Qa bookies of its write set per the metadata (S3)."""
    metadata, _ = await bk.read_metadata(lh.ledger_id)
    assert metadata.is_closed
    assert max(acked, default=-1) <= metadata.last_entry_id
    reader = await bk.open_ledger(lh.ledger_id)
    entries = await reader.read_entries(0, metadata.last_entry_id)
    assert [e.payload for e in entries] == [
        payload(lh.ledger_id, i) for i in range(metadata.last_entry_id + 1)
    ]
    for entry_id in range(metadata.last_entry_id + 1):
        assert len(await holders(bk, lh.ledger_id, metadata, entry_id)) >= (
            metadata.ack_quorum_size
        ), entry_id


def check_segments_valid(bk: BookKeeper, metadata: LedgerMetadata) -> None:
    """S5: no proposal ever started below an existing segment of the ledger."""
    firsts = sorted(metadata.ensembles)
    for proposal in bk.stats.proposals:
        assert proposal.first_entry_id >= 0
    assert firsts == sorted(set(firsts))


async def test_quorum_writes_survive_losing_a_bookie_mid_stream(
    cluster: LocalCluster, bk: BookKeeper
) -> None:
    lh = await bk.create_ledger(3, 2, 2)
    lid = lh.ledger_id
    futures = [lh.append_async(payload(lid, i)) for i in range(200)]
    victim = lh.ensemble[1]
    await futures[50].result()
    await cluster.stop_bookie(victim)  # adds 51.. are in flight to it, or about to be
    futures += [lh.append_async(payload(lid, i)) for i in range(200, 400)]
    acked = [await f.result() for f in futures]
    assert acked == list(range(400))
    assert victim not in lh.ensemble
    assert bk.stats.ensemble_changes >= 1
    metadata = lh.metadata
    assert len(metadata.ensembles) >= 2
    # The new segment starts after what was acknowledged before the stop; if every add of
    # the first batch got through before the stop took effect, with the second batch.
    assert 51 <= sorted(metadata.ensembles)[1] <= 399
    await lh.close()
    await cluster.start_bookie(victim)  # S3 counts copies; the stopped bookie lost none
    await check_closed_ledger(bk, lh, acked)
    check_segments_valid(bk, lh.metadata)


async def test_every_entry_readable_after_losing_a_bookie_with_striping(
    cluster: LocalCluster,
) -> None:
    await cluster.start_bookie()  # 5 bookies: E=4 leaves one spare
    async with BookKeeper(cluster.store, config=TEST_CONFIG) as bk:
        lh = await bk.create_ledger(4, 3, 2)
        lid = lh.ledger_id
        for i in range(20):
            await lh.add_entry(payload(lid, i))
        await cluster.stop_bookie(lh.ensemble[0])
        futures = [lh.append_async(payload(lid, i)) for i in range(20, 60)]
        acked = [await f.result() for f in futures]
        assert acked == list(range(20, 60))
        # With Qa < Qw the adds need not wait for the lost bookie; its failure shows soon.
        await wait_until(lambda: bk.stats.ensemble_changes > 0)
        await lh.wait_for_pending()
        # The new ensemble starts at LAC + 1 when the failure is noticed (upstream's
        # ensembleChangeLoop): entries 20, 21, ... may be confirmed by the other two of their
        # write set first (Qa < Qw), so not before 20, and not past the last add.
        assert 20 <= sorted(lh.metadata.ensembles)[1] < 60
        await lh.close()
        await cluster.start_bookie(lh.metadata.ensembles[0][0])
        await check_closed_ledger(bk, lh, list(range(60)))


async def test_a_dead_bookie_still_registered_is_replaced_again(cluster: LocalCluster) -> None:
    await cluster.start_bookie()
    async with BookKeeper(cluster.store, config=ClientConfig(seed=3, request_timeout=3)) as bk:
        lh = await bk.create_ledger(3, 2, 2)
        lid = lh.ledger_id
        spares = [b for b in cluster.running_ids() if b not in lh.ensemble]
        # One spare is dead but its registration lingers, as after a crash.
        await cluster.stop_bookie(spares[0], unregister=False)
        assert spares[0] in await bk.live_bookies()
        for i in range(10):
            await lh.add_entry(payload(lid, i))
        await cluster.stop_bookie(lh.ensemble[2])
        futures = [lh.append_async(payload(lid, i)) for i in range(10, 50)]
        assert [await f.result() for f in futures] == list(range(10, 50))
        assert spares[1] in lh.ensemble
        assert spares[0] not in lh.ensemble
        await lh.close()
        await cluster.start_bookie(lh.metadata.ensembles[0][2])
        await check_closed_ledger(bk, lh, list(range(50)))


async def test_no_spare_bookie_fails_the_pending_adds(cluster: LocalCluster) -> None:
    async with (
        running_cluster(cluster.root / "small", 3) as small,
        BookKeeper(small.store, config=TEST_CONFIG) as bk,
    ):
        lh = await bk.create_ledger(3, 2, 2)
        await lh.add_entry(b"ok")
        await small.stop_bookie(lh.ensemble[0])
        futures = [lh.append_async(b"x%d" % i) for i in range(10)]
        for f in futures:
            with pytest.raises(NotEnoughBookiesError, match=f"ledger {lh.ledger_id}"):
                await f.result()
        assert isinstance(lh.error, NotEnoughBookiesError)
        with pytest.raises(NotEnoughBookiesError):
            lh.append_async(b"more")
        assert lh.last_add_confirmed == 0
        await lh.close()
        assert lh.metadata.last_entry_id == 0


@pytest.mark.parametrize("takeover", ["recovery", "close"])
async def test_writer_that_finds_its_ledger_taken_over_fails_its_adds(
    cluster: LocalCluster, bk: BookKeeper, takeover: str
) -> None:
    lh = await bk.create_ledger(3, 2, 2)
    for i in range(5):
        await lh.add_entry(payload(lh.ledger_id, i))

    # Someone else moves the metadata on (without fencing any bookie), then a bookie of the
    # writer's ensemble fails: the ensemble change's CAS sees the takeover.
    def take_over(current: LedgerMetadata) -> LedgerMetadata:
        return current.in_recovery() if takeover == "recovery" else current.closed(4, 0)

    await bk.ledger_manager.update_with_retry(lh.ledger_id, take_over)
    await cluster.stop_bookie(lh.ensemble[0])
    expected = LedgerFencedError if takeover == "recovery" else LedgerClosedError
    futures = [lh.append_async(b"late%d" % i) for i in range(6)]
    for f in futures:
        with pytest.raises(expected, match=f"ledger {lh.ledger_id}"):
            await f.result()
    assert lh.last_add_confirmed == 4
    assert bk.stats.ensemble_changes == 0


async def test_ensemble_changes_continue_while_adds_arrive(
    cluster: LocalCluster, bk: BookKeeper
) -> None:
    """Adds made while the ensemble changes are sent afterwards, in order."""
    await cluster.start_bookie()
    lh = await bk.create_ledger(3, 3, 2)
    lid = lh.ledger_id
    futures = []
    async with trio.open_nursery() as nursery:

        async def writer() -> None:
            for i in range(300):
                futures.append(lh.append_async(payload(lid, i)))
                if i % 10 == 0:
                    await trio.sleep(0.005)

        nursery.start_soon(writer)
        await trio.sleep(0.02)
        await cluster.stop_bookie(lh.ensemble[0])
        await trio.sleep(0.02)
        await cluster.stop_bookie(lh.ensemble[1])
    assert [await f.result() for f in futures] == list(range(300))
    await lh.close()
    for bookie in lh.metadata.ensembles[0][:2]:
        await cluster.start_bookie(bookie)
    await check_closed_ledger(bk, lh, list(range(300)))
    check_segments_valid(bk, lh.metadata)


async def test_a_bookie_that_failed_earlier_can_replace_another_once_back(
    cluster: LocalCluster, bk: BookKeeper
) -> None:
    lh = await bk.create_ledger(3, 2, 2)  # four bookies: one spare
    lid = lh.ledger_id
    for i in range(5):
        await lh.add_entry(payload(lid, i))
    first = lh.ensemble[0]
    await cluster.stop_bookie(first)
    for i in range(5, 10):
        await lh.add_entry(payload(lid, i))
    assert first not in lh.ensemble
    await cluster.start_bookie(first)  # back, and the only spare
    await cluster.stop_bookie(lh.ensemble[1])
    for i in range(10, 15):
        await lh.add_entry(payload(lid, i))
    assert first in lh.ensemble
    await lh.close()
    await cluster.start_bookie(lh.metadata.ensembles[5][1])
    await check_closed_ledger(bk, lh, list(range(15)))


async def test_no_add_completes_while_an_ensemble_change_is_under_way(
    cluster: LocalCluster,
) -> None:
    """Found by the fault campaign (seed 15, once changes could wait): entry 0 has B's ack,
    B fails, the change to replace it reads LAC -1 and so starts its segment at entry 0;
    A's ack of entry 0 arrives while the change is under way. Had entry 0 completed then,
    the new segment would put it on A and B's replacement, which never got it (S3)."""
    connector = FaultyConnector()
    async with BookKeeper(cluster.store, bookie_connector=connector, config=TEST_CONFIG) as bk:
        lh = await bk.create_ledger(3, 2, 2)
        lid = lh.ledger_id
        a, b, _ = lh.ensemble

        def hold_a_entry_0(bookie: str, request: pb.Request) -> str | None:
            is_add = request.HasField("addRequest")
            return "hold" if bookie == a and is_add and request.addRequest.entryId == 0 else None

        connector.add_rule(hold_a_entry_0)
        first = lh.append_async(payload(lid, 0))
        await wait_until(lambda: first.acked == {1})  # B's ack only; A's copy is held

        gate, entered = trio.Event(), trio.Event()
        update = bk.ledger_manager.update_with_retry

        async def gated_update(*args: Any, **kwargs: Any) -> Any:
            entered.set()
            await gate.wait()
            return await update(*args, **kwargs)

        bk.ledger_manager.update_with_retry = gated_update  # type: ignore[method-assign]
        await cluster.stop_bookie(b)
        second = lh.append_async(payload(lid, 1))  # entry 1 goes to B and C: B fails
        await entered.wait()  # the change is writing its segment, from entry 0
        connector.clear_rules()
        assert await connector.release() == 1
        await wait_until(lambda: first.acked == {0, 1})
        await trio.sleep(0.05)
        assert not first.done, "entry 0 completed with the ack of a bookie being replaced"

        gate.set()
        assert [await first.result(), await second.result()] == [0, 1]
        assert b not in lh.ensemble
        await lh.close()
        assert sorted(lh.metadata.ensembles) == [0]
        await check_closed_ledger(bk, lh, [0, 1])


async def test_a_writer_waits_between_retries_of_bookies_that_keep_failing(
    cluster: LocalCluster,
) -> None:
    """The only spare and the bookie it replaces are dead but still registered (as after
    crashes, before their sessions expire). The writer reuses them, each after a backoff
    that doubles, instead of flipping between them at once with a metadata write per
    flip; once one is back, the adds go through."""
    config = replace(TEST_CONFIG, bookie_retry_backoff=0.05, bookie_retry_backoff_max=0.4)
    async with BookKeeper(cluster.store, config=config) as bk:
        lh = await bk.create_ledger(3, 2, 2)
        lid = lh.ledger_id
        await lh.add_entry(payload(lid, 0))
        (spare,) = [x for x in cluster.running_ids() if x not in lh.ensemble]
        victim = lh.ensemble[1]
        await cluster.stop_bookie(spare, unregister=False)
        await cluster.stop_bookie(victim, unregister=False)
        futures = [lh.append_async(payload(lid, i)) for i in range(1, 20)]
        await trio.sleep(1.5)
        # Refused connections fail in a millisecond: without the backoff, thousands of
        # changes. With it: two at once, then one per bookie each 0.05, 0.1, 0.2, 0.4 s.
        assert 2 <= bk.stats.ensemble_changes <= 12, bk.stats.ensemble_changes
        assert not any(f.done for f in futures)
        await cluster.start_bookie(spare)
        assert [await f.result() for f in futures] == list(range(1, 20))
        assert spare in lh.ensemble
        await lh.close()
        await cluster.start_bookie(victim)
        await check_closed_ledger(bk, lh, list(range(20)))


async def test_a_read_only_bookie_is_replaced_like_a_failed_one(
    cluster: LocalCluster, bk: BookKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bookie that went read-only (a full or failed disk) answers adds with EREADONLY;
    upstream's writer treats that like any failed bookie (``PendingAddOp``: every code but
    OK, fenced and unauthorized) and replaces it by an ensemble change."""
    lh = await bk.create_ledger(3, 2, 2)
    lid = lh.ledger_id
    victim = lh.ensemble[0]
    submit = bk.pool.submit

    def read_only(bookie: str, request: WireRequest, callback: OutcomeCallback) -> None:
        if bookie == victim and request.operation == pb.ADD_ENTRY:
            callback(pb.Response(status=pb.EREADONLY))
        else:
            submit(bookie, request, callback)

    monkeypatch.setattr(bk.pool, "submit", read_only)
    assert [await lh.add_entry(payload(lid, i)) for i in range(6)] == list(range(6))
    assert victim not in lh.ensemble
    assert bk.stats.ensemble_changes == 1
    await lh.close()
    metadata, _ = await bk.read_metadata(lid)
    assert all(victim not in bookies for bookies in metadata.ensembles.values())
    await check_closed_ledger(bk, lh, list(range(6)))


async def test_a_bookie_that_fails_an_add_after_its_quorum_is_replaced_at_the_next_add(
    cluster: LocalCluster, bk: BookKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Upstream's ``PendingAddOp``: a write-set bookie that fails an add already
    acknowledged (Qa < Qw) leaves the entry under-replicated (ADD_OP_UR) and is replaced at
    the next add, from LAC + 1; the entry keeps its segment. Until then nothing changes:
    the failure alone writes no metadata. (The fault campaign found such a ledger: the
    bookie had stayed in the ensemble.)"""
    lh = await bk.create_ledger(3, 3, 2)
    lid = lh.ledger_id
    victim = lh.ensemble[2]
    submit = bk.pool.submit
    held: list[OutcomeCallback] = []

    def hold_victims_entry_0(bookie: str, request: WireRequest, callback: OutcomeCallback) -> None:
        if bookie == victim and request.operation == pb.ADD_ENTRY and not held:
            held.append(callback)  # its first add: entry 0
        else:
            submit(bookie, request, callback)

    monkeypatch.setattr(bk.pool, "submit", hold_victims_entry_0)
    assert await lh.add_entry(payload(lid, 0)) == 0
    (answer,) = held
    answer(pb.Response(status=pb.EIO))
    assert bk.stats.adds_under_replicated == 1
    assert victim in lh.ensemble
    assert bk.stats.ensemble_changes == 0

    assert await lh.add_entry(payload(lid, 1)) == 1
    assert victim not in lh.ensemble
    assert bk.stats.ensemble_changes == 1
    await lh.close()
    metadata, _ = await bk.read_metadata(lid)
    assert sorted(metadata.ensembles) == [0, 1]
    assert victim in metadata.ensembles[0]
    assert victim not in metadata.ensembles[1]
    await check_closed_ledger(bk, lh, [0, 1])
    assert victim not in await holders(bk, lid, metadata, 0)


async def test_too_few_writable_bookies_names_the_read_only_ones(
    cluster: LocalCluster, bk: BookKeeper
) -> None:
    """A user whose disks filled up: every bookie runs, none is writable; the error says
    which are there read-only rather than only "0 registered"."""
    live = sorted(await bk.live_bookies())
    async with register_bookie(cluster.store, BookieInfo("127.0.0.1:1")) as registration:
        await registration.set_read_only()
        with pytest.raises(NotEnoughBookiesError) as info:
            await bk.create_ledger(len(live) + 1, 1, 1)
    assert str(info.value).endswith(
        f"{len(live)} registered ({live}); 1 more registered read-only (['127.0.0.1:1']): "
        "full disks, or made read-only by an operator"
    )
