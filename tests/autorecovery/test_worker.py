"""The replication worker on real in-process bookies and a real metadata store: marked
ledgers are healed (closed ones at once, open ones after their writer's grace period, by
recovery if the writer did not replace the bookie itself), deleted ones lose their mark, a
ledger without a spare bookie keeps its mark while its lock is kept for a back-off, and a
worker cancelled mid-copy leaves nothing that a second worker cannot finish."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.autorecovery.config import AutoRecoveryConfig
from bookiesim.autorecovery.metrics import AutoRecoveryMetrics
from bookiesim.autorecovery.worker import ReplicationWorker, Step, failed_ledger_backoff
from bookiesim.client import BookKeeper, DigestType, LedgerFencedError
from bookiesim.client.digest import DigestManager
from bookiesim.cluster.in_process import FaultyConnector, running_cluster
from bookiesim.cluster.testing import write_out_table
from bookiesim.metadata.errors import StoreUnavailableError
from bookiesim.metadata.ledgers import DigestType as MetaDigestType
from bookiesim.metadata.ledgers import LedgerMetadata, LedgerState
from bookiesim.metadata.underreplication import LedgerLock, UnderReplicationManager
from bookiesim.proto.v3 import add_request
from tests.autorecovery.replication_helpers import (
    CLIENT_CONFIG,
    PASSWORD,
    missing_replicas,
    payload,
    replication_rotations,
    write_ledger,
)

if TYPE_CHECKING:
    from pathlib import Path

    from bookiesim.cluster.in_process import LocalCluster
    from bookiesim.proto import BookkeeperProtocol_pb2 as pb

CONFIG = AutoRecoveryConfig(
    rereplication_entry_batch_size=4,
    open_ledger_rereplication_grace_period=0.3,
    lock_release_of_failed_ledger_grace_period=0.32,  # first back-off 0.01 s
    rw_rereplicate_backoff=0.05,
)


def sample(metrics: AutoRecoveryMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    assert value is not None, name
    return value


async def wait_for_no_marks(urm: UnderReplicationManager, seconds: float = 20) -> None:
    with trio.fail_after(seconds):
        while await urm.count():  # noqa: ASYNC110 (state in the store, no event to wait on)
            await trio.sleep(0.05)


def received(cluster: LocalCluster, before: LedgerMetadata, after: LedgerMetadata) -> set[str]:
    return after.bookies() - before.bookies()


def test_failed_ledger_backoff_doubles_up_to_the_grace_period() -> None:
    assert [failed_ledger_backoff(320, n) for n in range(7)] == [10, 20, 40, 80, 160, 320, 320]


async def test_worker_heals_closed_and_open_ledgers(tmp_path: Path) -> None:
    metrics = AutoRecoveryMetrics()
    async with (
        running_cluster(tmp_path, 4) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        ledgers = [
            await write_ledger(bk, 3, 2, 2, 30),
            await write_ledger(bk, 3, 3, 2, 30),
            await write_ledger(bk, 3, 2, 2, 20, close=False),  # its writer stays, idle
        ]
        before = {lh.ledger_id: lh.metadata for lh in ledgers}
        lost = sorted(set.intersection(*(set(lh.ensemble) for lh in ledgers)))[0]
        await cluster.stop_bookie(lost)
        urm = UnderReplicationManager(cluster.store)
        for lh in ledgers:
            await urm.mark_under_replicated(lh.ledger_id, [lost])
        worker = ReplicationWorker(bk, urm, CONFIG, metrics, owner="worker-1")
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await wait_for_no_marks(urm)
            # The metric follows the mark's removal: let the worker get there.
            with trio.fail_after(5):
                while sample(metrics, "autorecovery_ledgers_replicated_total") < 3:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        assert await urm.under_replicated() == []
        rotated: dict[str, int] = {}
        for lh in ledgers:
            metadata, _ = await bk.read_metadata(lh.ledger_id)
            assert metadata.is_closed
            assert lost not in metadata.bookies()
            assert await missing_replicas(bk, lh.ledger_id, metadata) == []
            for bookie in received(cluster, before[lh.ledger_id], metadata):
                rotated[bookie] = rotated.get(bookie, 0) + 1
                service = cluster.service(bookie)
                await write_out_table(service)  # a rotation waits for the copies to leave it
                logger = service.bookie.storage.entry_logger
                assert logger.current_log_id(lh.ledger_id) is None
        # The open ledger was recovered by the worker (its writer never closed it).
        open_one, _ = await bk.read_metadata(ledgers[2].ledger_id)
        assert open_one.last_entry_id == 19
        with pytest.raises(LedgerFencedError):
            await ledgers[2].add_entry(b"too late")
        for bookie, n in rotated.items():
            assert await replication_rotations(cluster, bookie) >= n
        assert sample(metrics, "autorecovery_ledgers_replicated_total") == 3
        assert sample(metrics, "autorecovery_ledger_mark_to_replicated_seconds_count") == 3
        assert sample(metrics, "autorecovery_fragments_replicated_total", outcome="ok") >= 3


async def test_an_open_ledgers_writer_that_replaces_the_bookie_is_not_recovered(
    tmp_path: Path,
) -> None:
    async with (
        running_cluster(tmp_path, 4) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 10, close=False)
        lost = lh.ensemble[1]
        await cluster.stop_bookie(lost)
        urm = UnderReplicationManager(cluster.store)
        await urm.mark_under_replicated(lh.ledger_id, [lost])
        worker = ReplicationWorker(bk, urm, CONFIG, AutoRecoveryMetrics(), owner="w")
        assert await worker.step() is Step.WAITING_FOR_CLOSE
        assert await urm.lock_owner(lh.ledger_id) == "w"  # kept for the grace period
        for i in range(10, 16):  # the writer's next adds replace the lost bookie
            await lh.add_entry(payload(lh.ledger_id, i))
        await trio.sleep(CONFIG.open_ledger_rereplication_grace_period)
        assert await worker.release_due() == 1
        assert await urm.lock_owner(lh.ledger_id) is None
        metadata, _ = await bk.read_metadata(lh.ledger_id)
        assert metadata.state is LedgerState.OPEN, "a writer that healed itself is left alone"
        # The earlier, settled segment is copied while the writer goes on.
        assert await worker.step() is Step.REPLICATED
        await lh.add_entry(payload(lh.ledger_id, 16))
        await lh.close()
        metadata, _ = await bk.read_metadata(lh.ledger_id)
        assert lost not in metadata.bookies()
        assert await missing_replicas(bk, lh.ledger_id, metadata) == []


async def test_without_a_spare_bookie_the_mark_stays_and_the_lock_is_released_later(
    tmp_path: Path,
) -> None:
    metrics = AutoRecoveryMetrics()
    async with (
        running_cluster(tmp_path, 3) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 12)
        lost = lh.ensemble[2]
        await cluster.stop_bookie(lost)
        urm = UnderReplicationManager(cluster.store)
        await urm.mark_under_replicated(lh.ledger_id, [lost])
        worker = ReplicationWorker(bk, urm, CONFIG, metrics, owner="w")
        assert await worker.step() is Step.FAILED
        assert await urm.lock_owner(lh.ledger_id) == "w"  # kept: no worker spins on it
        assert await worker.step() is Step.IDLE
        await trio.sleep(
            failed_ledger_backoff(CONFIG.lock_release_of_failed_ledger_grace_period, 0)
        )
        assert await worker.release_due() == 1
        assert await urm.lock_owner(lh.ledger_id) is None
        mark = await urm.get(lh.ledger_id)
        assert mark is not None
        assert mark.replicas == (lost,)
        assert sample(metrics, "autorecovery_ledger_replication_failures_total") == 1
        # A new bookie: the next attempt heals it.
        await cluster.start_bookie()
        assert await worker.replicate_once()
        assert await urm.get(lh.ledger_id) is None
        metadata, _ = await bk.read_metadata(lh.ledger_id)
        assert await missing_replicas(bk, lh.ledger_id, metadata) == []


async def test_a_worker_cancelled_mid_copy_leaves_it_to_the_next(tmp_path: Path) -> None:
    connector = FaultyConnector()
    async with (
        running_cluster(tmp_path, 4) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 40)
        lost = lh.ensemble[0]
        (spare,) = set(cluster.running_ids()) - set(lh.ensemble)
        await cluster.stop_bookie(lost)
        urm = UnderReplicationManager(cluster.store)
        await urm.mark_under_replicated(lh.ledger_id, [lost])
        before = await bk.read_metadata(lh.ledger_id)

        def hold_late_copies(bookie: str, request: pb.Request) -> str | None:
            if bookie == spare and request.HasField("addRequest"):
                return "hold" if request.addRequest.entryId >= 12 else None
            return None

        connector.add_rule(hold_late_copies)
        async with BookKeeper(
            cluster.store, bookie_connector=connector, config=CLIENT_CONFIG
        ) as bk_a:
            first = ReplicationWorker(bk_a, urm, CONFIG, AutoRecoveryMetrics(), owner="a")
            async with trio.open_nursery() as nursery:
                await nursery.start(first.run)
                with trio.fail_after(10):
                    while not connector.held:  # noqa: ASYNC110 (filled by a callback)
                        await trio.sleep(0.01)
                assert await urm.lock_owner(lh.ledger_id) == "a"
                nursery.cancel_scope.cancel()
            connector.drop_held()
        # Part of the copy reached the spare; nothing was swapped; the lock is free.
        assert await bk.read_metadata(lh.ledger_id) == before
        assert await urm.lock_owner(lh.ledger_id) is None
        second = ReplicationWorker(bk, urm, CONFIG, AutoRecoveryMetrics(), owner="b")
        assert await second.replicate_once()
        metadata, _ = await bk.read_metadata(lh.ledger_id)
        assert metadata.ensembles[0][0] == spare
        assert await missing_replicas(bk, lh.ledger_id, metadata) == []


class ReleaseFailsOnce(UnderReplicationManager):
    """The store is unreachable for the first release (a ZooKeeper connection loss)."""

    failures = 1

    async def release(self, lock: LedgerLock) -> None:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailableError("connection lost")
        await super().release(lock)


async def test_a_lock_the_store_could_not_release_is_released_on_a_later_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by a live fault run: the store went away mid-copy and so did the release; the
    # client reconnected within its session, so the lock node stayed and the ledger's mark
    # was never taken again.
    async with (
        running_cluster(tmp_path, 4) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 10)
        lost = lh.ensemble[0]
        await cluster.stop_bookie(lost)
        urm = ReleaseFailsOnce(cluster.store)
        await urm.mark_under_replicated(lh.ledger_id, [lost])
        worker = ReplicationWorker(bk, urm, CONFIG, AutoRecoveryMetrics(), owner="a")

        async def store_gone(lock: LedgerLock) -> Step:
            raise StoreUnavailableError("connection lost")

        with monkeypatch.context() as patch:
            patch.setattr(worker, "_replicate", store_gone)
            with pytest.raises(StoreUnavailableError):
                await worker.step()
        assert await urm.lock_owner(lh.ledger_id) == "a"  # its release failed too
        await trio.sleep(CONFIG.rw_rereplicate_backoff)
        assert await worker.release_due() == 1
        assert await urm.lock_owner(lh.ledger_id) is None
        assert await worker.replicate_once()
        assert await urm.count() == 0


async def test_a_deleted_ledgers_mark_is_removed(tmp_path: Path) -> None:
    async with (
        running_cluster(tmp_path, 3) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 3)
        urm = UnderReplicationManager(cluster.store)
        await urm.mark_under_replicated(lh.ledger_id, [lh.ensemble[0]])
        await bk.delete_ledger(lh.ledger_id)
        worker = ReplicationWorker(bk, urm, CONFIG, AutoRecoveryMetrics())
        assert await worker.replicate_once()
        assert await urm.count() == 0
        assert await urm.lock_owner(lh.ledger_id) is None


async def test_nothing_is_taken_while_replication_is_disabled(tmp_path: Path) -> None:
    async with (
        running_cluster(tmp_path, 4) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 3)
        await cluster.stop_bookie(lh.ensemble[0])
        urm = UnderReplicationManager(cluster.store)
        await urm.mark_under_replicated(lh.ledger_id, [lh.ensemble[0]])
        await urm.disable()
        worker = ReplicationWorker(bk, urm, CONFIG, AutoRecoveryMetrics(), owner="w")
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await trio.sleep(0.3)
            assert await urm.lock_owner(lh.ledger_id) is None
            assert await urm.count() == 1
            await urm.enable()
            await wait_for_no_marks(urm)
            nursery.cancel_scope.cancel()


async def test_a_registered_bookie_missing_entries_is_replaced(tmp_path: Path) -> None:
    """The auditor's check of all ledgers marks a ledger naming a bookie that is up but lacks
    entries (here: never given them); the worker finds it so and replaces it."""
    async with (
        running_cluster(tmp_path, 3) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        a, b, c = cluster.running_ids()
        metadata = LedgerMetadata(
            2, 2, 2, {0: (a, b)}, LedgerState.CLOSED, 4, 0, MetaDigestType.CRC32C, PASSWORD
        )
        ledger_id = await bk.ledger_manager.create(metadata)
        digest = DigestManager(ledger_id, PASSWORD, DigestType.CRC32C)
        length = 0
        for i in range(5):
            length += len(payload(ledger_id, i))
            body = digest.package(i, i - 1, length, payload(ledger_id, i))
            response = await bk.pool.call(a, add_request(ledger_id, i, digest.master_key, body))
            assert response.status == 0
        urm = UnderReplicationManager(cluster.store)
        await urm.mark_under_replicated(ledger_id, [b])
        worker = ReplicationWorker(bk, urm, CONFIG, AutoRecoveryMetrics())
        assert await worker.replicate_once()
        healed, _ = await bk.read_metadata(ledger_id)
        assert healed.ensembles[0] == (a, c)
        assert await missing_replicas(bk, ledger_id, healed) == []


async def test_an_open_ledger_without_a_spare_stays_in_recovery_until_a_bookie_comes(
    tmp_path: Path,
) -> None:
    """Upstream's recorded timeline (vectors zk/05, 06): with no spare bookie the worker's
    recovery of an open E=3 Qw=3 ledger leaves it IN_RECOVERY and the mark stays; a new bookie
    lets the next attempt close it and copy the lost bookie's share."""
    async with (
        running_cluster(tmp_path, 3) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, 3, 3, 2, 10, close=False)
        lost = lh.ensemble[1]
        await cluster.stop_bookie(lost)
        urm = UnderReplicationManager(cluster.store)
        await urm.mark_under_replicated(lh.ledger_id, [lost])
        worker = ReplicationWorker(bk, urm, CONFIG, AutoRecoveryMetrics(), owner="w")
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            with trio.fail_after(10):
                while (await bk.read_metadata(lh.ledger_id))[0].state is LedgerState.OPEN:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            assert (await bk.read_metadata(lh.ledger_id))[0].state is LedgerState.IN_RECOVERY
            assert await urm.count() == 1
            new = await cluster.start_bookie()
            await wait_for_no_marks(urm)
            nursery.cancel_scope.cancel()
        metadata, _ = await bk.read_metadata(lh.ledger_id)
        assert metadata.is_closed
        assert metadata.last_entry_id == 9
        assert all(segment[1] == new for segment in metadata.ensembles.values())
        assert await missing_replicas(bk, lh.ledger_id, metadata) == []
