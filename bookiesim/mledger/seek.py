"""Seek by timestamp and by index (PIP-345 on PIP-404), sans I/O apart from entry reads.

Predicates, as upstream's finder: an entry matches a seek to time T when its *entry
timestamp* — BrokerEntryMetadata's broker timestamp when present, else MessageMetadata's
publish time — is strictly earlier than T; it matches a seek to message index I when its
BrokerEntryMetadata index (the index of its *last* message) is below I. An entry that does
not parse never matches. The finder returns the newest matching entry; the reader is then
reset to the entry after it (the first at or after T, or the entry holding message I), or to
the first entry when nothing matches.

Narrowing, in order (:class:`SeekStrategy.AUTO`):

1. **properties** — when every ledger with entries carries the PIP-345 bounds as PIP-404
   properties (``beginPublishTimestamp``/``endPublishTimestamp``, ``beginIndex``/
   ``endIndex``; recorded when a ledger closes, and known in memory for the open ledger), the
   search covers only the ledger(s) where the answer can be, and the start's truth is known
   without a read (unless the answer is in the first ledger): at most
   ``⌈log2(entries per ledger)⌉ + 2`` reads when timestamps are in order.
2. **close time** (timestamps only) — upstream's #22792 range from ledger close times and
   the clock-skew allowance.
3. **full** — a binary search over every entry.

The bounds hold the min and max of exactly what the predicate compares (so
``beginPublishTimestamp`` is the broker timestamp when entries carry one): that makes the
narrowing exact rather than approximate, whatever clocks the producers had.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from bookiesim.mledger.finder import (
    EntrySource,
    NarrowedRange,
    Predicate,
    find_newest_matching,
    find_position_range,
    property_bounds,
    range_by_bounds,
)
from bookiesim.mledger.position import LedgerList, Position
from bookiesim.proto.pulsar_entry import parse_pulsar_entry

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "BEGIN_INDEX",
    "BEGIN_PUBLISH_TIMESTAMP",
    "END_INDEX",
    "END_PUBLISH_TIMESTAMP",
    "EntryBounds",
    "SeekOutcome",
    "SeekStrategy",
    "entry_index",
    "entry_timestamp",
    "seek_by_index",
    "seek_by_timestamp",
]

BEGIN_PUBLISH_TIMESTAMP: Final = "beginPublishTimestamp"
END_PUBLISH_TIMESTAMP: Final = "endPublishTimestamp"
BEGIN_INDEX: Final = "beginIndex"
END_INDEX: Final = "endIndex"


def entry_timestamp(payload: bytes) -> int | None:
    """The timestamp seeks compare: broker timestamp if present, else publish time."""
    parsed = parse_pulsar_entry(payload)
    if parsed is None:
        return None
    publish_time, broker_timestamp, _ = parsed
    return broker_timestamp if broker_timestamp is not None else publish_time


def entry_index(payload: bytes) -> int | None:
    """BrokerEntryMetadata ``index`` (of the entry's last message), or None."""
    parsed = parse_pulsar_entry(payload)
    return None if parsed is None else parsed[2]


def published_before(target: int) -> Predicate:
    def predicate(payload: bytes) -> bool:
        ts = entry_timestamp(payload)
        return ts is not None and ts < target

    return predicate


def index_below(target: int) -> Predicate:
    def predicate(payload: bytes) -> bool:
        index = entry_index(payload)
        return index is not None and index < target

    return predicate


class EntryBounds:
    """Min and max entry timestamp and index of one ledger's entries, as they are added."""

    def __init__(self) -> None:
        self.min_timestamp: int | None = None
        self.max_timestamp: int | None = None
        self.min_index: int | None = None
        self.max_index: int | None = None
        self.unparsed = 0
        """Entries that are not Pulsar entries: while any, no bounds are claimed."""

    def observe(self, payload: bytes) -> None:
        parsed = parse_pulsar_entry(payload)
        if parsed is None:
            self.unparsed += 1
            return
        publish_time, broker_timestamp, index = parsed
        ts = broker_timestamp if broker_timestamp is not None else publish_time
        if ts is not None:
            self.min_timestamp = ts if self.min_timestamp is None else min(self.min_timestamp, ts)
            self.max_timestamp = ts if self.max_timestamp is None else max(self.max_timestamp, ts)
        if index is not None:
            self.min_index = index if self.min_index is None else min(self.min_index, index)
            self.max_index = index if self.max_index is None else max(self.max_index, index)

    def properties(self) -> dict[str, str]:
        """The PIP-345 properties these bounds justify (none for a kind some entry lacks:
        a ledger claiming bounds it cannot vouch for would make seeks skip entries)."""
        if self.unparsed:
            return {}
        props: dict[str, str] = {}
        if self.min_timestamp is not None and self.max_timestamp is not None:
            props[BEGIN_PUBLISH_TIMESTAMP] = str(self.min_timestamp)
            props[END_PUBLISH_TIMESTAMP] = str(self.max_timestamp)
        if self.min_index is not None and self.max_index is not None:
            props[BEGIN_INDEX] = str(self.min_index)
            props[END_INDEX] = str(self.max_index)
        return props


class SeekStrategy(enum.Enum):
    AUTO = "auto"
    PROPERTIES = "properties"
    CLOSE_TIME = "close-time"
    FULL = "full"


@dataclass(frozen=True)
class SeekOutcome:
    found: Position | None
    """The newest entry before the target (None: none is)."""
    reset_to: Position | None
    """Where a reader seeking the target goes: the entry after ``found``, or the first
    entry (None when the managed ledger has no ledger at all)."""
    entries_read: int
    strategy: SeekStrategy
    """The narrowing actually used."""


def _reset_position(ledgers: LedgerList, found: Position | None) -> Position | None:
    if found is not None:
        return ledgers.next_position(found)
    first = ledgers.first_position()
    if first is not None:
        return first
    return Position(ledgers.ledgers[0].ledger_id, 0) if len(ledgers) else None


async def _search(
    ledgers: LedgerList,
    source: EntrySource,
    predicate: Predicate,
    narrowed: NarrowedRange,
    strategy: SeekStrategy,
) -> SeekOutcome:
    if narrowed.nothing_matches:
        return SeekOutcome(None, _reset_position(ledgers, None), 0, strategy)
    result = await find_newest_matching(
        ledgers,
        source,
        predicate,
        narrowed.start,
        narrowed.end,
        start_matches=narrowed.start_matches,
    )
    found = result.position
    return SeekOutcome(found, _reset_position(ledgers, found), result.entries_read, strategy)


def _by_properties(
    ledgers: LedgerList, begin_key: str, end_key: str, target: int
) -> NarrowedRange | None:
    return range_by_bounds(ledgers, property_bounds(begin_key, end_key), target)


async def seek_by_timestamp(
    ledgers: LedgerList,
    source: EntrySource,
    timestamp: int,
    *,
    max_clock_skew_ms: int = 60_000,
    strategy: SeekStrategy = SeekStrategy.AUTO,
) -> SeekOutcome:
    """The newest entry with entry timestamp < ``timestamp``, and where to reset to."""
    predicate = published_before(timestamp)
    if strategy in (SeekStrategy.AUTO, SeekStrategy.PROPERTIES):
        narrowed = _by_properties(
            ledgers, BEGIN_PUBLISH_TIMESTAMP, END_PUBLISH_TIMESTAMP, timestamp
        )
        if narrowed is not None:
            return await _search(ledgers, source, predicate, narrowed, SeekStrategy.PROPERTIES)
    if strategy in (SeekStrategy.AUTO, SeekStrategy.CLOSE_TIME) and max_clock_skew_ms >= 0:
        start, end = find_position_range(ledgers, timestamp, max_clock_skew_ms)
        if start is not None or end is not None:
            narrowed = NarrowedRange(start, end)
            return await _search(ledgers, source, predicate, narrowed, SeekStrategy.CLOSE_TIME)
    return await _search(ledgers, source, predicate, NarrowedRange(None, None), SeekStrategy.FULL)


async def seek_by_index(
    ledgers: LedgerList,
    source: EntrySource,
    index: int,
    *,
    strategy: SeekStrategy = SeekStrategy.AUTO,
) -> SeekOutcome:
    """The newest entry whose index is below ``index``, and where to reset to: the entry
    holding message ``index`` (or the next one written, past the end)."""
    predicate = index_below(index)
    if strategy in (SeekStrategy.AUTO, SeekStrategy.PROPERTIES):
        narrowed = _by_properties(ledgers, BEGIN_INDEX, END_INDEX, index)
        if narrowed is not None:
            return await _search(ledgers, source, predicate, narrowed, SeekStrategy.PROPERTIES)
    return await _search(ledgers, source, predicate, NarrowedRange(None, None), SeekStrategy.FULL)


def bounds_properties(props: Mapping[str, str]) -> dict[str, str]:
    """Only the PIP-345 keys of a property map."""
    keys = (BEGIN_PUBLISH_TIMESTAMP, END_PUBLISH_TIMESTAMP, BEGIN_INDEX, END_INDEX)
    return {k: props[k] for k in keys if k in props}
