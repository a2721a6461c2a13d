"""A ledger written slowly for the whole run: the workload of BP-32 and upstream #2728.

With a log per ledger, a ledger that gets an entry every second or two keeps its log active
(each add refreshes its idle expiry), so that log's id pins leastUnflushedLogId for as long
as the ledger lives. A GC that only looks below the pointer then never sees a newer log, and
deleted ledgers' bytes are never reclaimed (liveness invariant RC). The fault family
``slow_ledger`` adds one such writer to a run; it is not one of the run's writers (storms,
recoveries of "a ledger being written" and stop_writer leave it alone) and it keeps writing
through the final phase's first check.

Its client also applies a retention, as a topic does with its old ledgers while its current
one stays open: every few seconds it deletes a closed ledger (any one, not the oldest: the
ledgers newer than the slow one are the interesting ones) seen closed a few seconds ago.
That gives GC deleted ledgers to reclaim all through the run (a plan's own ``delete`` steps
come a couple of times a run), and logs newer than the slow ledger's.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import trio

from bookiesim.client.errors import BKError
from bookiesim.metadata.errors import MetadataError
from bookiesim.sim.actors import ClientActor, payload
from bookiesim.sim.history import WriterRecord

if TYPE_CHECKING:
    import random

    from bookiesim.client.bookkeeper import ClientConfig
    from bookiesim.client.ledger_handle import AddFuture
    from bookiesim.sim.sim_cluster import SimCluster

__all__ = ["SlowWriter"]

SHAPE = (3, 3, 2)
"""Every entry goes to the whole ensemble, so each of its bookies sees an add per gap."""

GAP = (0.5, 2.5)
"""Seconds between adds: well below the simulation's 6 s idle expiry of active logs."""

RETENTION = (1.0, 4.0)
"""Seconds between two retention deletes."""

RETAIN = 5.0
"""A closed ledger is deleted no sooner than this after it was seen closed."""


class SlowWriter(ClientActor):
    """Writes one ledger an entry at a time, never closing it; if the ledger is taken over
    (recovered) or fails, starts another."""

    def __init__(
        self, cluster: SimCluster, name: str, config: ClientConfig, rng: random.Random
    ) -> None:
        super().__init__(cluster, name, config)
        self.rng = rng
        self.ledgers: list[int] = []
        self._closed_at: dict[int, float] = {}

    async def retention(self, stopping: trio.Event) -> None:
        """Delete a closed ledger now and then (module docstring), until ``stopping`` (the
        final phase reads every ledger back: none may vanish under it)."""
        history = self.cluster.history
        assert self.bk is not None
        while True:
            await trio.sleep(self.rng.uniform(*RETENTION))
            if stopping.is_set():
                return
            now = trio.current_time()
            for lid, md in sorted(history.metadata.items()):
                if md.is_closed:
                    self._closed_at.setdefault(lid, now)
            old = [lid for lid, at in sorted(self._closed_at.items()) if now - at >= RETAIN]
            if not old:
                continue
            lid = self.rng.choice(old)
            del self._closed_at[lid]
            if lid not in history.metadata:
                continue  # deleted by a plan step meanwhile
            try:
                await self.bk.delete_ledger(lid)
            except (BKError, MetadataError) as exc:
                self.trace(f"{self.name}: retention delete of {lid} failed: {exc}")

    async def write_forever(self) -> None:
        history = self.cluster.history
        assert self.bk is not None
        while True:
            live = len(await self.bk.live_bookies())
            shape = SHAPE if live >= SHAPE[0] else (1, 1, 1)
            try:
                lh = await self.bk.create_ledger(*shape)
            except (BKError, MetadataError) as exc:
                self.trace(f"{self.name}: create failed: {exc}")
                await trio.sleep(1.0)
                continue
            history.writers[lh.ledger_id] = WriterRecord(self.name, lh)
            self.ledgers.append(lh.ledger_id)
            self.trace(f"{self.name}: slow ledger {lh.ledger_id} on {list(lh.ensemble)}")
            last: AddFuture | None = None
            while lh.error is None:
                try:
                    last = lh.append_async(payload(lh.ledger_id, lh.last_add_pushed + 1))
                except BKError:
                    break
                await trio.sleep(self.rng.uniform(*GAP))
            if last is not None:
                with contextlib.suppress(BKError):
                    await last.result()
            self.trace(f"{self.name}: slow ledger {lh.ledger_id} ended at {lh.last_add_confirmed}")
