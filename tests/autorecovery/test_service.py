"""The auto-recovery service: the auditor election and a replication worker on one session
and one client; embedded in a bookie (its id, registry, routes) or alone (the id its
configuration gives); the admin calls the routes and the shell use; and, end to end, a bookie
killed in a real cluster: its ledgers marked, re-replicated by the worker, the marks gone and
the heal time observed."""

from __future__ import annotations

import json
import urllib.request
from typing import TYPE_CHECKING, Any

import pytest
import trio
from prometheus_client import CollectorRegistry

from bookiesim.autorecovery import service as service_module
from bookiesim.autorecovery.admin import AdminError
from bookiesim.autorecovery.config import AutoRecoveryConfig
from bookiesim.autorecovery.service import AutoRecoveryCompanion, AutoRecoveryService
from bookiesim.bookie.http_admin import AdminRouter
from bookiesim.bookie.process import BookieService
from bookiesim.client import BookKeeper
from bookiesim.cluster.in_process import running_cluster
from bookiesim.cluster.testing import bookie_config
from bookiesim.metadata.factory import open_store as open_real_store
from bookiesim.metadata.memory_store import MemoryStore
from bookiesim.metadata.underreplication import UnderReplicationManager
from tests.autorecovery.auditing import (
    QUIET,
    A,
    B,
    C,
    make_ledger,
    register,
    unregister,
    wait_until,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from contextlib import AbstractAsyncContextManager
    from pathlib import Path

FAST = QUIET.replace(
    rw_rereplicate_backoff=0.1,
    lock_release_of_failed_ledger_grace_period=0.5,
    open_ledger_rereplication_grace_period=0.5,
)


class Started:
    """A service running in a test; ``scope`` stops it."""

    def __init__(self, service: AutoRecoveryService) -> None:
        self.service = service
        self.scope = trio.CancelScope()

    def value(self, name: str, **labels: str) -> float:
        got = self.service.metrics.registry.get_sample_value(name, labels)
        assert got is not None, name
        return got

    def is_auditor(self) -> bool:
        return self.service.is_auditor


async def _start(nursery: trio.Nursery, service: AutoRecoveryService) -> Started:
    started = Started(service)

    async def run(*, task_status: trio.TaskStatus[None]) -> None:
        with started.scope:
            await service.run(task_status=task_status)

    await nursery.start(run)
    return started


async def _elected(started: Started) -> None:
    """Once elected and its first bookie check (at the start of a term) ran."""

    async def check() -> bool:
        return (
            started.is_auditor()
            and started.value("autorecovery_audits_total", kind="bookie_check") >= 1
        )

    await wait_until(check, what=f"{started.service.bookie_id} elected")


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    s = MemoryStore()
    yield s
    await s.close()


async def test_admin_calls(store: MemoryStore, autojump_clock: trio.testing.MockClock) -> None:
    await register(store, A, B, C)
    ledger = await make_ledger(store, {0: (A, B)})
    registry = CollectorRegistry()
    service = AutoRecoveryService(
        store, QUIET.replace(lost_bookie_recovery_delay=600), bookie_id=C, registry=registry
    )
    with pytest.raises(RuntimeError, match=r"not running: AutoRecoveryService\.run starts it"):
        await service.auditor_id()
    async with trio.open_nursery() as nursery:
        started = await _start(nursery, service)
        await _elected(started)
        assert service.metrics.registry is registry
        assert await service.auditor_id() == C
        assert await service.get_lost_bookie_recovery_delay() == 600
        assert await service.is_enabled()
        await unregister(store, A)
        await trio.sleep(10)
        assert await service.under_replicated() == []
        assert await service.trigger_audit() == 600

        async def marked() -> bool:
            return [m.ledger_id for m in await service.under_replicated()] == [ledger]

        await wait_until(marked, within=5, what="triggeraudit marks")
        assert (await service.under_replicated())[0].replicas == (A,)
        await service.set_lost_bookie_recovery_delay(5)
        assert await service.get_lost_bookie_recovery_delay() == 5
        with pytest.raises(AdminError, match="must be 0 or more seconds"):
            await service.set_lost_bookie_recovery_delay(-1)
        assert await service.disable()
        assert not await service.disable()
        assert not await service.is_enabled()
        with pytest.raises(AdminError, match="auto-recovery is disabled"):
            await service.trigger_audit()
        assert await service.enable()
        assert await service.is_enabled()
        assert registry.get_sample_value("autorecovery_is_auditor") == 1
        nursery.cancel_scope.cancel()
    assert not service.is_auditor


async def test_two_services_one_auditor_and_failover(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    await register(store, A, B, C)
    async with trio.open_nursery() as nursery:
        first = await _start(nursery, AutoRecoveryService(store, FAST, bookie_id=A))
        second = await _start(nursery, AutoRecoveryService(store, FAST, bookie_id=B))
        await _elected(first)
        await trio.sleep(5)
        assert not second.is_auditor()
        assert await second.service.auditor_id() == A
        first.scope.cancel()
        await _elected(second)
        assert await second.service.auditor_id() == B
        assert second.value("autorecovery_is_auditor") == 1
        nursery.cancel_scope.cancel()


async def test_standalone_from_a_bookie_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    cfg = bookie_config(tmp_path / "ar", metadata_service_uri=uri).replace(
        bookie_port=3181, auditor_periodic_check_interval=0, zk_timeout=4000
    )
    opened: list[float] = []
    real_open = open_real_store

    def open_store(uri: str, *, session_timeout: float) -> AbstractAsyncContextManager[Any]:
        opened.append(session_timeout)
        return real_open(uri, session_timeout=session_timeout)

    monkeypatch.setattr(service_module, "open_store", open_store)
    service = AutoRecoveryService.from_bookie_config(cfg)
    assert service.bookie_id == "127.0.0.1:3181"
    assert service.config == AutoRecoveryConfig.from_bookie_config(cfg)
    router = AdminRouter()
    service.add_routes(router)
    async with trio.open_nursery() as nursery:
        started = await _start(nursery, service)
        await _elected(started)
        assert router.allowed("/api/v1/autorecovery/who_is_auditor") == ["GET", "HEAD"]
        body, _ = service.metrics.render()
        assert b"autorecovery_is_auditor 1.0" in body
        nursery.cancel_scope.cancel()
    assert opened == [4.0]  # zkTimeout is the session's, as for AutoRecoveryMain
    with pytest.raises(ValueError, match="set metadataServiceUri"):
        AutoRecoveryService.from_bookie_config(bookie_config(tmp_path / "none"))


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
        return body


async def test_embedded_in_a_bookie_process(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    cfg = bookie_config(tmp_path / "b", metadata_service_uri=uri).replace(
        auto_recovery_daemon_enabled=True, auditor_periodic_check_interval=0
    )
    companion = AutoRecoveryCompanion()
    bookie = BookieService(cfg, [companion])
    async with trio.open_nursery() as nursery:
        address = await nursery.start(bookie.run)
        service = companion.service
        assert service is not None
        assert service.bookie_id == address.bookie_id
        await _elected(Started(service))
        base = f"http://127.0.0.1:{address.http_port}"
        who = await trio.to_thread.run_sync(_get, f"{base}/api/v1/autorecovery/who_is_auditor")
        assert address.bookie_id in who.decode()
        metrics = (await trio.to_thread.run_sync(_get, f"{base}/metrics")).decode()
        assert "autorecovery_is_auditor 1.0" in metrics
        assert "bookie_server_status" in metrics
        status = await trio.to_thread.run_sync(_get, f"{base}/api/v1/autorecovery/status")
        assert json.loads(status) == {"enabled": True}
        nursery.cancel_scope.cancel()
    assert companion.service is None


async def _ledgers(bk: BookKeeper, n: int, entries: int) -> dict[int, list[bytes]]:
    out = {}
    for i in range(n):
        lh = await bk.create_ledger(3, 2, 2)
        payloads = [b"ledger %d entry %d" % (i, e) for e in range(entries)]
        for payload in payloads:
            await lh.add_entry(payload)
        await lh.close()
        out[lh.ledger_id] = payloads
    return out


async def test_a_killed_bookie_heals(tmp_path: Path) -> None:
    """Kill one of four bookies: its ledgers are marked, the worker copies their fragments
    to the others and swaps them in, the marks go, the heal time is observed, and every
    entry reads back from the ensembles the metadata now names."""
    async with running_cluster(tmp_path, 4) as cluster, BookKeeper(cluster.store) as bk:
        written = await _ledgers(bk, 6, 12)
        victim = cluster.running_ids()[0]
        on_victim = {lid for lid in written if victim in (await bk.read_metadata(lid))[0].bookies()}
        assert on_victim
        async with trio.open_nursery() as nursery:
            others = [b for b in cluster.running_ids() if b != victim]
            services = [
                await _start(nursery, AutoRecoveryService(cluster.store, FAST, bookie_id=b))
                for b in others[:2]
            ]
            await _elected(services[0])
            urm = UnderReplicationManager(cluster.store)
            await cluster.stop_bookie(victim)

            async def healed() -> bool:
                return services[0].value("autorecovery_loss_heal_duration_seconds_count") == 1

            await wait_until(healed, within=60, what="the loss healed")
            assert await urm.under_replicated() == []
            total = services[0].value("autorecovery_ledgers_marked_total", reason="lost_bookie")
            assert total == len(on_victim)

            async def replicated() -> float:
                return sum(s.value("autorecovery_ledgers_replicated_total") for s in services)

            # A worker counts a ledger once its mark is gone, and the auditor may see the last
            # mark go (the heal) a scheduling step before that worker resumes to count it.
            async def all_counted() -> bool:
                return await replicated() >= len(on_victim)

            await wait_until(all_counted, within=5, what="every replication counted")
            assert await replicated() == len(on_victim)
            assert services[0].value("autorecovery_under_replicated_ledgers") == 0
            nursery.cancel_scope.cancel()
        for lid, payloads in written.items():
            md, _ = await bk.read_metadata(lid)
            assert victim not in md.bookies()
            reader = await bk.open_ledger(lid)
            entries = await reader.read_entries(0, len(payloads) - 1)
            assert [e.payload for e in entries] == payloads
