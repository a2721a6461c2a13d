"""Find the newest entry matching a monotone predicate, and the ranges that narrow it.

Theory of operation
-------------------
The predicate is assumed *monotone* over positions: true for a prefix, false after it
("published before T", "index below I"). :func:`find_newest_matching` returns the last
position of ``[start, end]`` (both inclusive) where it holds, by binary search, reading
entries through an :class:`EntrySource`: it reads ``start`` (false → None, so nothing is
expired by mistake — upstream issue #5579), then ``end`` (true → ``end``), then bisects
between them. Unlike upstream's ``OpFindNewest`` (reference §3.4), which counts the range
with its closed size and so probes — and may return — the entry *after* ``end``, this
search never reads outside ``[start, end]``: at most ``2 + ⌈log2(n - 1)⌉`` reads for ``n``
entries, and each entry is read at most once.

When the predicate is not monotone (publish times out of order) no search short of a full
scan has a unique answer; this one then returns a *boundary*: a position where the
predicate holds and the next position (if in range) does not — the answer it would give for
some monotone neighbour of the data.

Narrowing ranges (sans-IO; the caller reads nothing to compute them):

* :func:`range_by_bounds` — per-ledger ``[min, max]`` of the compared value, from PIP-404
  properties (PIP-345's begin/end publish timestamps, begin/end index). A ledger whose max is
  below the target is all-true, one whose min is at or above it all-false; the search range
  is the mixed ledgers between the last all-true ledger's last entry (whose truth is known,
  so it need not be read) and the first all-false ledger.
* :func:`find_position_range` — upstream's #22792 narrowing by ledger close times with a
  clock skew allowance (reference §3.2), kept exactly as HEAD computes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from bookiesim.mledger.position import LedgerList, LedgerSummary, Position

__all__ = [
    "EntrySource",
    "NarrowedRange",
    "SearchResult",
    "find_newest_matching",
    "find_position_range",
    "range_by_bounds",
]

Predicate = Callable[[bytes], bool]


class EntrySource(Protocol):
    """Where a search reads entries: a managed ledger, or an in-memory topic in benchmarks."""

    async def read_entry(self, position: Position) -> bytes: ...


@dataclass(frozen=True)
class SearchResult:
    position: Position | None
    """The newest matching position, or None when the first entry of the range does not
    match (or the range is empty)."""
    entries_read: int


async def find_newest_matching(
    ledgers: LedgerList,
    source: EntrySource,
    predicate: Predicate,
    start: Position | None = None,
    end: Position | None = None,
    *,
    start_matches: bool = False,
) -> SearchResult:
    """The last position of ``[start, end]`` where ``predicate`` holds (see the module
    docstring). ``start`` None: the first entry; ``end`` None: the last readable entry.
    Positions outside the readable entries are clamped into them. ``start_matches`` says
    the caller already knows the predicate holds at ``start`` (it is not read)."""
    lo = 0 if start is None else ledgers.clamp_offset(start, after=True)
    last = ledgers.total_entries - 1
    hi = last if end is None else min(last, ledgers.clamp_offset(end, after=False))
    if lo > hi:
        return SearchResult(None, 0)
    reads = 0

    async def matches(offset: int) -> bool:
        nonlocal reads
        reads += 1
        return predicate(await source.read_entry(ledgers.position_at(offset)))

    if not start_matches and not await matches(lo):
        return SearchResult(None, reads)
    if lo == hi or await matches(hi):
        return SearchResult(ledgers.position_at(hi), reads)
    # Invariant: the predicate holds at lo and not at hi.
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if await matches(mid):
            lo = mid
        else:
            hi = mid
    return SearchResult(ledgers.position_at(lo), reads)


@dataclass(frozen=True)
class NarrowedRange:
    """A search range: ``None`` ends are open (first entry / last readable entry)."""

    start: Position | None
    end: Position | None
    start_matches: bool = False
    """The predicate is known to hold at ``start`` (no need to read it)."""
    nothing_matches: bool = False
    """Known without reading: not even the first entry matches."""


Bounds = Callable[[LedgerSummary], tuple[int, int] | None]


def property_bounds(begin_key: str, end_key: str) -> Bounds:
    """Bounds read from two integer per-ledger properties (None if either is missing or
    not an integer)."""

    def bounds(info: LedgerSummary) -> tuple[int, int] | None:
        return _int_pair(info.properties, begin_key, end_key)

    return bounds


def _int_pair(props: Mapping[str, str], begin_key: str, end_key: str) -> tuple[int, int] | None:
    try:
        return int(props[begin_key]), int(props[end_key])
    except (KeyError, ValueError):
        return None


def range_by_bounds(ledgers: LedgerList, bounds: Bounds, target: int) -> NarrowedRange | None:
    """The range for predicate ``value < target`` given each ledger's ``[min, max]`` of
    value; None if some ledger with entries has no bounds (the caller falls back)."""
    start: Position | None = None
    previous: int | None = None  # index of the last ledger with entries seen so far
    for i, info in enumerate(ledgers.ledgers):
        if info.entries <= 0:
            continue
        pair = bounds(info)
        if pair is None:
            return None
        low, high = pair
        if high < target:  # every entry matches
            start = ledgers.last_of(i)
        elif low >= target:  # no entry matches: the answer is before this ledger
            if previous is None:
                return NarrowedRange(None, None, nothing_matches=True)
            return NarrowedRange(start, ledgers.last_of(previous), start_matches=start is not None)
        previous = i
    return NarrowedRange(start, None, start_matches=start is not None)


def find_position_range(
    ledgers: LedgerList, target: int, max_clock_skew_ms: int
) -> tuple[Position | None, Position | None]:
    """Upstream's ``getFindPositionRange`` (#22792 with #23919 and #24219; reference §3.2):
    narrowing by ledger close times, trusting them to within ``max_clock_skew_ms``.

    Returns (start, end); None ends are open. A negative skew turns it off."""
    if max_clock_skew_ms < 0:
        return None, None
    low, high = target - max_clock_skew_ms, target + max_clock_skew_ms
    start: Position | None = None
    for info in ledgers.ledgers:
        if info.close_timestamp is None:  # "unexpected": search everything
            return None, None
        if info.close_timestamp == 0:  # the open ledger
            return start, None
        if info.entries <= 0:
            # Upstream drops empty ledgers from its list, so never meets one here; its
            # "last entry" (id, -1) would make a start that is no entry at all.
            continue
        if info.close_timestamp <= low:
            start = Position(info.ledger_id, info.entries - 1)
        elif info.close_timestamp > high:
            return start, Position(info.ledger_id, info.entries - 1)
    return start, None
