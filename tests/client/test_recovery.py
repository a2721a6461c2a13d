"""Recovery: fencing, tail recovery, close — and the two upstream bugs as regressions.

Why: recovery decides where a ledger ends; if it decides too early, an entry the writer
acknowledged is lost (invariants S1). The scenarios R1, R2 (upstream #2614: recovery reads
must fence) and R3 (#2615: the recovery LAC is floored at the last ensemble) from invariants
§5 are replayed step by step over real sockets, with a :class:`FaultyConnector` holding and
dropping the exact frames the model's counterexamples hold and drop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.client import (
    AddFuture,
    BookKeeper,
    ClientConfig,
    LedgerFencedError,
    LedgerRecoveryError,
    ReadOnlyLedgerHandle,
)
from bookiesim.cluster.in_process import FaultyConnector, LocalCluster, running_cluster
from bookiesim.metadata.ledgers import LedgerState
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from tests.client.conftest import TEST_CONFIG
from tests.client.helpers import holders, payload, wait_until

if TYPE_CHECKING:
    from pathlib import Path

PATIENT = ClientConfig(seed=5, request_timeout=60)
"""Held frames must not time out while a scenario is being played."""


Match = Callable[[str, pb.Request], bool]


def is_add(entry_id: int, bookie: str | None = None) -> Match:
    def match(b: str, r: pb.Request) -> bool:
        return (
            r.HasField("addRequest")
            and r.addRequest.entryId == entry_id
            and (bookie is None or b == bookie)
        )

    return match


def is_read(entry_id: int, bookie: str | None = None, *, fence: bool | None = None) -> Match:
    def match(b: str, r: pb.Request) -> bool:
        if not r.HasField("readRequest") or r.readRequest.entryId != entry_id:
            return False
        if bookie is not None and b != bookie:
            return False
        fenced = (
            r.readRequest.HasField("flag") and r.readRequest.flag == pb.ReadRequest.FENCE_LEDGER
        )
        return fence is None or fence == fenced

    return match


async def check_recovered(bk: BookKeeper, handle: ReadOnlyLedgerHandle, acked: list[int]) -> None:
    metadata = handle.metadata
    assert metadata.state is LedgerState.CLOSED
    assert max(acked, default=-1) <= metadata.last_entry_id  # S1
    entries = (
        await handle.read_entries(0, metadata.last_entry_id) if metadata.last_entry_id >= 0 else []
    )
    assert [e.payload for e in entries] == [
        payload(handle.ledger_id, i) for i in range(metadata.last_entry_id + 1)
    ]  # S2, S4
    assert metadata.length == sum(len(e.payload) for e in entries)
    for entry_id in range(metadata.last_entry_id + 1):  # S3
        assert len(await holders(bk, handle.ledger_id, metadata, entry_id)) >= (
            metadata.ack_quorum_size
        )


async def test_recovery_after_writer_crash_returns_every_acknowledged_entry(
    cluster: LocalCluster, bk: BookKeeper
) -> None:
    connector = FaultyConnector()
    acked: list[int] = []
    with trio.CancelScope() as crash:
        async with BookKeeper(cluster.store, bookie_connector=connector, config=PATIENT) as w:
            lh = await w.create_ledger(3, 2, 2)
            lid = lh.ledger_id
            lost = lh.ensemble[0]
            # From entry 30 on, the writer's adds never reach one bookie: entries whose
            # write set includes it are stored once and never acknowledged.
            connector.add_rule(
                lambda b, r: (
                    "drop"
                    if b == lost and r.HasField("addRequest") and r.addRequest.entryId >= 30
                    else None
                )
            )
            for i in range(30):
                await lh.add_entry(payload(lid, i))
            # Pipelined: all carry LAC 29, none is acknowledged.
            futures = [lh.append_async(payload(lid, i)) for i in range(30, 60)]
            await wait_until(lambda: len([s for s in connector.log if s.entry_id == 59]) == 2)
            await trio.sleep(0.05)
            acked = list(range(30)) + [f.entry_id for f in futures if f.done and f.error is None]
            crash.cancel()  # the writer dies with adds in flight
    assert acked == list(range(30))
    # Entries 30..59 are on one bookie of their write set at least. With Qw = Qa = 2 one
    # "no such entry" is enough to rule an entry out (it cannot be on Qa bookies), so
    # whether recovery keeps one depends on which answer comes first - both are correct.
    # Reading both replicas at once and holding the lost bookie's answers makes the copies
    # win: every entry is re-added.
    rc = FaultyConnector()
    rc.add_rule(
        lambda b, r: (
            "hold"
            if b == lost and r.HasField("readRequest") and 30 <= r.readRequest.entryId <= 59
            else None
        )
    )
    config = ClientConfig(seed=7, request_timeout=3, parallel_recovery_reads=True)
    async with BookKeeper(cluster.store, bookie_connector=rc, config=config) as r:
        handle = await r.open_ledger(lid, recovery=True)
        assert handle.metadata.last_entry_id == 59
        assert r.stats.recovered_entries == 30
        rc.clear_rules()
        await rc.release()
        await check_recovered(r, handle, acked)


async def test_recovery_keeps_a_prefix_of_what_is_stored(
    cluster: LocalCluster, bk: BookKeeper
) -> None:
    """Without a hold: the end is somewhere in 29..59, never below what was acked."""
    connector = FaultyConnector()
    with trio.CancelScope() as crash:
        async with BookKeeper(cluster.store, bookie_connector=connector, config=PATIENT) as w:
            lh = await w.create_ledger(3, 3, 2)
            lid = lh.ledger_id
            lost = lh.ensemble[:2]
            connector.add_rule(
                lambda b, r: (
                    "drop"
                    if b in lost and r.HasField("addRequest") and r.addRequest.entryId >= 30
                    else None
                )
            )
            futures = [lh.append_async(payload(lid, i)) for i in range(60)]
            await futures[29].result()
            await wait_until(lambda: len([s for s in connector.log if s.entry_id == 59]) == 3)
            crash.cancel()
    handle = await bk.open_ledger(lid, recovery=True)
    assert 29 <= handle.metadata.last_entry_id <= 59
    await check_recovered(bk, handle, list(range(30)))


async def test_zombie_writer_adds_fail_as_fenced(
    cluster: LocalCluster, wire_config: ClientConfig
) -> None:
    async with (
        BookKeeper(cluster.store, config=wire_config) as writer,
        BookKeeper(cluster.store, config=wire_config) as recoverer,
    ):
        lh = await writer.create_ledger(3, 2, 2)
        lid = lh.ledger_id
        for i in range(10):
            await lh.add_entry(payload(lid, i))
        handle = await recoverer.open_ledger(lid, recovery=True)
        assert handle.metadata.last_entry_id == 9
        with pytest.raises(LedgerFencedError, match=f"ledger {lid} entry 10 bookie"):
            await lh.add_entry(payload(lid, 10))
        with pytest.raises(LedgerFencedError):
            lh.append_async(b"again")
        assert lh.last_add_confirmed == 9
        # Closing the zombie adopts the recoverer's close instead of overwriting it.
        version = handle.version
        await lh.close()
        assert lh.metadata == handle.metadata
        assert (await recoverer.read_metadata(lid))[1] == version
        await check_recovered(recoverer, handle, list(range(10)))
    v2 = sum(cluster.service(b).server.v2_connections for b in cluster.running_ids())
    assert (v2 > 0) == wire_config.use_v2_wire_protocol


async def test_recovering_an_empty_or_closed_ledger(bk_wire: BookKeeper) -> None:
    bk = bk_wire
    lh = await bk.create_ledger(3, 2, 2)
    handle = await bk.open_ledger(lh.ledger_id, recovery=True)
    assert (handle.metadata.last_entry_id, handle.metadata.length) == (-1, 0)
    # A closed ledger needs no recovery: nothing is written.
    _, version = await bk.read_metadata(lh.ledger_id)
    again = await bk.open_ledger(lh.ledger_id, recovery=True)
    assert again.version == version
    assert bk.stats.recoveries == 1


async def test_concurrent_recoverers_agree(cluster: LocalCluster, bk: BookKeeper) -> None:
    lh = await bk.create_ledger(3, 3, 2)
    futures = [lh.append_async(payload(lh.ledger_id, i)) for i in range(100)]
    await futures[-1].result()
    results: list[ReadOnlyLedgerHandle] = []

    async def recover() -> None:
        async with BookKeeper(cluster.store, config=TEST_CONFIG) as r:
            results.append(await r.open_ledger(lh.ledger_id, recovery=True))

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(recover)
    assert len({(h.metadata.last_entry_id, h.metadata.length) for h in results}) == 1
    assert results[0].metadata.last_entry_id == 99
    await check_recovered(bk, await bk.open_ledger(lh.ledger_id), list(range(100)))


async def test_recovery_replaces_a_dead_bookie_in_one_close(
    cluster: LocalCluster, bk: BookKeeper, wire_config: ClientConfig
) -> None:
    lh = await bk.create_ledger(3, 3, 2)
    lid = lh.ledger_id
    for i in range(20):
        await lh.add_entry(payload(lid, i))
    dead = lh.ensemble[2]
    await cluster.stop_bookie(dead)
    async with BookKeeper(cluster.store, config=wire_config) as r:
        handle = await r.open_ledger(lid, recovery=True)
        # The bookies knew LAC 18 (from entry 19's header): entry 19 is re-added to a write
        # set with the dead bookie in it.
        assert handle.metadata.last_entry_id == 19
        if sorted(handle.metadata.ensembles) == [0, 19]:
            # Its failure came first: a replacement, in a segment from 19 on written with
            # the close (invariants A9).
            assert dead not in handle.metadata.ensembles[19]
            assert all(p.first_entry_id >= 19 and p.by_recovery for p in r.stats.proposals)
        else:
            # The two live bookies acknowledged first (the failed connect to the dead one
            # raced them and lost; upstream's notifyWriteFailed also only marks the bookie
            # for a next add, and a recovery has none): closed on the one segment, entry 19
            # on Qa bookies of it (S3), the failure after the quorum counted.
            assert sorted(handle.metadata.ensembles) == [0]
            assert r.stats.adds_under_replicated == 1
            holding = await holders(r, lid, handle.metadata, 19)
            assert len(holding) == 2
            assert dead not in holding
        await cluster.start_bookie(dead)
        await check_recovered(r, handle, list(range(20)))


async def test_an_aborted_recovery_leaves_no_lac_the_next_one_would_trust(
    cluster: LocalCluster, bk: BookKeeper
) -> None:
    """Found by the fault machine (seed 162): a recovery's re-adds were acknowledged under
    an ensemble change it kept in memory, then it aborted. Its later re-adds carried the LAC
    those acknowledgements made, so the next recovery trusted that LAC and started past
    entries whose second copy sat on a replacement no metadata recorded (S3)."""
    entries = 40
    # The writer's adds reach one bookie only: nothing is acknowledged (Qa = 2); it crashes.
    connector = FaultyConnector()
    with trio.CancelScope() as crash:
        async with BookKeeper(cluster.store, bookie_connector=connector, config=PATIENT) as w:
            lh = await w.create_ledger(3, 3, 2)
            lid = lh.ledger_id
            b0, b1, b2 = lh.ensemble
            connector.add_rule(
                lambda b, r: "drop" if b != b0 and r.HasField("addRequest") else None
            )
            futures = [lh.append_async(payload(lid, i)) for i in range(entries)]
            await wait_until(lambda: any(s.entry_id == entries - 1 for s in connector.log))
            await trio.sleep(0.05)
            assert not any(f.done for f in futures)
            crash.cancel()
    # Recovery 1: b2 is down, so its re-adds replace b2 (in memory) and b0 and the
    # replacement acknowledge them; b1 never answers its re-adds. Reads of the second half
    # are held until the first half is acknowledged, so the re-adds of the second half go
    # out after the handle's LAC moved. The read past the end gets no answer from b1, so the
    # recovery aborts.
    await cluster.stop_bookie(b2)
    first = FaultyConnector()
    first.add_rule(
        lambda b, r: (
            "hold"
            if b == b1
            and (
                r.HasField("addRequest")
                or (r.HasField("readRequest") and r.readRequest.entryId >= entries)
            )
            else None
        )
    )
    first.add_rule(
        lambda b, r: (
            "hold"
            if b == b0 and r.HasField("readRequest") and r.readRequest.entryId >= entries // 2
            else None
        )
    )
    quick = ClientConfig(seed=7, request_timeout=2.0, connect_timeout=0.5)
    async with BookKeeper(cluster.store, bookie_connector=first, config=quick) as r1:

        async def release_later() -> None:
            await trio.sleep(0.5)
            await first.release(lambda b, r: b == b0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(release_later)
            with pytest.raises(LedgerRecoveryError):
                await r1.open_ledger(lid, recovery=True)
        assert r1.stats.ensemble_changes >= 1  # the replacement the metadata never got
    # Recovery 2, everything up: whatever it keeps must be on Qa bookies of the write sets
    # the metadata records (entries never acknowledged may be dropped: none was).
    await cluster.start_bookie(b2)
    async with BookKeeper(cluster.store, config=TEST_CONFIG) as r2:
        handle = await r2.open_ledger(lid, recovery=True)
        await check_recovered(r2, handle, [])


async def test_recovery_without_fencing_coverage_fails_and_can_be_retried(
    cluster: LocalCluster, bk: BookKeeper
) -> None:
    lh = await bk.create_ledger(3, 3, 2)
    for i in range(5):
        await lh.add_entry(payload(lh.ledger_id, i))
    down = lh.ensemble[:2]
    for bookie in down:
        await cluster.stop_bookie(bookie)
    async with BookKeeper(cluster.store, config=TEST_CONFIG) as r:
        with pytest.raises(LedgerRecoveryError, match="not enough to rule out a write quorum"):
            await r.open_ledger(lh.ledger_id, recovery=True)
        assert (await r.read_metadata(lh.ledger_id))[0].state is LedgerState.IN_RECOVERY
        for bookie in down:
            await cluster.start_bookie(bookie)
        handle = await r.open_ledger(lh.ledger_id, recovery=True)
        await check_recovered(r, handle, list(range(5)))


async def test_unknown_entry_aborts_recovery(cluster: LocalCluster, bk: BookKeeper) -> None:
    """A6: timeouts never count as "no such entry"; recovery must not guess."""
    lh = await bk.create_ledger(3, 3, 2)
    for i in range(5):
        await lh.add_entry(payload(lh.ledger_id, i))
    connector = FaultyConnector()
    b0, b1, _ = lh.ensemble
    connector.add_rule(lambda b, r: "drop" if is_read(5)(b, r) and b in (b0, b1) else None)
    config = ClientConfig(seed=1, request_timeout=0.3)
    async with BookKeeper(cluster.store, bookie_connector=connector, config=config) as r:
        with pytest.raises(LedgerRecoveryError, match="entry 5: cannot tell whether"):
            await r.open_ledger(lh.ledger_id, recovery=True)
    assert (await bk.read_metadata(lh.ledger_id))[0].state is LedgerState.IN_RECOVERY


@pytest.mark.parametrize("unsafe", [False, True], ids=["fenced-reads", "unsafe-2614"])
@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "sequential"])
async def test_r1_recovery_reads_must_fence(tmp_path: Path, unsafe: bool, parallel: bool) -> None:
    """Regression R1 (invariants §5.1, upstream #2614), the model's counterexample: with
    fencing recovery reads the zombie's add is rejected; with the unsafe switch the bug is
    back and the writer acknowledges an entry past the recovered end (S1 broken).

    The model reads from the whole write set at once (``parallel``): b2's answer is held.
    Read one replica after the other (upstream's default), recovery would wait for b2, so
    there b2's read is lost instead and times out, and recovery asks b3 next."""
    async with running_cluster(tmp_path / "c", 3) as cluster:
        wc, rc = FaultyConnector(), FaultyConnector()
        r_config = ClientConfig(
            seed=1,
            request_timeout=60 if parallel else 1.0,
            parallel_recovery_reads=parallel,
            unsafe_recovery_reads_without_fence=unsafe,
        )
        async with (
            BookKeeper(cluster.store, bookie_connector=wc, config=PATIENT) as w,
            BookKeeper(cluster.store, bookie_connector=rc, config=r_config) as r,
        ):
            lh = await w.create_ledger(3, 3, 2)
            lid = lh.ledger_id
            b1, b2, b3 = lh.ensemble
            # 1. W sends e0: the copy to b1 is lost, those to b2 and b3 are held.
            wc.add_rule(lambda b, req: "drop" if is_add(0, b1)(b, req) else None)
            wc.add_rule(lambda b, req: "hold" if is_add(0)(b, req) else None)
            e0: AddFuture = lh.append_async(payload(lid, 0))
            await wait_until(lambda: len(wc.held) == 2)
            # R's fence to b2 waits for step 5, its fence to b3 is lost (step 6), its read
            # of e0 from b2 gets no answer (step 7).
            rc.add_rule(lambda b, req: "hold" if is_read(-1, b2)(b, req) else None)
            rc.add_rule(lambda b, req: "drop" if is_read(-1, b3)(b, req) else None)
            lost_read = "hold" if parallel else "drop"
            rc.add_rule(lambda b, req: lost_read if is_read(0, b2)(b, req) else None)
            recovered: list[ReadOnlyLedgerHandle] = []

            async def recover() -> None:
                recovered.append(await r.open_ledger(lid, recovery=True))

            async with trio.open_nursery() as nursery:
                # 2.-3. R: IN_RECOVERY, fence b1.
                nursery.start_soon(recover)
                await wait_until(lambda: len(rc.held) == 1)
                # 4. W's add reaches b2, which stores e0 and acks: 1 of Qa = 2.
                await wc.release(lambda b, req: b == b2)
                await wait_until(lambda: len(e0.acked) == 1)
                # 5. R's fence reaches b2: with b1, coverage. 7. R reads e0: b1 and b3 say
                # no such entry. 8. R closes at -1.
                await rc.release(is_read(-1, b2))
            handle = recovered[0]
            assert handle.metadata.last_entry_id == -1
            reads = [s for s in rc.log if s.operation == "READ_ENTRY" and s.entry_id == 0]
            assert {s.bookie for s in reads} == {b1, b2, b3}
            assert all(s.fence != unsafe for s in reads)
            # 9. W's held add reaches b3.
            await wc.release(lambda b, req: b == b3)
            if not unsafe:
                with pytest.raises(LedgerFencedError, match=f"bookie {b3}"):
                    await e0.result()
                assert cluster.service(b3).bookie.storage.is_fenced(lid)
                assert lh.last_add_confirmed == -1  # S1 holds
            else:
                assert await e0.result() == 0
                assert lh.last_add_confirmed > handle.metadata.last_entry_id  # S1 broken


async def test_r2_zombie_add_after_recovery_read_is_fenced(tmp_path: Path) -> None:
    """Regression R2 (upstream test shape of #2614, non-empty ledger)."""
    async with running_cluster(tmp_path / "c", 3) as cluster:
        wc, rc = FaultyConnector(), FaultyConnector()
        r_config = ClientConfig(seed=1, request_timeout=0.5)
        async with (
            BookKeeper(cluster.store, bookie_connector=wc, config=PATIENT) as w,
            BookKeeper(cluster.store, bookie_connector=rc, config=r_config) as r,
        ):
            lh = await w.create_ledger(3, 3, 2)
            lid = lh.ledger_id
            _, b2, b3 = lh.ensemble
            for i in range(2):
                await lh.add_entry(payload(lid, i))
            # W adds e2: held to b1 (forever) and b2, delivered to b3 (1 ack).
            wc.add_rule(lambda b, req: "hold" if is_add(2)(b, req) and b != b3 else None)
            e2 = lh.append_async(payload(lid, 2))
            await wait_until(lambda: len(e2.acked) == 1 and len(wc.held) == 2)
            # R: fence to b2 fails (dropped: a timeout), b1 and b3 answer; R's read of e2
            # from b3 is held, b1 and b2 say no such entry.
            rc.add_rule(lambda b, req: "drop" if is_read(-1, b2)(b, req) else None)
            rc.add_rule(lambda b, req: "hold" if is_read(2, b3)(b, req) else None)
            handle = await r.open_ledger(lid, recovery=True)
            assert handle.metadata.last_entry_id == 1
            assert len(handle.metadata.ensembles) == 1
            await wc.release(lambda b, req: b == b2)
            with pytest.raises(LedgerFencedError, match=f"bookie {b2}"):
                await e2.result()
            assert lh.last_add_confirmed == 1


async def test_r3_recovery_starts_at_the_last_ensemble(tmp_path: Path) -> None:
    """Regression R3 (invariants §5.2, upstream #2615): the recovery LAC is floored at the
    first entry of the last ensemble - 1, so recovery reads from there, never proposes a
    segment below it, and closes even with a bookie of that ensemble down (L2)."""
    async with running_cluster(tmp_path / "c", 6) as cluster:
        wc = FaultyConnector()
        w_config = ClientConfig(seed=2, request_timeout=0.3)
        with trio.CancelScope() as crash:
            async with BookKeeper(cluster.store, bookie_connector=wc, config=w_config) as w:
                lh = await w.create_ledger(2, 2, 2)
                lid = lh.ledger_id
                first_ensemble = lh.ensemble
                for i in range(2):
                    await lh.add_entry(payload(lid, i))
                # Every add from e2 on times out: the writer replaces both bookies
                # (segment 2), then dies before any add reaches the new ones.
                wc.add_rule(
                    lambda b, req: (
                        "drop"
                        if req.HasField("addRequest") and req.addRequest.entryId >= 2
                        else None
                    )
                )
                lh.append_async(payload(lid, 2))
                # Both replaced: one change may replace one bookie and a second the other
                # (each times out on its own), and a crash between them would leave one.
                await wait_until(lambda: not set(lh.ensemble) & set(first_ensemble))
                crash.cancel()
        async with BookKeeper(cluster.store, config=TEST_CONFIG) as peek:
            metadata, _ = await peek.read_metadata(lid)
        assert sorted(metadata.ensembles) == [0, 2]
        new_ensemble = metadata.ensembles[2]
        assert not set(new_ensemble) & set(first_ensemble)
        await cluster.stop_bookie(new_ensemble[1])  # L2: one bookie of it is down
        rc = FaultyConnector()
        async with BookKeeper(cluster.store, bookie_connector=rc, config=TEST_CONFIG) as r:
            handle = await r.open_ledger(lid, recovery=True)
            assert handle.metadata.last_entry_id == 1  # S1: W acked e0, e1
            assert handle.metadata.length == len(payload(lid, 0)) + len(payload(lid, 1))
            forward = [s.entry_id for s in rc.log if s.fence and s.entry_id != -1]
            assert forward
            assert min(e for e in forward if e is not None) == 2  # A8
            assert all(p.first_entry_id >= 2 for p in r.stats.proposals)  # S5
            assert sorted(handle.metadata.ensembles) == [0, 2]
            assert [e.payload for e in await handle.read_entries(0, 1)] == [
                payload(lid, 0),
                payload(lid, 1),
            ]
