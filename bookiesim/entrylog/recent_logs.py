"""Which entry logs are durable and closed: the ``leastUnflushedLogId`` pointer.

Upstream keeps this in ``DefaultEntryLogger.RecentEntryLogsStatus``. Every log id the
allocator hands out is registered as unflushed; a log is marked flushed only after it has
been rotated, fsynced and closed (a checkpoint does that). The pointer then moves past every
*leading* flushed id. Ids that were never registered (gaps in allocation) are skipped,
so flushing 5 of {5, 7, 9} gives 6 and then flushing 7 gives 8 even though 9 is open.

Wrap-around
-----------
Ids are Java ints: after ``2**31 - 1`` the allocator restarts at 0. Numeric order then stops
being allocation order, so ids are tracked in *rounds*: a round is a run of ids allocated
without wrapping, kept in numeric order (which is allocation order inside a round), and the
caller starts a new round by registering the first id after a wrap with ``wrapped=True``.
The pointer belongs to the oldest round that still has unflushed logs; once every log of
that round is flushed it moves to the next round's first id — numerically *down*, the one
way it ever goes back (:attr:`RecentEntryLogsStatus.position` orders pointers across rounds).
Without this, the first ids after a wrap (0, 1, ...) sit below the pointer (at best
``2**31``), were never registered and read as flushed: garbage collection could have deleted
live logs.

A log is flushed (:meth:`RecentEntryLogsStatus.is_flushed`) if it is registered and marked
flushed; an unregistered one if it lies below the pointer (every log of an earlier run, every
log this run flushed and passed), or at or above ``flushed_from``: at startup the ids that an
earlier run which wrapped around left above the pointer, and once the pointer itself moved to
a new round, every id. That is safe because every log this run creates is registered *before*
its file exists and stays registered until it is flushed, so an unregistered log file is a
closed one (of an earlier run, or not ours). Before any wrap the rule is upstream's
(``id < leastUnflushedLogId``); the extra cases only let GC see old logs the pointer can no
longer vouch for numerically.

This module has no I/O and no locks so the bookie, the simulation and hypothesis all use it
unchanged; :class:`~bookiesim.entrylog.log_files.LogFiles` calls it under its io lock.
"""

from __future__ import annotations

from collections import deque

from sortedcontainers import SortedDict


class RecentEntryLogsStatus:
    """Tracks created logs and their flushed flags; :attr:`position` never decreases.

    ``least_unflushed_log_id`` never decreases either, except when it moves from one round
    of ids to the next after a wrap-around (see the module docstring).
    """

    def __init__(self, least_unflushed_log_id: int = 0, *, flushed_from: int | None = None) -> None:
        self._head: SortedDict = SortedDict()  # the pointer's round: log id -> flushed?
        self._later: deque[tuple[int, SortedDict]] = deque()  # (first id, ids) per later round
        self._least_unflushed = least_unflushed_log_id
        self._rounds_passed = 0
        self._flushed_from = flushed_from

    @property
    def least_unflushed_log_id(self) -> int:
        return self._least_unflushed

    @property
    def position(self) -> tuple[int, int]:
        """(rounds the pointer moved past, pointer): compares in allocation order."""
        return self._rounds_passed, self._least_unflushed

    def created(self, log_id: int, *, wrapped: bool = False) -> None:
        """Register a log the allocator just created (preallocated ones included).

        ``wrapped``: the allocator wrapped around to reach this id; it starts a new round
        that comes after every id registered so far, whatever their numeric values.
        Otherwise an id below its round's first id (or below the pointer) is ignored.
        """
        if wrapped:
            self._later.append((log_id, SortedDict({log_id: False})))
            self._advance()
            return
        if self._later:
            first, ids = self._later[-1]
            if log_id >= first:
                ids.setdefault(log_id, False)
        elif log_id >= self._least_unflushed:
            self._head.setdefault(log_id, False)

    def flushed(self, log_id: int) -> None:
        """A rotated log has been fsynced and closed: advance past leading flushed ids."""
        # Newest round first: an id can only be registered twice if it came round again
        # (2**31 logs later) after its first log was flushed and deleted.
        for _, ids in reversed(self._later):
            if ids.get(log_id) is False:
                ids[log_id] = True
                return  # the head round still has unflushed logs: the pointer stays
        if log_id in self._head:
            self._head[log_id] = True
            self._advance()

    def _advance(self) -> None:
        while True:
            head = self._head
            while head and head.peekitem(0)[1]:
                popped, _ = head.popitem(0)
                self._least_unflushed = popped + 1
            if head or not self._later:
                return
            # The pointer's round is all flushed and a wrap-around began another. The pointer
            # drops to that round's start, and "below the pointer" no longer covers the logs
            # before it: from here on every unregistered id counts as flushed.
            first, ids = self._later.popleft()
            self._flushed_from = 0
            self._head = ids
            self._least_unflushed = first
            self._rounds_passed += 1

    def forget(self, log_id: int) -> None:
        """A registered log was removed before it was ever used (e.g. an unused preallocation)."""
        for _, ids in reversed(self._later):
            if ids.get(log_id) is False:
                ids[log_id] = True
                return
        if self._head.get(log_id) is False:
            self._head[log_id] = True
            self._advance()

    def discard(self, log_id: int) -> None:
        """Drop a registration as if the id had never been handed out: its file could not be
        created, or turned out not to be ours."""
        for _, ids in reversed(self._later):
            if ids.get(log_id) is False:
                del ids[log_id]  # the round may end up empty; it still marks the wrap
                return
        if self._head.get(log_id) is False:
            del self._head[log_id]
            self._advance()

    def is_flushed(self, log_id: int) -> bool:
        for _, ids in reversed(self._later):  # the newest registration is the live one
            done = ids.get(log_id)
            if done is not None:
                return bool(done)
        done = self._head.get(log_id)
        if done is not None:
            return bool(done)
        if log_id < self._least_unflushed:
            return True
        return self._flushed_from is not None and log_id >= self._flushed_from

    def unflushed_ids(self) -> list[int]:
        """Registered logs not yet flushed, in allocation order."""
        out = [log_id for log_id, done in self._head.items() if not done]
        for _, ids in self._later:
            out += [log_id for log_id, done in ids.items() if not done]
        return out

    def _check(self) -> None:
        """Assert every invariant; O(n) in the number of tracked logs."""
        keys = list(self._head.keys())
        assert keys == sorted(set(keys))
        assert all(k >= self._least_unflushed for k in keys), "tracked id below the pointer"
        if keys:
            assert not self._head[keys[0]], "a leading flushed id was not popped"
        else:
            assert not self._later, "an empty round ahead of a later one"
        for first, ids in self._later:
            assert all(k >= first for k in ids), "tracked id below its round's start"
