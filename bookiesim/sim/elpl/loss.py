"""The ELPL experiment's bookie-loss scenario: what re-replication does to the receiving
bookies' per-ledger logs, with and without write-close after replication (BP-32's third case).

In a loss run one stand-alone auto-recovery service (:class:`~bookiesim.autorecovery.service.
AutoRecoveryService`, as ``bookiesim autorecovery`` runs it) watches the cluster from the
start. At ``loss_at`` the bookie named in the most ledgers' ensembles is stopped for good
(unregistered at once; never started again). The auditor marks its ledgers, the worker copies
each fragment to a replacement and swaps it into the metadata, then — write-close after
replication on — sends the replacement a WriteClose with reason ``replication``, which rotates
the log the copies went to: it is sealed at the next checkpoint, leastUnflushedLogId moves
past it, and a later delete of the ledger is reclaimed by the next GC pass. Off, the copies'
log stays active until it expires (``entrylogMapAccessExpiryTimeInSeconds`` after the copy).

:class:`LossTracker` follows it from the outside, every ``poll`` seconds of the run's clock,
from the loss until every closed ledger that named the lost bookie has been healed and every
copy's log on its receiver is no longer active: which bookie received each ledger's copies
and when (the metadata no longer names the lost bookie), and when the receiver's log for that
ledger stopped being active (sealed). Only ledgers closed at the loss are followed: an open
ledger's writer replaces the lost bookie itself, and its new bookies' logs are the writer's,
sealed by its own close.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.bookie.sorted_storage import SortedLedgerStorage
from bookiesim.client.errors import BKError
from bookiesim.metadata.errors import MetadataError

if TYPE_CHECKING:
    from collections.abc import Callable

    from bookiesim.client.bookkeeper import BookKeeper
    from bookiesim.cluster.in_process import LocalCluster
    from bookiesim.metadata.ledgers import LedgerMetadata

__all__ = [
    "AUTORECOVERY_ID",
    "AUTORECOVERY_SETTINGS",
    "Copy",
    "LossTracker",
    "choose_victim",
    "ledger_metadata",
]

AUTORECOVERY_ID = "127.0.0.1:1"
"""The stand-alone service's id in the auditor election (no bookie has it)."""

AUTORECOVERY_SETTINGS: dict[str, object] = {
    "lostBookieRecoveryDelay": 0,
    "openLedgerRereplicationGracePeriod": 30_000,
    "lockReleaseOfFailedLedgerGracePeriod": 300_000,
    "rwRereplicateBackoffMs": 5_000,
}
"""Upstream's defaults, named so that the experiment's time scale applies to them."""


@dataclass
class Copy:
    """One closed ledger's copies on one receiving bookie."""

    ledger_id: int
    receiver: str
    at: float
    """When the metadata first named the receiver in the lost bookie's place."""
    sealed_at: float | None = None
    """When the receiver's log for the ledger was first seen no longer active."""

    @property
    def seal_seconds(self) -> float | None:
        return None if self.sealed_at is None else self.sealed_at - self.at


async def ledger_metadata(bk: BookKeeper) -> dict[int, LedgerMetadata]:
    """Every ledger's metadata now (ledgers deleted while it reads are left out)."""
    out = {}
    for lid in await bk.list_ledgers():
        try:
            out[lid], _ = await bk.read_metadata(lid)
        except (BKError, MetadataError):
            continue
    return out


def choose_victim(metadata: dict[int, LedgerMetadata], running: list[str]) -> str:
    """The running bookie named in the most ledgers (ties: the lowest id)."""
    counts = {b: sum(b in md.bookies() for md in metadata.values()) for b in running}
    return max(sorted(running), key=lambda b: counts[b])


class LossTracker:
    """Follows the healing of one lost bookie; see the module docstring."""

    def __init__(
        self,
        cluster: LocalCluster,
        lost: str,
        metadata: dict[int, LedgerMetadata],
        at: float,
    ) -> None:
        self.cluster = cluster
        self.lost = lost
        self.lost_at = at
        self.affected = {
            lid for lid, md in metadata.items() if md.is_closed and lost in md.bookies()
        }
        self.before = {lid: metadata[lid] for lid in self.affected}
        self.copies: list[Copy] = []
        self.healed: dict[int, float] = {}
        self.deleted: set[int] = set()

    @property
    def active_copies(self) -> int:
        """Copies whose log on their receiver is still active."""
        return sum(1 for c in self.copies if c.sealed_at is None)

    @property
    def copied_ledgers(self) -> set[int]:
        return {c.ledger_id for c in self.copies}

    async def follow(self, bk: BookKeeper, now: Callable[[], float], poll: float) -> None:
        """Poll until everything is healed and sealed (or the run ends and cancels it)."""
        pending = set(self.affected)
        while pending or self.active_copies:
            for lid in sorted(pending):
                try:
                    md, _ = await bk.read_metadata(lid)
                except (BKError, MetadataError):
                    pending.discard(lid)  # deleted by the workload meanwhile
                    self.deleted.add(lid)
                    continue
                if self.lost in md.bookies():
                    continue
                pending.discard(lid)
                self.healed[lid] = now()
                for receiver in sorted(md.bookies() - self.before[lid].bookies()):
                    self.copies.append(Copy(lid, receiver, now()))
            self._seal(now())
            await trio.sleep(poll)

    def _seal(self, t: float) -> None:
        for copy in self.copies:
            if copy.sealed_at is not None:
                continue
            try:
                bookie = self.cluster.service(copy.receiver).bookie
            except KeyError:  # stopped: nothing of it is active any more
                copy.sealed_at = t
                continue
            storage = bookie.storage
            if isinstance(storage, SortedLedgerStorage) and storage.memtable.holds(copy.ledger_id):
                continue  # its copies are not in a log yet: the flush rotates it after them
            if storage.entry_logger.current_log_id(copy.ledger_id) is None:
                copy.sealed_at = t

    def summary(self, reclaims: list[tuple[int, float, float | None]]) -> dict[str, Any]:
        """What the report shows for the run; ``reclaims`` are the run's (ledger, deleted
        at, delete-to-reclaim seconds or None)."""
        seals = sorted(s for c in self.copies if (s := c.seal_seconds) is not None)
        copied = self.copied_ledgers
        after = sorted(
            d for lid, at, d in reclaims if lid in copied and at >= self.lost_at and d is not None
        )
        waiting = sum(
            1 for lid, at, d in reclaims if lid in copied and at >= self.lost_at and d is None
        )
        heal = [t - self.lost_at for t in self.healed.values()]
        return {
            "lostBookie": self.lost,
            "lossAt": self.lost_at,
            "affectedLedgers": len(self.affected),
            "healedLedgers": len(self.healed),
            "deletedBeforeHealed": len(self.deleted),
            "lastHealSeconds": max(heal, default=None),
            "copies": len(self.copies),
            "copiesSealed": len(seals),
            "sealSeconds": _quantiles(seals),
            "deletedAfterCopy": len(after) + waiting,
            "reclaimedAfterCopy": len(after),
            "reclaimAfterCopySeconds": _quantiles(after),
            "copyRecords": [
                {
                    "ledgerId": c.ledger_id,
                    "receiver": c.receiver,
                    "at": c.at,
                    "sealedAt": c.sealed_at,
                }
                for c in self.copies
            ],
        }


def _quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "max": None}
    ordered = sorted(values)
    return {"p50": ordered[(len(ordered) - 1) // 2], "max": ordered[-1]}
