"""Which entry logs are durable and closed: the ``leastUnflushedLogId`` pointer.

Upstream keeps this in ``DefaultEntryLogger.RecentEntryLogsStatus``. Every log id the
allocator hands out is registered as unflushed; a log is marked flushed only after it has
been rotated, fsynced and closed (a checkpoint does that). The pointer then moves past every
*leading* flushed id. Ids that were never registered (gaps in allocation) are skipped,
so flushing 5 of {5, 7, 9} gives 6 and then flushing 7 gives 8 even though 9 is open.

The garbage collector may only touch a log for which :meth:`is_flushed` holds; anything
else may still receive writes. This module has no I/O so the bookie, the simulation and
hypothesis all use it unchanged.
"""

from __future__ import annotations

from sortedcontainers import SortedDict


class RecentEntryLogsStatus:
    """Tracks created logs and their flushed flags; ``least_unflushed_log_id`` never decreases."""

    def __init__(self, least_unflushed_log_id: int = 0) -> None:
        self._flushed: SortedDict = SortedDict()  # log id -> flushed?
        self._least_unflushed = least_unflushed_log_id

    @property
    def least_unflushed_log_id(self) -> int:
        return self._least_unflushed

    def created(self, log_id: int) -> None:
        """Register a log the allocator just created (preallocated ones included)."""
        if log_id >= self._least_unflushed:
            self._flushed.setdefault(log_id, False)

    def flushed(self, log_id: int) -> None:
        """A rotated log has been fsynced and closed: advance past leading flushed ids."""
        if log_id not in self._flushed:
            return
        self._flushed[log_id] = True
        while self._flushed and self._flushed.peekitem(0)[1]:
            popped, _ = self._flushed.popitem(0)
            self._least_unflushed = popped + 1

    def forget(self, log_id: int) -> None:
        """A registered log was removed before it was ever used (e.g. an unused preallocation)."""
        if self._flushed.get(log_id) is False:
            self._flushed[log_id] = True
            self.flushed(log_id)

    def is_flushed(self, log_id: int) -> bool:
        return bool(self._flushed.get(log_id, False)) or log_id < self._least_unflushed

    def unflushed_ids(self) -> list[int]:
        return [log_id for log_id, done in self._flushed.items() if not done]

    def _check(self) -> None:
        """Assert every invariant; O(n) in the number of tracked logs."""
        keys = list(self._flushed.keys())
        assert keys == sorted(set(keys))
        assert all(k >= self._least_unflushed for k in keys), "tracked id below the pointer"
        if keys:
            assert not self._flushed[keys[0]], "a leading flushed id was not popped"
