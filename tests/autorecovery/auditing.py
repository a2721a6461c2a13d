"""Helpers of the auditor and service tests: bookie registrations and ledger metadata made by
hand in a store (no bookie processes), a running auditor, and waiting for a condition."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from bookiesim.autorecovery.auditor import Auditor
from bookiesim.autorecovery.config import AutoRecoveryConfig
from bookiesim.autorecovery.metrics import AutoRecoveryMetrics
from bookiesim.client import BookKeeper
from bookiesim.metadata.ledgers import LedgerManager, LedgerMetadata, LedgerState
from bookiesim.metadata.registration import available_path, readonly_path
from bookiesim.metadata.store import join_path
from bookiesim.metadata.underreplication import UnderReplicationManager

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence

    from bookiesim.metadata.store import MetadataStore

A, B, C, D, E = (f"10.0.0.{i}:3181" for i in range(1, 6))

# Nothing periodic unless a test asks: the bookie check runs once at start.
QUIET = AutoRecoveryConfig(
    auditor_periodic_check_interval=0, auditor_periodic_bookie_check_interval=0
)


def _registration(store: MetadataStore, bookie_id: str, read_only: bool) -> str:
    base = readonly_path if read_only else available_path
    return join_path(base(store.ledgers_root), bookie_id)


async def register(store: MetadataStore, *bookies: str, read_only: bool = False) -> None:
    """Register bookies as a bookie does (ephemeral; empty data, as upstream's legacy ones)."""
    for bookie in bookies:
        path = _registration(store, bookie, read_only)
        await store.create(path, b"", ephemeral=True, make_parents=True)


async def unregister(store: MetadataStore, *bookies: str, read_only: bool = False) -> None:
    for bookie in bookies:
        await store.delete(_registration(store, bookie, read_only))


async def make_ledger(
    store: MetadataStore,
    ensembles: Mapping[int, Sequence[str]],
    *,
    write_quorum: int | None = None,
    last_entry_id: int = 19,
) -> int:
    """A CLOSED ledger with these segments (Qa = Qw = E unless ``write_quorum`` is given)."""
    size = len(next(iter(ensembles.values())))
    qw = write_quorum or size
    md = LedgerMetadata(
        size,
        qw,
        qw,
        {k: tuple(v) for k, v in ensembles.items()},
        state=LedgerState.CLOSED,
        last_entry_id=last_entry_id,
        length=(last_entry_id + 1) * 10,
    )
    return await LedgerManager(store).create(md)


async def marks(urm: UnderReplicationManager) -> dict[int, tuple[str, ...]]:
    return {m.ledger_id: m.replicas for m in await urm.under_replicated()}


async def wait_until(
    condition: Callable[[], Awaitable[bool]], *, within: float = 10.0, what: str = ""
) -> None:
    """Poll ``condition`` every 10 ms until true (a store has no event for "the auditor
    wrote what I expect"); fail after ``within`` seconds."""
    with trio.move_on_after(within):
        while not await condition():  # noqa: ASYNC110
            await trio.sleep(0.01)
        return
    raise AssertionError(f"not within {within} s: {what or condition}")


class Running:
    """An auditor running in a test, with what it runs on."""

    def __init__(
        self, auditor: Auditor, urm: UnderReplicationManager, metrics: AutoRecoveryMetrics
    ) -> None:
        self.auditor = auditor
        self.urm = urm
        self.metrics = metrics
        self.scope = trio.CancelScope()

    def is_auditor(self) -> bool:
        return self.auditor.is_auditor

    def value(self, name: str, **labels: str) -> float:
        got = self.metrics.registry.get_sample_value(name, labels)
        assert got is not None, name
        return got

    async def elected(self) -> None:
        async def is_auditor() -> bool:
            return self.is_auditor()

        await wait_until(is_auditor, what="elected")
        # The bookie check at the start of every term has run once the gauge says so.
        await wait_until(self._first_audit_done, what="first bookie check")

    async def _first_audit_done(self) -> bool:
        return self.value("autorecovery_audits_total", kind="bookie_check") >= 1


@asynccontextmanager
async def running_auditor(
    store: MetadataStore,
    config: AutoRecoveryConfig = QUIET,
    *,
    bookie_id: str = "127.0.0.1:3181",
    elected: bool = True,
) -> AsyncIterator[Running]:
    """An auditor on its own client and manager; with ``elected``, once it is the auditor
    and its first bookie check ran."""
    async with BookKeeper(store) as bk, trio.open_nursery() as nursery:
        urm = UnderReplicationManager(store)
        metrics = AutoRecoveryMetrics()
        running = Running(Auditor(bk, urm, config, metrics, bookie_id=bookie_id), urm, metrics)

        async def run() -> None:
            with running.scope:
                await running.auditor.run()

        nursery.start_soon(run)
        if elected:
            await running.elected()
        yield running
        nursery.cancel_scope.cancel()
