"""WriteClose (BP-32): the closing writer tells its ensemble, without waiting.

Why: WriteClose is what lets a bookie running entry-log-per-ledger rotate (seal) a ledger's
log as soon as the writer is done instead of at expiry, so it can be flushed and reclaimed
sooner. It is advisory: a bookie that does not advertise it never gets one (an upstream
bookie would fall back to v2 decoding on operation 32), and a lost one must change nothing
but when the log is rotated.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import trio

from bookiesim.client import BookKeeper, ClientConfig
from bookiesim.cluster.in_process import FaultyConnector, LocalCluster
from bookiesim.cluster.testing import write_out_table
from bookiesim.entrylog.logger import RotationReason
from tests.client.conftest import TEST_CONFIG
from tests.client.helpers import payload, wait_until


async def rotations(cluster: LocalCluster, bookie: str, reason: RotationReason) -> int:
    """The bookie's rotations for ``reason``, once its sorted table is written out (a
    rotation asked for a ledger still in the table waits for that)."""
    service = cluster.service(bookie)
    await write_out_table(service)
    return service.bookie.storage.entry_logger.rotations[reason]


async def has_active_log(cluster: LocalCluster, bookie: str, ledger_id: int) -> bool:
    """Whether the ledger has an active log on the bookie, once its table is written out."""
    service = cluster.service(bookie)
    await write_out_table(service)
    return ledger_id in service.bookie.storage.entry_logger.active_logs()


async def write_ledger(bk: BookKeeper, e: int, n: int = 20) -> tuple[int, tuple[str, ...]]:
    lh = await bk.create_ledger(e, 2, 2)
    for i in range(n):
        lh.append_async(payload(lh.ledger_id, i))
    await lh.close()
    return lh.ledger_id, tuple(sorted(lh.metadata.bookies()))


async def test_write_close_reaches_every_ensemble_bookie_and_rotates_the_logs(
    cluster: LocalCluster, bk: BookKeeper
) -> None:
    lh = await bk.create_ledger(3, 2, 2)
    lid = lh.ledger_id
    for i in range(20):
        await lh.add_entry(payload(lid, i))
    for bookie in lh.ensemble:
        assert await has_active_log(cluster, bookie, lid)
    await lh.close()  # returns without waiting for the WriteCloses
    await bk.wait_write_closes()
    assert (bk.stats.write_close_sent, bk.stats.write_close_ok) == (3, 3)
    assert (bk.stats.write_close_failed, bk.stats.write_close_skipped) == (0, 0)
    for bookie in cluster.running_ids():
        expected = 1 if bookie in lh.ensemble else 0
        assert await rotations(cluster, bookie, RotationReason.WRITE_CLOSE) == expected, bookie
        assert not await has_active_log(cluster, bookie, lid)
    for bookie in lh.ensemble:
        service = cluster.service(bookie)
        logger = service.bookie.storage.entry_logger
        assert logger.rotated_log_count == 1
        before = logger.least_unflushed_log_id
        await service.bookie.checkpoint()  # rotated logs are flushed and closed here
        assert logger.rotated_log_count == 0
        assert logger.least_unflushed_log_id > before
        body, _ = service.metrics.render()
        assert 'bookie_write_close_requests_total{outcome="rotated"} 1.0' in body.decode()


async def test_write_close_goes_to_every_ensemble_of_the_ledger(cluster: LocalCluster) -> None:
    await cluster.start_bookie()
    async with BookKeeper(cluster.store, config=TEST_CONFIG) as bk:
        lh = await bk.create_ledger(3, 2, 2)
        lid = lh.ledger_id
        for i in range(5):
            await lh.add_entry(payload(lid, i))
        gone = lh.ensemble[0]
        await cluster.stop_bookie(gone)
        for i in range(5, 10):
            await lh.add_entry(payload(lid, i))
        await lh.close()
        await bk.wait_write_closes()
        assert len(lh.metadata.ensembles) == 2
        # The stopped bookie is no longer registered: skipped; the other three (two of
        # the first ensemble, the replacement) rotate.
        assert (bk.stats.write_close_sent, bk.stats.write_close_ok) == (3, 3)
        assert bk.stats.write_close_skipped == 1
        for bookie in lh.metadata.bookies() - {gone}:
            assert await rotations(cluster, bookie, RotationReason.WRITE_CLOSE) == 1


async def _same_data(bk: BookKeeper, ledger_id: int, n: int) -> None:
    reader = await bk.open_ledger(ledger_id)
    assert [e.payload for e in await reader.read_entries(0, n - 1)] == [
        payload(ledger_id, i) for i in range(n)
    ]


async def test_bookie_not_advertising_write_close_gets_none_and_rotates_at_expiry(
    cluster: LocalCluster,
) -> None:
    # A fifth bookie without the feature, with a short expiry so the test sees it.
    legacy = await cluster.start_bookie(
        features=(), overrides={"entrylog_map_access_expiry_time_in_seconds": 1}
    )
    async with BookKeeper(cluster.store, config=TEST_CONFIG) as bk:
        lid, bookies = await write_ledger(bk, 5)
        assert legacy in bookies
        await bk.wait_write_closes()
        assert (bk.stats.write_close_sent, bk.stats.write_close_ok) == (4, 4)
        assert bk.stats.write_close_skipped == 1
        assert await rotations(cluster, legacy, RotationReason.WRITE_CLOSE) == 0
        assert await has_active_log(cluster, legacy, lid)
        await _same_data(bk, lid, 20)
        # Only the timing differs: the log still rotates, at expiry.
        with trio.fail_after(10):
            while await has_active_log(cluster, legacy, lid):  # noqa: ASYNC110
                await trio.sleep(0.05)
        assert await rotations(cluster, legacy, RotationReason.EXPIRY) >= 1


async def test_a_dropped_write_close_changes_nothing_but_timing(cluster: LocalCluster) -> None:
    connector = FaultyConnector()
    config = ClientConfig(seed=3, request_timeout=0.3)
    async with BookKeeper(cluster.store, bookie_connector=connector, config=config) as bk:
        lh = await bk.create_ledger(3, 2, 2)
        lid = lh.ledger_id
        for i in range(20):
            await lh.add_entry(payload(lid, i))
        lost = lh.ensemble[1]
        connector.add_rule(
            lambda b, r: "drop" if b == lost and r.HasField("writeCloseRequest") else None
        )
        await lh.close()
        assert lh.metadata.is_closed
        await bk.wait_write_closes()
        assert (bk.stats.write_close_sent, bk.stats.write_close_ok) == (3, 2)
        assert bk.stats.write_close_failed == 1
        assert await rotations(cluster, lost, RotationReason.WRITE_CLOSE) == 0
        assert await has_active_log(cluster, lost, lid)
        await _same_data(bk, lid, 20)
        # A later WriteClose (here: by hand) or expiry rotates it; the data never changes.
        cluster.service(lost).bookie.storage.rotate_ledger_log(lid, RotationReason.EXPIRY)
        await _same_data(bk, lid, 20)


async def test_close_does_not_wait_for_write_close(cluster: LocalCluster) -> None:
    connector = FaultyConnector()
    connector.add_rule(lambda b, r: "hold" if r.HasField("writeCloseRequest") else None)
    async with BookKeeper(cluster.store, bookie_connector=connector, config=TEST_CONFIG) as bk:
        lid, bookies = await write_ledger(bk, 3)
        await wait_until(lambda: len(connector.held) == 3)
        assert bk.stats.write_close_sent == 3
        assert bk.stats.write_close_ok == 0
        for bookie in bookies:
            assert await has_active_log(cluster, bookie, lid)
        await connector.release()
        await bk.wait_write_closes()
        assert bk.stats.write_close_ok == 3
        for bookie in bookies:
            assert not await has_active_log(cluster, bookie, lid)


@pytest.mark.parametrize("tail", [0, 1], ids=["empty", "re-adds"])
async def test_recovery_sends_write_close_only_after_re_adds(
    cluster: LocalCluster, bk: BookKeeper, tail: int
) -> None:
    """The fencing reads rotate the ledger's logs; re-adds open new ones, so a recovery
    that re-added entries sends WriteClose like a closing writer."""
    lh = await bk.create_ledger(3, 3, 2)
    n = 5 * tail  # with entries, the last one (LAC 3 in its header) is re-added
    for i in range(n):
        await lh.add_entry(payload(lh.ledger_id, i))
    for bookie in lh.ensemble:  # the entries in their logs, so that the fence rotates them
        await write_out_table(cluster.service(bookie))
    handle = await bk.open_ledger(lh.ledger_id, recovery=True)
    assert handle.metadata.last_entry_id == n - 1
    await bk.wait_write_closes()
    assert bk.stats.recovered_entries == tail
    assert bk.stats.write_close_sent == 3 * tail
    for bookie in lh.ensemble:
        # An empty ledger has no log to rotate at the fence.
        assert await rotations(cluster, bookie, RotationReason.FENCE) == tail
        assert await rotations(cluster, bookie, RotationReason.WRITE_CLOSE) == tail
        assert not await has_active_log(cluster, bookie, lh.ledger_id)


async def test_a_v2_client_sends_no_write_close(cluster: LocalCluster) -> None:
    """WriteClose is a v3 extension, and a bookie's connection that switched to v2 cannot
    decode a v3 frame: with useV2WireProtocol the client skips it (the bookies rotate the
    ledger's log at expiry instead), and closing still works."""
    config = replace(TEST_CONFIG, use_v2_wire_protocol=True)
    async with BookKeeper(cluster.store, config=config) as bk:
        lid, bookies = await write_ledger(bk, 3)
        await bk.wait_write_closes()
        assert (bk.stats.write_close_sent, bk.stats.write_close_skipped) == (0, 3)
        for bookie in bookies:
            assert await rotations(cluster, bookie, RotationReason.WRITE_CLOSE) == 0
            assert await has_active_log(cluster, bookie, lid)
        reader = await bk.open_ledger(lid)
        assert reader.last_add_confirmed == 19
