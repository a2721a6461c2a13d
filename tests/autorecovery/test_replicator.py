"""The fragment replicator on real in-process bookies: what a lost bookie held is copied from
the surviving replicas to a new bookie, the bookie is swapped in the metadata only after the
copy, never twice, and the receiving bookie is told with a WriteClose (reason replication)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.autorecovery.config import AutoRecoveryConfig
from bookiesim.autorecovery.fragments import ledger_fragments
from bookiesim.autorecovery.metrics import AutoRecoveryMetrics
from bookiesim.autorecovery.replicator import FragmentReplicator
from bookiesim.client import BKError, BookKeeper, NotEnoughBookiesError
from bookiesim.cluster.in_process import FaultyConnector, running_cluster
from bookiesim.metadata.ledgers import LedgerState
from tests.autorecovery.replication_helpers import (
    CLIENT_CONFIG,
    missing_replicas,
    payload,
    replication_rotations,
    write_ledger,
)

if TYPE_CHECKING:
    from pathlib import Path

    from bookiesim.proto import BookkeeperProtocol_pb2 as pb

CONFIG = AutoRecoveryConfig(rereplication_entry_batch_size=4)


def sample(metrics: AutoRecoveryMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    assert value is not None, name
    return value


@pytest.mark.parametrize(("e", "qw", "qa"), [(3, 2, 2), (3, 3, 2), (2, 2, 1)])
async def test_a_lost_bookies_share_is_copied_swapped_and_write_closed(
    tmp_path: Path, e: int, qw: int, qa: int
) -> None:
    metrics = AutoRecoveryMetrics()
    async with (
        running_cluster(tmp_path, 4) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, e, qw, qa, 25)
        lost = lh.metadata.ensembles[0][1]
        await cluster.stop_bookie(lost)
        replicator = FragmentReplicator(bk, CONFIG, metrics)
        result = await replicator.replicate_ledger(lh.ledger_id, {lost})
        assert result.healed
        (copy,) = result.copies
        assert copy.swapped
        assert copy.lost == lost
        assert copy.write_close == "ok"
        # Position 1 stores Qw of every E entries of 25.
        held = [x for x in range(25) if (1 - x) % e < qw]
        expected = len(held)
        assert copy.entries == expected
        assert copy.bytes == sum(len(payload(lh.ledger_id, x)) for x in held)
        metadata, _ = await bk.read_metadata(lh.ledger_id)
        assert metadata == result.metadata
        assert lost not in metadata.bookies()
        assert metadata.ensembles[0][1] == copy.replacement  # the same position
        assert await missing_replicas(bk, lh.ledger_id, metadata) == []
        assert await replication_rotations(cluster, copy.replacement) == 1
        assert sample(metrics, "autorecovery_fragments_replicated_total", outcome="ok") == 1
        assert sample(metrics, "autorecovery_replicated_entries_total") == expected
        assert (
            sample(metrics, "autorecovery_write_close_after_replication_total", outcome="ok") == 1
        )
        # Readable through the client, as any reader would.
        reader = await bk.open_ledger(lh.ledger_id)
        entries = await reader.read_entries(0, 24)
        assert [x.payload for x in entries] == [payload(lh.ledger_id, i) for i in range(25)]


async def test_an_empty_fragment_is_only_swapped(tmp_path: Path) -> None:
    async with (
        running_cluster(tmp_path, 4) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 0)
        lost = lh.metadata.ensembles[0][0]
        await cluster.stop_bookie(lost)
        result = await FragmentReplicator(bk, CONFIG).replicate_ledger(lh.ledger_id, {lost})
        (copy,) = result.copies
        assert (copy.entries, copy.swapped, copy.write_close) == (0, True, None)
        assert lost not in result.metadata.bookies()
        assert await replication_rotations(cluster, copy.replacement) == 0


async def test_a_bookie_is_never_swapped_twice(tmp_path: Path) -> None:
    async with (
        running_cluster(tmp_path, 5) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 5)
        lost = lh.metadata.ensembles[0][2]
        spare1, spare2 = sorted(set(cluster.running_ids()) - set(lh.metadata.ensembles[0]))
        replicator = FragmentReplicator(bk, CONFIG)
        swapped, first = await replicator.replace_bookie(lh.ledger_id, 0, lost, spare1)
        assert swapped
        assert first.ensembles[0][2] == spare1
        # A second worker that copied the same fragment to another bookie finds it done.
        swapped, second = await replicator.replace_bookie(lh.ledger_id, 0, lost, spare2)
        assert not swapped
        assert second == first
        # And a replacement already in the segment is refused, not duplicated.
        with pytest.raises(BKError, match="joined the segment"):
            await replicator.replace_bookie(lh.ledger_id, 0, spare1, first.ensembles[0][0])


async def test_without_a_spare_bookie_nothing_changes(tmp_path: Path) -> None:
    metrics = AutoRecoveryMetrics()
    async with (
        running_cluster(tmp_path, 4) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 6)
        lost = lh.metadata.ensembles[0][0]
        spare = next(b for b in cluster.running_ids() if b not in lh.metadata.ensembles[0])
        await cluster.stop_bookie(spare)
        await cluster.stop_bookie(lost)
        before, version = await bk.read_metadata(lh.ledger_id)
        replicator = FragmentReplicator(bk, CONFIG, metrics)
        (fragment,) = ledger_fragments(before)
        with pytest.raises(NotEnoughBookiesError, match="no bookie to replace"):
            await replicator.replicate(lh.ledger_id, before, fragment, lost)
        result = await replicator.replicate_ledger(lh.ledger_id, {lost})
        assert not result.healed
        assert isinstance(result.failures[0][2], NotEnoughBookiesError)
        assert await bk.read_metadata(lh.ledger_id) == (before, version)
        assert sample(metrics, "autorecovery_fragments_replicated_total", outcome="failed") == 2


async def test_a_failed_copy_leaves_the_metadata_alone(tmp_path: Path) -> None:
    """The replacement refuses the copies (here: its adds are dropped): the copy fails, the
    lost bookie stays in the metadata for a later attempt."""
    connector = FaultyConnector()
    async with (
        running_cluster(tmp_path, 4) as cluster,
        BookKeeper(cluster.store, bookie_connector=connector, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 12)
        lost = lh.metadata.ensembles[0][0]
        (spare,) = set(cluster.running_ids()) - set(lh.metadata.ensembles[0])
        await cluster.stop_bookie(lost)

        def drop_adds_to_spare(bookie: str, request: pb.Request) -> str | None:
            return "drop" if bookie == spare and request.HasField("addRequest") else None

        connector.add_rule(drop_adds_to_spare)
        before = await bk.read_metadata(lh.ledger_id)
        result = await FragmentReplicator(bk, CONFIG).replicate_ledger(lh.ledger_id, {lost})
        assert [(f.first_entry_id, b) for f, b, _ in result.failures] == [(0, lost)]
        assert await bk.read_metadata(lh.ledger_id) == before
        # Once the bookie takes writes again, a second attempt completes.
        connector.clear_rules()
        result = await FragmentReplicator(bk, CONFIG).replicate_ledger(lh.ledger_id, {lost})
        assert result.healed
        assert await missing_replicas(bk, lh.ledger_id, result.metadata) == []


async def test_write_close_is_skipped_for_a_bookie_that_does_not_advertise_it(
    tmp_path: Path,
) -> None:
    metrics = AutoRecoveryMetrics()
    async with (
        running_cluster(tmp_path, 3) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 6)
        plain = await cluster.start_bookie(features=())
        lost = lh.metadata.ensembles[0][0]
        await cluster.stop_bookie(lost)
        result = await FragmentReplicator(bk, CONFIG, metrics).replicate_ledger(
            lh.ledger_id, {lost}
        )
        (copy,) = result.copies
        assert (copy.replacement, copy.write_close) == (plain, "skipped")
        assert await replication_rotations(cluster, plain) == 0
        assert (
            sample(metrics, "autorecovery_write_close_after_replication_total", outcome="skipped")
            == 1
        )


async def test_an_open_ledgers_settled_fragment_is_replicated_and_its_writer_goes_on(
    tmp_path: Path,
) -> None:
    """The writer replaced a lost bookie (ensemble change); the earlier segment still names
    it. The replicator heals that segment while the writer writes, and the writer's close
    keeps the swap. The receiving bookie is in the writer's current ensemble: its log is the
    writer's, so no WriteClose is sent for the copy."""
    async with (
        running_cluster(tmp_path, 4) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 10, close=False)
        lost = lh.ensemble[0]
        await cluster.stop_bookie(lost)
        for i in range(10, 20):
            await lh.add_entry(payload(lh.ledger_id, i))
        assert len(lh.metadata.ensembles) == 2
        result = await FragmentReplicator(bk, CONFIG).replicate_ledger(lh.ledger_id, {lost})
        assert result.healed
        (copy,) = result.copies
        assert copy.fragment.first_entry_id == 0
        assert copy.write_close is None
        assert copy.replacement in result.metadata.last_ensemble[1]
        for i in range(20, 30):
            await lh.add_entry(payload(lh.ledger_id, i))
        await lh.close()
        metadata, _ = await bk.read_metadata(lh.ledger_id)
        assert metadata.is_closed
        assert metadata.last_entry_id == 29
        assert lost not in metadata.bookies()
        assert await missing_replicas(bk, lh.ledger_id, metadata) == []


async def test_write_close_after_replication_can_be_turned_off(tmp_path: Path) -> None:
    metrics = AutoRecoveryMetrics()
    config = CONFIG.replace(write_close_after_replication=False)
    async with (
        running_cluster(tmp_path, 4) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 6)
        lost = lh.ensemble[0]
        await cluster.stop_bookie(lost)
        result = await FragmentReplicator(bk, config, metrics).replicate_ledger(
            lh.ledger_id, {lost}
        )
        (copy,) = result.copies
        assert copy.write_close == "skipped"
        assert await replication_rotations(cluster, copy.replacement) == 0
        assert (
            sample(metrics, "autorecovery_write_close_after_replication_total", outcome="skipped")
            == 1
        )


@pytest.mark.parametrize("plain_adds", [False, True])
async def test_copies_are_recovery_adds_unless_the_bug_switch_says_otherwise(
    tmp_path: Path, plain_adds: bool
) -> None:
    connector = FaultyConnector()
    config = CONFIG.replace(unsafe_replication_adds_without_recovery_flag=plain_adds)
    async with (
        running_cluster(tmp_path, 4) as cluster,
        BookKeeper(cluster.store, bookie_connector=connector, config=CLIENT_CONFIG) as bk,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 6)
        lost = lh.ensemble[0]
        (spare,) = set(cluster.running_ids()) - set(lh.ensemble)
        await cluster.stop_bookie(lost)
        connector.log.clear()
        result = await FragmentReplicator(bk, config).replicate_ledger(lh.ledger_id, {lost})
        assert result.healed
        copies = [r for r in connector.log if r.bookie == spare and r.operation == "ADD_ENTRY"]
        assert copies
        assert {r.recovery_add for r in copies} == {not plain_adds}


async def test_the_swap_before_copy_bug_switch_names_a_bookie_without_the_entries(
    tmp_path: Path,
) -> None:
    """What the simulator's invariant must catch: with the switch, a copy that fails leaves
    the metadata naming a bookie that lacks entries."""
    connector = FaultyConnector()
    config = CONFIG.replace(unsafe_swap_before_copy=True)
    async with (
        running_cluster(tmp_path, 4) as cluster,
        BookKeeper(
            cluster.store,
            bookie_connector=connector,
            config=replace(CLIENT_CONFIG, request_timeout=0.5, connect_timeout=0.5),
        ) as bk,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 6)
        lost = lh.ensemble[0]
        (spare,) = set(cluster.running_ids()) - set(lh.ensemble)
        await cluster.stop_bookie(lost)

        def drop_adds_to_spare(bookie: str, request: pb.Request) -> str | None:
            return "drop" if bookie == spare and request.HasField("addRequest") else None

        connector.add_rule(drop_adds_to_spare)
        result = await FragmentReplicator(bk, config).replicate_ledger(lh.ledger_id, {lost})
        assert result.failures
        metadata, _ = await bk.read_metadata(lh.ledger_id)
        assert metadata.ensembles[0][0] == spare
        connector.clear_rules()
        assert {b for _, b in await missing_replicas(bk, lh.ledger_id, metadata)} == {spare}


async def test_a_recovery_under_way_keeps_a_swap_made_meanwhile(tmp_path: Path) -> None:
    """A worker heals a settled segment of a ledger that another client is recovering; the
    recovery's close writes only the segments it changed, so the swap stands."""
    connector = FaultyConnector()
    async with (
        running_cluster(tmp_path, 5) as cluster,
        BookKeeper(cluster.store, config=CLIENT_CONFIG) as bk,
        BookKeeper(cluster.store, bookie_connector=connector, config=CLIENT_CONFIG) as bk2,
    ):
        lh = await write_ledger(bk, 3, 2, 2, 10, close=False)
        lost = lh.ensemble[1]
        await cluster.stop_bookie(lost)
        for i in range(10, 15):
            await lh.add_entry(payload(lh.ledger_id, i))
        assert lost not in lh.ensemble

        def hold_recovery_adds(bookie: str, request: pb.Request) -> str | None:
            add = request.addRequest if request.HasField("addRequest") else None
            return "hold" if add is not None and add.flag == add.RECOVERY_ADD else None

        connector.add_rule(hold_recovery_adds)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(bk2.open_ledger, lh.ledger_id, recovery=True))
            with trio.fail_after(5):
                while not connector.held:  # noqa: ASYNC110 (filled by a callback)
                    await trio.sleep(0.01)
            result = await FragmentReplicator(bk, CONFIG).replicate_ledger(lh.ledger_id, {lost})
            assert result.healed
            assert result.metadata.state is LedgerState.IN_RECOVERY
            connector.clear_rules()
            await connector.release()
        metadata, _ = await bk.read_metadata(lh.ledger_id)
        assert metadata.is_closed
        assert lost not in metadata.bookies()
        assert await missing_replicas(bk, lh.ledger_id, metadata) == []
