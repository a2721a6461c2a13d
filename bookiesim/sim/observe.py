"""Reading the real bookies into a :class:`~.invariants.ClusterView`, cheaply enough to do
after every step.

An up bookie is read through its own structures: ledgers, fence bits and LACs from its index
and handles, entry ids from the index, open descriptors against their caps, and each
structure's ``_check()``. Entry bodies are read back (digest and payload checked: S4; a read
that fails for a live ledger: RD1) only when the entry is new to us or moved (compaction),
so the cost per step follows what changed, not what is stored — or when the log it was
read from is gone (GC deleted it: a live entry there is lost, RD1).

For auto-recovery the observer also answers, at the instant of a replication's metadata swap,
what the bookie that took the place stores (:meth:`Observer.check_swap`, RS), and keeps the
time since which the cluster has been quiet — no fault active but bookies lost for good —
from which RR counts its bound.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import trio

from bookiesim.bookie.sorted_storage import SortedLedgerStorage
from bookiesim.client.digest import DigestManager, DigestMismatchError, DigestType
from bookiesim.sim.actors import payload
from bookiesim.sim.invariants import BookieView, ClusterView
from bookiesim.sim.sim_cluster import SIM_BOOKIE_SETTINGS, SimBookie, SimCluster

if TYPE_CHECKING:
    from collections.abc import Mapping

    from bookiesim.bookie.bookie import Bookie
    from bookiesim.bookie.ledger_storage import LedgerStorage
    from bookiesim.metadata.ledgers import LedgerMetadata
    from bookiesim.sim.history import History, Swap

__all__ = ["RECLAIM_BOUND", "REPLICATION_BOUND", "Observer"]


def _setting(key: str) -> float:
    return float(SIM_BOOKIE_SETTINGS[key])  # type: ignore[arg-type]


RECLAIM_BOUND = (
    _setting("entrylogMapAccessExpiryTimeInSeconds")
    + _setting("flushInterval") / 1000
    + 2 * _setting("gcWaitTime") / 1000
    + 10.0
)
"""RC's bound on delete-to-reclaim, in seconds: a deleted (closed) ledger's log is rotated
by its write-close or at the latest by idle expiry, flushed by the next checkpoint and
extracted by the next GC pass (two, in case a pass was running); 10 s of slack covers slow
disks and long passes. 25 s with the simulation's settings."""

IN_TABLE = -1
"""What :class:`Observer` remembers as the location of an entry it verified in the sorted
storage's table (no entry log location is negative)."""

REPLICATION_BOUND = 40.0
"""RR's bound, in seconds of quiet after a bookie is lost for good (or after the ledger
closed, if later): the registration's expiry (at most 3 s), the simulation's
``lostBookieRecoveryDelay`` and the audit, then the workers' copies with their back-offs
(:mod:`.autorecovery`), with room for a failed attempt and a retry."""


class Observer:
    """Builds views; remembers which entry copies it already verified."""

    def __init__(self, cluster: SimCluster, history: History) -> None:
        self.cluster = cluster
        self.history = history
        self._verified: dict[tuple[str, int], dict[tuple[int, int], int]] = {}
        # bookie -> last time it was seen unable to write (disk full, journal failed): RC
        # counts the time to reclaim from then on, since a GC that cannot seal or flush
        # logs is blocked by the fault, not by a bug.
        self._unhealthy: dict[str, float] = {}
        self._digests: dict[int, DigestManager] = {}
        self._unquiet_at = 0.0

    def view(self) -> ClusterView:
        history = self.history
        metadata = dict(history.metadata)
        if self._faults_active():
            self._unquiet_at = trio.current_time()
        return ClusterView(
            time=trio.current_time(),
            metadata=metadata,
            writer_lac={lid: history.writer_lac(lid) for lid in history.writers},
            ever_in_recovery=frozenset(history.ever_in_recovery),
            bookies={b: self._observe(sb, metadata) for b, sb in self.cluster.bookies.items()},
            acked={
                b: {lid: frozenset(ids) for lid, ids in ledgers.items()}
                for b, ledgers in history.bookie_acks.items()
            },
            fence_acked={b: frozenset(ls) for b, ls in history.fence_acks.items()},
            reclaim_bound=RECLAIM_BOUND,
            lost=dict(history.lost),
            data_lost=frozenset(history.data_lost),
            swaps=tuple(history.swaps),
            closed_at=dict(history.closed_at),
            quiet_since=self._unquiet_at,
            replication_bound=REPLICATION_BOUND,
        )

    def _faults_active(self) -> bool:
        """Any fault on now but bookies lost for good (RR's clock waits for quiet)."""
        f = self.cluster.net.faults
        if f.cut or f.loss or f.spike or f.link_delay or f.link_loss:
            return True
        for sb in self.cluster.bookies.values():
            if sb.lost:
                continue
            bookie = sb.bookie
            if bookie is None or bookie.failure is not None:
                return True
            if sb.faults.full or sb.faults.latency:
                return True
        return False

    def stored_now(self, bookie_id: str, ledger_id: int) -> frozenset[int]:
        """What ``bookie_id`` stores of the ledger this instant: its index if up, what it
        acknowledged if down, nothing if lost for good."""
        sb = self.cluster.bookies.get(bookie_id)
        if sb is None or sb.lost:
            return frozenset()
        bookie = sb.bookie
        if bookie is None:
            return frozenset(self.history.bookie_acks.get(bookie_id, {}).get(ledger_id, ()))
        storage = bookie.storage
        if not storage.ledger_exists(ledger_id):
            return frozenset()
        disk = self.cluster.disk
        disk.observing = True
        try:
            in_index = frozenset(e for e, _ in storage.index.entries(ledger_id))
            return in_index.union(_table_entries(storage, ledger_id))
        finally:
            disk.observing = False

    def check_swap(self, swap: Swap) -> str | None:
        """RS: the bookie a replication names in a settled segment must already store every
        entry of that segment its position holds — the copy comes before the swap."""
        try:
            have = self.stored_now(swap.new, swap.ledger_id)
        except Exception as exc:  # its index failed to answer: CHK reports that
            return f"{swap.new}'s index could not be read: {self._describe(exc)}"
        missing = swap.entries - have
        if not missing:
            return None
        return (
            f"{swap.new} lacks {len(missing)} of the {len(swap.entries)} entries it must hold "
            f"(first {sorted(missing)[:5]}): the copy was not complete"
        )

    def _observe(self, sb: SimBookie, metadata: Mapping[int, LedgerMetadata]) -> BookieView:
        disk = self.cluster.disk
        disk.observing = True
        try:
            return self._bookie(sb, metadata)
        except Exception as exc:  # the bookie's own structures failed to answer: a finding
            # Seen as down (its acknowledged entries stand in for its index), so that one
            # failure does not also read as every entry lost.
            return BookieView(
                sb.bookie_id,
                up=False,
                incarnation=sb.incarnation,
                structure_errors=(f"{sb.name}: reading its state failed: {self._describe(exc)}",),
            )
        finally:
            disk.observing = False

    def _bookie(self, sb: SimBookie, metadata: Mapping[int, LedgerMetadata]) -> BookieView:
        bookie = sb.bookie
        if bookie is None or sb.lost:
            return BookieView(sb.bookie_id, up=False, incarnation=sb.incarnation)
        storage = bookie.storage
        index = storage.index
        entries: dict[int, frozenset[int]] = {}
        fenced: set[int] = set()
        lacs: dict[int, int] = {}
        bad: list[str] = []
        unreadable: list[str] = []
        verified = self._verified.setdefault((sb.bookie_id, sb.incarnation), {})
        logs = set(storage.entry_logger.log_ids())
        for lid in storage.ledger_ids():
            located = list(index.entries(lid))
            in_index = frozenset(e for e, _ in located)
            in_table = _table_entries(storage, lid) - in_index
            entries[lid] = in_index.union(in_table)
            if storage.is_fenced(lid):
                fenced.add(lid)
            try:
                lacs[lid] = bookie.last_add_confirmed(lid)
            except Exception as exc:  # its last indexed entry cannot be read back
                if lid in metadata:
                    unreadable.append(
                        f"{sb.bookie_id}: ledger {lid} LAC unreadable: {self._describe(exc)}"
                    )
            for e, location in located:
                if verified.get((lid, e)) != location or (location >> 32) not in logs:
                    verified[(lid, e)] = location
                    self._verify(sb, bookie, lid, e, lid in metadata, bad, unreadable)
            for e in in_table:
                if verified.get((lid, e)) != IN_TABLE:
                    verified[(lid, e)] = IN_TABLE
                    self._verify(sb, bookie, lid, e, lid in metadata, bad, unreadable)
        logger = storage.entry_logger
        cfg = sb.cfg
        open_files = {
            "entry log read descriptors": (
                logger.open_read_files,
                cfg.entry_log_max_open_read_files,
            ),
            "active entry logs": (logger.active_log_count, cfg.maximum_number_of_active_entry_logs),
            "entry log write descriptors": (
                logger.open_write_files,
                cfg.maximum_number_of_active_entry_logs + 1 + logger.rotated_log_count,
            ),
            "index descriptors": (index.open_file_count, cfg.open_file_limit),
        }
        return BookieView(
            sb.bookie_id,
            up=True,
            incarnation=sb.incarnation,
            entries=entries,
            fenced=frozenset(fenced),
            lacs=lacs,
            least_unflushed=logger.least_unflushed_log_id,
            open_files=open_files,
            structure_errors=tuple(_structure_errors(sb.name, bookie)),
            bad_payloads=tuple(bad),
            unreadable=tuple(unreadable),
            awaiting_reclaim=self._awaiting_reclaim(sb, bookie),
        )

    def _awaiting_reclaim(self, sb: SimBookie, bookie: Bookie) -> tuple[tuple[int, float], ...]:
        now = trio.current_time()
        if sb.faults.full or bookie.journals.failed is not None:
            self._unhealthy[sb.bookie_id] = now
        since = self._unhealthy.get(sb.bookie_id, -math.inf)
        return tuple((lid, max(at, since)) for lid, at in bookie.gc.awaiting_reclaim())

    def _describe(self, exc: BaseException) -> str:
        """``repr(exc)`` without the run's temporary directory (traces must not differ
        between two runs of a seed)."""
        return repr(exc).replace(str(self.cluster.root), "<root>")

    def _verify(
        self,
        sb: SimBookie,
        bookie: Bookie,
        lid: int,
        e: int,
        live: bool,
        bad: list[str],
        unreadable: list[str],
    ) -> None:
        digest = self._digests.get(lid)
        if digest is None:
            digest = self._digests[lid] = DigestManager(lid, b"", DigestType.CRC32C)
        try:
            body = bookie.storage.read_entry(lid, e)
        except Exception as exc:
            if live:
                unreadable.append(
                    f"{sb.bookie_id}: ledger {lid} entry {e} unreadable: {self._describe(exc)}"
                )
            return
        try:
            got = digest.verify(body, expected_entry_id=e).payload
        except DigestMismatchError as exc:
            bad.append(f"{sb.bookie_id}: ledger {lid} entry {e}: {exc}")
            return
        if got != payload(lid, e):
            bad.append(f"{sb.bookie_id}: ledger {lid} entry {e} holds another payload")


def _table_entries(storage: LedgerStorage, ledger_id: int) -> set[int]:
    """The ledger's entries in the sorted storage's table: acknowledged and readable, but
    not in the index until a flush (the journal holds them until then). Stored all the
    same."""
    if isinstance(storage, SortedLedgerStorage):
        return storage.memtable.entry_ids(ledger_id)
    return set()


def _structure_errors(name: str, bookie: Bookie) -> list[str]:
    out = []
    checks = (
        ("entry logger", bookie.storage.entry_logger._check),
        ("ledger index", bookie.storage.index._check),
        ("ledger handles", bookie.handles._check),
        ("garbage collector", bookie.gc._check),
    )
    for what, check in checks:
        try:
            check()
        except AssertionError as exc:
            out.append(f"{name} {what}: _check() failed {exc!r}")
    return out
