"""What the garbage collector knows about flushed entry logs, and which to compact. No I/O.

:class:`EntryLogUsage` is upstream's ``entryLogMetaMap``: one
:class:`~bookiesim.entrylog.metadata.EntryLogMetadata` per flushed log that still holds a
live ledger. The collector adds a log once (its metadata never changes after it is flushed,
except by ledgers going away), removes the ledgers that were deleted, and forgets the log when
it is deleted or compacted.

It also remembers which deleted ledgers still have bytes in a tracked log
(:meth:`EntryLogUsage.holds_dead_bytes`): the metadata forgets a deleted ledger at once, but
its bytes stay on disk until the log is deleted or compacted, and the "delete to reclaim"
latency is measured up to that moment.

Usage is ``remaining / total`` as upstream (0 for a log that never held anything), or with
``useTargetEntryLogSizeForGc`` ``remaining / max(total, logSizeLimit)`` so that a small log
counts as mostly empty. Usage falls into 10 buckets of 10 % each, 1.0 into the last one
(upstream's ``entry_log_usage_buckets_le_10..100``); compaction takes the logs below its
threshold lowest bucket first, so the emptiest logs are rewritten first when time is short.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, KeysView

    from bookiesim.entrylog.metadata import EntryLogMetadata

__all__ = [
    "USAGE_BUCKETS",
    "EntryLogUsage",
    "LogUsage",
    "compaction_candidates",
    "usage_bucket",
    "usage_of",
]

USAGE_BUCKETS = 10


def usage_bucket(usage: float) -> int:
    """0..9: bucket ``i`` holds usage in ``[i/10, (i+1)/10)``, and 1.0 goes to bucket 9."""
    if not 0.0 <= usage <= 1.0:
        raise ValueError(f"usage {usage!r} is not in [0, 1]")
    return min(int(usage * USAGE_BUCKETS), USAGE_BUCKETS - 1)


def usage_of(meta: EntryLogMetadata, target_size: int | None = None) -> float:
    """The live fraction of a log; against ``max(total, target_size)`` when a target is given."""
    total = meta.total_size if target_size is None else max(meta.total_size, target_size)
    return 0.0 if total == 0 else meta.remaining_size / total


@dataclass(frozen=True, slots=True)
class LogUsage:
    """One tracked log as the admin API shows it."""

    log_id: int
    total_size: int
    remaining_size: int
    usage: float
    ledgers: tuple[int, ...]


def compaction_candidates(
    metas: Iterable[EntryLogMetadata], threshold: float, target_size: int | None = None
) -> list[int]:
    """Ids of the logs to compact at ``threshold``: usage below it, lowest bucket first, then
    by id. Nothing when the threshold is <= 0 (that compaction is disabled)."""
    if threshold <= 0:
        return []
    chosen: list[tuple[int, int]] = []
    for meta in metas:
        usage = usage_of(meta, target_size)
        if usage < threshold:
            chosen.append((usage_bucket(usage), meta.entry_log_id))
    chosen.sort()
    return [log_id for _, log_id in chosen]


class EntryLogUsage:
    """Metadata of the flushed logs GC tracks (upstream ``EntryLogMetadataMap``)."""

    def __init__(self, target_size: int | None = None) -> None:
        self._metas: dict[int, EntryLogMetadata] = {}
        # deleted ledger -> tracked logs that still hold its bytes
        self._dead: dict[int, set[int]] = {}
        # ledger -> tracked logs that held it when added (a superset of where it is live:
        # metas lose ledgers, never gain them). GC asks "which ledgers are gone" every pass;
        # asked per ledger, not per (log, ledger) pair, it costs half as much with
        # per-ledger logs and far less with interleaved ones.
        self._holders: dict[int, set[int]] = {}
        # Tracked logs that may have no live ledger left: a tracked meta loses ledgers only
        # in remove_deleted_ledgers, so only the logs it touched (and empty ones added) need
        # a look, not every tracked log every pass.
        self._maybe_empty: set[int] = set()
        self.target_size = target_size
        # Compaction candidates per threshold, with the _version and target size they were
        # computed at. A log's usage depends only on its total and remaining sizes; both
        # change only through add (meta changed before), remove_deleted_ledgers and forget,
        # which bump _version. So an idle bookie's minor/major compaction (every few
        # seconds in the simulation) does not recompute the usage of 1,000 logs each time.
        self._version = 0
        self._candidates: dict[float, tuple[int, int | None, list[int]]] = {}

    def __contains__(self, log_id: object) -> bool:
        return log_id in self._metas

    @property
    def log_ids(self) -> KeysView[int]:
        """The tracked log ids: a live view, cheap to test membership in."""
        return self._metas.keys()

    def __len__(self) -> int:
        return len(self._metas)

    def __iter__(self) -> Iterator[EntryLogMetadata]:
        return iter(list(self._metas.values()))

    def get(self, log_id: int) -> EntryLogMetadata | None:
        return self._metas.get(log_id)

    def add(self, meta: EntryLogMetadata, dead_ledgers: Iterable[int] = ()) -> None:
        """Track a log; ``dead_ledgers`` were already removed from ``meta`` (deleted
        ledgers whose bytes the file still holds)."""
        log_id = meta.entry_log_id
        if log_id in self._metas:
            raise ValueError(f"entry log {log_id:x} is tracked already")
        self._metas[log_id] = meta
        self._version += 1
        if meta.is_empty:
            self._maybe_empty.add(log_id)
        for ledger_id in meta.ledgers:
            self._holders.setdefault(ledger_id, set()).add(log_id)
        for ledger_id in dead_ledgers:
            self._dead.setdefault(ledger_id, set()).add(log_id)

    def remove_deleted_ledgers(
        self, exists: Callable[[int], bool], candidates: Iterable[int] | None = None
    ) -> int:
        """Drop every ledger for which ``exists`` is false from every log; return bytes.

        ``candidates``: if given, only these ledgers are asked about; the caller promises
        that every other tracked ledger still exists (see ``GarbageCollector._reclaim``)."""
        freed = 0
        holders = self._holders
        if candidates is None:
            gone = [lid for lid in holders if not exists(lid)]
        else:
            gone = [lid for lid in dict.fromkeys(candidates) if lid in holders and not exists(lid)]
        if gone:
            self._version += 1
        for ledger_id in gone:
            for log_id in sorted(self._holders.pop(ledger_id)):
                meta = self._metas.get(log_id)
                if meta is not None and meta.contains_ledger(ledger_id):
                    freed += meta.remove_ledger(ledger_id)
                    self._dead.setdefault(ledger_id, set()).add(log_id)
                    self._maybe_empty.add(log_id)
        return freed

    def empty_logs(self) -> list[int]:
        """Tracked logs with no live ledger left: the whole file is garbage."""
        metas = self._metas
        self._maybe_empty = {
            log_id
            for log_id in self._maybe_empty
            if (meta := metas.get(log_id)) is not None and meta.is_empty
        }
        return sorted(self._maybe_empty)

    def forget(self, log_id: int) -> EntryLogMetadata | None:
        """The log is gone (deleted or compacted): stop tracking it."""
        meta = self._metas.pop(log_id, None)
        self._version += 1
        for ledger_id in meta.ledgers if meta is not None else ():
            holders = self._holders.get(ledger_id)
            if holders is not None:
                holders.discard(log_id)
                if not holders:
                    del self._holders[ledger_id]
        for ledger_id in [lid for lid, logs in self._dead.items() if log_id in logs]:
            logs = self._dead[ledger_id]
            logs.discard(log_id)
            if not logs:
                del self._dead[ledger_id]
        return meta

    def holds_dead_bytes(self, ledger_id: int) -> bool:
        """True while a tracked log still holds bytes of deleted ledger ``ledger_id``."""
        return ledger_id in self._dead

    def usage(self, log_id: int) -> float:
        return usage_of(self._metas[log_id], self.target_size)

    def candidates(self, threshold: float) -> list[int]:
        cached = self._candidates.get(threshold)
        if cached is not None and cached[:2] == (self._version, self.target_size):
            return list(cached[2])
        chosen = compaction_candidates(self._metas.values(), threshold, self.target_size)
        self._candidates[threshold] = (self._version, self.target_size, chosen)
        return list(chosen)

    def bucket_counts(self) -> list[int]:
        """Tracked logs per usage bucket (10 %, 20 %, ... 100 %)."""
        counts = [0] * USAGE_BUCKETS
        for meta in self._metas.values():
            counts[usage_bucket(usage_of(meta, self.target_size))] += 1
        return counts

    @property
    def remaining_bytes(self) -> int:
        return sum(meta.remaining_size for meta in self._metas.values())

    @property
    def total_bytes(self) -> int:
        return sum(meta.total_size for meta in self._metas.values())

    def describe(self) -> list[LogUsage]:
        """Every tracked log, by id."""
        return [
            LogUsage(
                log_id,
                meta.total_size,
                meta.remaining_size,
                usage_of(meta, self.target_size),
                tuple(sorted(meta.ledgers)),
            )
            for log_id, meta in sorted(self._metas.items())
        ]

    def _check(self) -> None:
        """Assert every invariant. Cost: O(tracked logs x their ledgers + dead ledgers)."""
        for threshold, (version, target, chosen) in self._candidates.items():
            if (version, target) == (self._version, self.target_size):
                fresh = compaction_candidates(self._metas.values(), threshold, target)
                assert chosen == fresh, (threshold, chosen, fresh)
        for log_id, meta in self._metas.items():
            assert meta.entry_log_id == log_id
            meta._check()
            if meta.is_empty:
                assert log_id in self._maybe_empty, f"empty log {log_id:x} would not be found"
            for ledger_id in meta.ledgers:
                assert log_id in self._holders.get(ledger_id, ()), (ledger_id, log_id)
        for ledger_id, logs in self._dead.items():
            assert logs, ledger_id
            assert logs <= self._metas.keys(), (ledger_id, logs)
            for log_id in logs:
                assert not self._metas[log_id].contains_ledger(ledger_id), (ledger_id, log_id)
