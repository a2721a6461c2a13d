"""Compare-and-set on ledger metadata: conflicts are detected, re-read and re-decided.

Why: every metadata change the client makes (ensemble change, close, recovery's
IN_RECOVERY and close) races with other clients. A lost race must never overwrite the
winner: the loser re-reads and decides again — retry if the change still makes sense, give
up (fenced, closed) if someone took the ledger over (invariants A10, A12, §7.1).

The conflicts are made deterministic by a store wrapper that, just before the client's
conditional ``set``, lets "another client" update the same node.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import pytest

from bookiesim.client import BookKeeper, LedgerFencedError
from bookiesim.metadata.forwarding import ForwardingStore
from bookiesim.metadata.ledgers import LedgerManager, LedgerMetadata, LedgerState
from tests.client.conftest import TEST_CONFIG
from tests.client.helpers import payload

if TYPE_CHECKING:
    from bookiesim.cluster.in_process import LocalCluster
    from bookiesim.metadata.store import MetadataStore

Interference = Callable[[LedgerMetadata], LedgerMetadata]


class InterferingStore(ForwardingStore):
    """A :class:`MetadataStore` that runs ``interfere`` on a ledger node right before the
    next ``armed`` conditional sets of it, as a concurrent client would."""

    def __init__(self, inner: MetadataStore) -> None:
        super().__init__(inner)
        self.armed = 0
        self.interfere: Interference = lambda m: m
        self.interfered = 0

    async def set(self, path: str, value: bytes, expected_version: int) -> int:
        if self.armed and "/L" in path:
            self.armed -= 1
            node = await self.inner.get(path)
            assert node is not None
            other = self.interfere(LedgerMetadata.from_bytes(node.value))
            await self.inner.set(path, other.to_bytes(), node.version)
            self.interfered += 1
        return await self.inner.set(path, value, expected_version)


async def _writer(
    cluster: LocalCluster, body: Callable[[BookKeeper, InterferingStore], Awaitable[None]]
) -> None:
    store = InterferingStore(cluster.store)
    async with BookKeeper(store, config=TEST_CONFIG) as bk:
        await body(bk, store)


async def test_close_retries_after_a_concurrent_update(cluster: LocalCluster) -> None:
    async def body(bk: BookKeeper, store: InterferingStore) -> None:
        lh = await bk.create_ledger(3, 2, 2)
        for i in range(5):
            await lh.add_entry(payload(lh.ledger_id, i))
        store.armed = 1  # a no-op update by someone else bumps the version
        await lh.close()
        assert store.interfered == 1
        assert bk.stats.metadata_conflicts == 1
        metadata, version = await bk.read_metadata(lh.ledger_id)
        assert (metadata.state, metadata.last_entry_id) == (LedgerState.CLOSED, 4)
        assert version == 2  # 0 create, 1 the other client, 2 our close (the retry)

    await _writer(cluster, body)


async def test_close_that_loses_to_a_recovery_reports_fenced(cluster: LocalCluster) -> None:
    async def body(bk: BookKeeper, store: InterferingStore) -> None:
        lh = await bk.create_ledger(3, 2, 2)
        await lh.add_entry(b"x")
        store.interfere = lambda m: m.in_recovery()
        store.armed = 1
        with pytest.raises(LedgerFencedError, match="a recovery is in progress"):
            await lh.close()
        metadata, _ = await bk.read_metadata(lh.ledger_id)
        assert metadata.state is LedgerState.IN_RECOVERY  # the winner's update stands

    await _writer(cluster, body)


async def test_close_that_loses_to_another_close_adopts_it(cluster: LocalCluster) -> None:
    async def body(bk: BookKeeper, store: InterferingStore) -> None:
        lh = await bk.create_ledger(3, 2, 2)
        for _ in range(3):
            await lh.add_entry(b"abc")
        store.interfere = lambda m: m.closed(2, 9)
        store.armed = 1
        await lh.close()
        assert (lh.metadata.last_entry_id, lh.metadata.length) == (2, 9)
        assert bk.stats.write_close_sent == 0  # not our close: no WriteClose from us

    await _writer(cluster, body)


async def test_ensemble_change_retries_after_a_concurrent_update(cluster: LocalCluster) -> None:
    async def body(bk: BookKeeper, store: InterferingStore) -> None:
        lh = await bk.create_ledger(3, 2, 2)
        for i in range(5):
            await lh.add_entry(payload(lh.ledger_id, i))
        store.armed = 2
        await cluster.stop_bookie(lh.ensemble[0])
        for i in range(5, 15):
            await lh.add_entry(payload(lh.ledger_id, i))
        assert bk.stats.ensemble_changes == 1
        assert bk.stats.metadata_conflicts == 2
        stored, _ = await bk.read_metadata(lh.ledger_id)
        assert stored == lh.metadata
        assert sorted(stored.ensembles) == [0, 5]

    await _writer(cluster, body)


async def test_recovery_retries_its_updates(cluster: LocalCluster) -> None:
    async with BookKeeper(cluster.store, config=TEST_CONFIG) as writer:
        lh = await writer.create_ledger(3, 2, 2)
        for i in range(5):
            await lh.add_entry(payload(lh.ledger_id, i))

        async def body(bk: BookKeeper, store: InterferingStore) -> None:
            store.armed = 3  # IN_RECOVERY: 1 conflict; close: 2 conflicts
            handle = await bk.open_ledger(lh.ledger_id, recovery=True)
            assert handle.metadata.last_entry_id == 4
            assert bk.stats.metadata_conflicts == 3

        await _writer(cluster, body)


async def test_a_second_recoverer_writes_nothing(cluster: LocalCluster, bk: BookKeeper) -> None:
    """Invariants §7.1: starting recovery on a ledger already IN_RECOVERY does not bump the
    version; closing one already CLOSED does not either."""
    lh = await bk.create_ledger(3, 2, 2)
    await lh.add_entry(b"x")
    manager = LedgerManager(cluster.store)
    await manager.update_with_retry(lh.ledger_id, lambda m: m.in_recovery())
    _, version = await manager.read(lh.ledger_id)
    handle = await bk.open_ledger(lh.ledger_id, recovery=True)
    assert handle.version == version + 1  # only the close
    assert bk.stats.metadata_conflicts == 0
