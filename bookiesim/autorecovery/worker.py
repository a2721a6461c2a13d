"""The replication worker: takes marked ledgers one at a time and heals them (upstream's
``ReplicationWorker``).

Theory of operation
-------------------
One step (:meth:`ReplicationWorker.step`; :meth:`~ReplicationWorker.replicate_once` says whether
it removed a mark):

1. Locks that were kept past a failure or for an open ledger's grace period (below) and whose
   time has come are dealt with and released (:meth:`ReplicationWorker.release_due`).
2. Unless replication is disabled, **lock** some marked ledger nobody holds
   (:meth:`~bookiesim.metadata.underreplication.UnderReplicationManager.lock_next`; the lock is
   an ephemeral node, so a worker that dies loses it with its session).
3. Read its metadata. No metadata: the ledger was deleted; its **mark is removed**.
4. The bookies to replace: those of its ensembles that are **not registered** (neither
   writable nor read-only), and those the mark names that are registered but miss the first
   or last entry they should hold of a fragment (the auditor's check of all ledgers found
   them so). Every *settled* fragment on them is copied to a new bookie and the bookie
   swapped in the metadata (:mod:`.replicator`).
5. Then, as upstream:

   * the ledger is not closed and its last, open-ended fragment names a lost bookie: its
     writer may still replace the bookie itself, so the lock is **kept for
     openLedgerRereplicationGracePeriod**; when it runs out and the ledger is still open with
     a lost bookie in its last ensemble, the worker **recovers** it (fences the writer out and
     closes it, ``open_ledger(recovery=True)``; the metadata goes IN_RECOVERY then CLOSED),
     and releases the lock: the next step finds a closed ledger and copies the rest;
   * a copy failed (no spare bookie, a replica unreadable): the lock is **kept for a
     back-off** (lockReleaseOfFailedLedgerGracePeriod / 32, doubling with each failure in a
     row, at most the whole period) so that no worker spins on it, then released; the mark
     stays;
   * every fragment healed: the mark is removed
     (:meth:`~bookiesim.metadata.underreplication.UnderReplicationManager.mark_replicated`,
     which keeps it if the auditor marked the ledger again meanwhile) and the lock released.

:meth:`ReplicationWorker.run` loops over steps: it waits while replication is disabled, pauses
``rwRereplicateBackoffMs`` after a step that failed, and when there is nothing to lock waits
for the marks or locks to change (or a kept lock to fall due). When it ends, cancelled or
not, every lock it keeps is released. A worker cancelled mid-copy has not swapped anything
(the swap comes after the copy); the next worker starts that fragment afresh.

No wall clock in control flow (the simulator runs workers in virtual time): delays use trio's
clock; only the mark-to-replicated metric compares the mark's ctime with the time of day.
"""

from __future__ import annotations

import enum
import logging
import math
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from bookiesim.autorecovery.fragments import ledger_fragments
from bookiesim.autorecovery.replicator import FragmentReplicator
from bookiesim.client.errors import BKError, NoSuchLedgerError
from bookiesim.metadata.errors import MetadataError
from bookiesim.metadata.registration import registered_bookies

if TYPE_CHECKING:
    from bookiesim.autorecovery.config import AutoRecoveryConfig
    from bookiesim.autorecovery.metrics import AutoRecoveryMetrics
    from bookiesim.client.bookkeeper import BookKeeper
    from bookiesim.metadata.ledgers import LedgerMetadata
    from bookiesim.metadata.underreplication import (
        LedgerLock,
        UnderReplicatedLedger,
        UnderReplicationManager,
    )

__all__ = ["ReplicationWorker", "Step", "failed_ledger_backoff"]

log = logging.getLogger(__name__)

BACKOFF_DOUBLINGS = 5
"""Failures in a row over which the kept lock's time doubles up to the whole grace period
(upstream's ``NUM_OF_EXPONENTIAL_BACKOFF_RETRIALS``)."""
_MAX_FAILURE_MEMORY = 2000
"""Ledgers whose failures in a row are remembered (upstream's cache size)."""


def failed_ledger_backoff(grace_period: float, failures_before: int) -> float:
    """How long a worker keeps the lock of a ledger it failed to replicate, the
    ``failures_before + 1``-th time in a row: the grace period / 2**5, doubling, capped."""
    if failures_before >= BACKOFF_DOUBLINGS:
        return grace_period
    return grace_period * 2.0 ** (failures_before - BACKOFF_DOUBLINGS)


class Step(enum.Enum):
    """What one :meth:`ReplicationWorker.step` did."""

    IDLE = "idle"
    """Nothing to lock (no mark free, or replication disabled)."""
    REPLICATED = "replicated"
    """A mark was removed: the ledger is healed (or was deleted)."""
    REMARKED = "remarked"
    """Healed, but the mark changed meanwhile (a new loss): left for another step."""
    WAITING_FOR_CLOSE = "waiting_for_close"
    """An open ledger's last fragment names a lost bookie: lock kept for the grace period."""
    FAILED = "failed"
    """A fragment could not be replicated: lock kept for a back-off, mark left."""


class _Kind(enum.Enum):
    OPEN_LEDGER = "open ledger"
    FAILED = "failed"


@dataclass(frozen=True)
class _Kept:
    lock: LedgerLock
    due: float
    """trio time when it is dealt with."""
    kind: _Kind


class ReplicationWorker:
    """Replicates marked ledgers through ``client`` (see the module docstring).

    ``owner`` is written in the locks (upstream writes the host name).
    """

    def __init__(
        self,
        client: BookKeeper,
        urm: UnderReplicationManager,
        config: AutoRecoveryConfig,
        metrics: AutoRecoveryMetrics,
        *,
        owner: str | None = None,
    ) -> None:
        self.client = client
        self.urm = urm
        self.config = config
        self.metrics = metrics
        self.owner = owner if owner is not None else socket.gethostname()
        self.replicator = FragmentReplicator(client, config, metrics)
        self._kept: dict[int, _Kept] = {}
        self._failures: dict[int, int] = {}

    # -- the loop ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Replicate marked ledgers until cancelled; releases every kept lock when it ends."""
        task_status.started()
        try:
            while True:
                try:
                    await self.release_due()
                    if not await self.urm.is_enabled():
                        with trio.move_on_at(self._next_due()):
                            await self.urm.wait_until_enabled()
                        continue
                    step = await self.step()
                except MetadataError as exc:  # the store is unreachable for now
                    log.warning("replication worker: %s", exc)
                    step = Step.FAILED
                if step is Step.FAILED:
                    await trio.sleep(self.config.rw_rereplicate_backoff)
                elif step is Step.IDLE:
                    with trio.move_on_at(self._next_due()):
                        await self.urm.wait_for_marks()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await self.release_kept()

    def _next_due(self) -> float:
        return min((k.due for k in self._kept.values()), default=math.inf)

    async def replicate_once(self) -> bool:
        """One :meth:`step`; True if it removed a mark (the ledger is healed, or deleted)."""
        return await self.step() is Step.REPLICATED

    async def step(self) -> Step:
        """Release the kept locks that are due, then lock one marked ledger and heal what can
        be healed now."""
        await self.release_due()
        if not await self.urm.is_enabled():
            return Step.IDLE
        lock = await self.urm.lock_next(self.owner, skip=self._kept)
        if lock is None:
            return Step.IDLE
        settled = False
        try:
            step = await self._replicate(lock)
            settled = True
            return step
        finally:
            if not settled and lock.ledger_id not in self._kept:
                # Cancelled or failed unexpectedly: give the ledger to the next worker now.
                await self._release_or_keep(lock)

    async def release_due(self) -> int:
        """Deal with and release the kept locks whose time has come; how many."""
        now = trio.current_time()
        due = [k for k in self._kept.values() if k.due <= now]
        for kept in due:
            try:
                if kept.kind is _Kind.OPEN_LEDGER:
                    await self._recover_if_still_open(kept.lock.ledger_id)
            finally:
                del self._kept[kept.lock.ledger_id]
                await self._release_or_keep(kept.lock)
        return len(due)

    async def _release_or_keep(self, lock: LedgerLock) -> None:
        """Release ``lock``; if the store cannot be reached, keep it to release on a later
        turn. A lock left behind outlives the failure: when the client reconnects within its
        session, the lock's ephemeral node stays, and no worker (this one included) locks
        the ledger again while the session lives, so its mark would stay for good (a live
        fault run found one such ledger after a ZooKeeper connection loss mid-copy)."""
        released = False
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            try:
                await self.urm.release(lock)
                released = True
            except MetadataError as exc:
                log.warning("replication worker: lock of ledger %d kept: %s", lock.ledger_id, exc)
        if not released:
            self._keep(lock, self.config.rw_rereplicate_backoff, _Kind.FAILED)

    async def release_kept(self) -> None:
        """Release every kept lock now (the marks stay)."""
        kept, self._kept = list(self._kept.values()), {}
        for k in kept:
            await self.urm.release(k.lock)

    def _keep(self, lock: LedgerLock, delay: float, kind: _Kind) -> None:
        self._kept[lock.ledger_id] = _Kept(lock, trio.current_time() + delay, kind)

    # -- one ledger ----------------------------------------------------------------------------

    async def _replicate(self, lock: LedgerLock) -> Step:
        ledger_id = lock.ledger_id
        mark = await self.urm.get(ledger_id)
        try:
            metadata, _ = await self.client.read_metadata(ledger_id)
            lost = await self._unregistered(metadata)
            incomplete = await self._incomplete(ledger_id, metadata, mark, lost)
            result = await self.replicator.replicate_ledger(ledger_id, lost, incomplete=incomplete)
        except NoSuchLedgerError:
            log.info("ledger %d was deleted; its mark goes", ledger_id)
            await self.urm.mark_replicated(lock)
            return Step.REPLICATED
        except BKError as exc:
            log.warning("ledger %d: replication failed: %s", ledger_id, exc)
            return self._failed(lock)
        if result.open_fragments:
            log.info(
                "ledger %d is open with a lost bookie in its last ensemble; waiting %.1f s "
                "for its writer before recovering it",
                ledger_id,
                self.config.open_ledger_rereplication_grace_period,
            )
            self._keep(lock, self.config.open_ledger_rereplication_grace_period, _Kind.OPEN_LEDGER)
            return Step.WAITING_FOR_CLOSE
        if not result.healed:
            return self._failed(lock)
        self._failures.pop(ledger_id, None)
        if not await self.urm.mark_replicated(lock):
            log.info("ledger %d replicated, but marked again meanwhile", ledger_id)
            return Step.REMARKED
        since = 0.0
        if mark is not None and mark.ctime_ms is not None:
            since = time.time() - mark.ctime_ms / 1000
        self.metrics.ledger_replicated(since)
        log.info("ledger %d replicated (%d fragments copied)", ledger_id, len(result.copies))
        return Step.REPLICATED

    def _failed(self, lock: LedgerLock) -> Step:
        ledger_id = lock.ledger_id
        before = self._failures.pop(ledger_id, 0)
        self._failures[ledger_id] = before + 1  # re-inserted last: oldest forgotten first
        while len(self._failures) > _MAX_FAILURE_MEMORY:
            del self._failures[next(iter(self._failures))]
        delay = failed_ledger_backoff(
            self.config.lock_release_of_failed_ledger_grace_period, before
        )
        log.info("ledger %d stays marked; its lock is kept %.3f s", ledger_id, delay)
        self._keep(lock, delay, _Kind.FAILED)
        self.metrics.ledger_replication_failed()
        return Step.FAILED

    async def _unregistered(self, metadata: LedgerMetadata) -> set[str]:
        """The ledger's bookies that are registered neither writable nor read-only."""
        registered = await registered_bookies(self.client.store, self.client.ledgers_root)
        return metadata.bookies() - registered

    async def _incomplete(
        self,
        ledger_id: int,
        metadata: LedgerMetadata,
        mark: UnderReplicatedLedger | None,
        lost: set[str],
    ) -> set[tuple[int, str]]:
        """(segment, bookie) of the registered bookies the mark names that miss entries."""
        named = set(mark.replicas if mark is not None else ()) - lost
        out: set[tuple[int, str]] = set()
        for fragment in ledger_fragments(metadata):
            if not fragment.is_closed:
                continue
            # In the ensemble's order, not a set's: the reads go out in this order, and a
            # string set's order changes with PYTHONHASHSEED (a simulated run would too).
            for bookie in [b for b in fragment.ensemble if b in named]:
                if await self.replicator.misses_entries(ledger_id, metadata, fragment, bookie):
                    out.add((fragment.first_entry_id, bookie))
        return out

    async def _recover_if_still_open(self, ledger_id: int) -> None:
        """After the grace period: recover the ledger if it is still not closed and its last
        ensemble still names a bookie that is gone (its writer did not replace it)."""
        try:
            metadata, _ = await self.client.read_metadata(ledger_id)
            if metadata.is_closed:
                return
            lost = await self._unregistered(metadata)
            if not set(metadata.last_ensemble[1]) & lost:
                return
            log.warning("ledger %d: recovering it (a lost bookie in its last ensemble)", ledger_id)
            await self.client.open_ledger(ledger_id, recovery=True)
        except BKError as exc:
            log.warning("ledger %d: recovery for replication failed: %s", ledger_id, exc)
