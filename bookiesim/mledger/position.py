"""Positions in a managed ledger and the ledger list they are counted over, sans I/O.

A managed ledger is a sequence of BookKeeper ledgers; a position is (ledgerId, entryId), and
positions order as tuples. Searches (find newest matching, seek) address entries by their
*offset* from a start position, skipping ledgers with no entries, as upstream's
``getPositionAfterN`` does. :class:`LedgerList` turns positions into global offsets and back
with one bisect, so a search can work on plain integers.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["LedgerList", "LedgerSummary", "Position"]


class Position(NamedTuple):
    """(ledgerId, entryId); tuples order as positions do."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """``"L:E"`` (the form :meth:`__str__` prints)."""
        ledger, sep, entry = text.partition(":")
        if not sep:
            raise ValueError(f"a position is LEDGER:ENTRY, got {text!r}")
        return cls(int(ledger), int(entry))


@dataclass(frozen=True)
class LedgerSummary:
    """What a search needs to know about one ledger of a managed ledger."""

    ledger_id: int
    entries: int
    """Readable entries: ``LedgerInfo.entries`` when closed, LAC + 1 for the open ledger."""
    close_timestamp: int | None
    """``LedgerInfo.timestamp``: broker ms at close, 0 for the open ledger, None if absent."""
    properties: Mapping[str, str] = field(default_factory=dict)
    """PIP-404 per-ledger properties (the open ledger: what the writer knows so far)."""


class LedgerList:
    """Ledgers in ascending id order, indexed so that positions map to global offsets."""

    def __init__(self, ledgers: Sequence[LedgerSummary]) -> None:
        self.ledgers: tuple[LedgerSummary, ...] = tuple(ledgers)
        self._ids = [info.ledger_id for info in self.ledgers]
        if self._ids != sorted(set(self._ids)):
            raise ValueError(f"ledger ids must ascend without repeats: {self._ids}")
        self._first_offset: list[int] = []
        total = 0
        for info in self.ledgers:
            self._first_offset.append(total)
            total += max(0, info.entries)
        self.total_entries = total

    def __len__(self) -> int:
        return len(self.ledgers)

    def index_of(self, ledger_id: int) -> int:
        i = bisect.bisect_left(self._ids, ledger_id)
        if i == len(self._ids) or self._ids[i] != ledger_id:
            raise KeyError(ledger_id)
        return i

    def offset_of(self, position: Position) -> int:
        """The global offset of an entry that exists."""
        i = self.index_of(position.ledger_id)
        if not 0 <= position.entry_id < self.ledgers[i].entries:
            raise KeyError(position)
        return self._first_offset[i] + position.entry_id

    def position_at(self, offset: int) -> Position:
        """The entry at a global offset in ``0 .. total_entries - 1``."""
        if not 0 <= offset < self.total_entries:
            raise IndexError(offset)
        # The last ledger starting at or before the offset that has entries (bisect_right
        # lands after a run of empty ledgers sharing that start).
        i = bisect.bisect_right(self._first_offset, offset) - 1
        while self.ledgers[i].entries <= 0:
            i -= 1
        return Position(self._ids[i], offset - self._first_offset[i])

    def first_position(self) -> Position | None:
        return self.position_at(0) if self.total_entries else None

    def last_position(self) -> Position | None:
        return self.position_at(self.total_entries - 1) if self.total_entries else None

    def last_of(self, index: int) -> Position:
        """The last entry of ``ledgers[index]`` (which must have entries)."""
        info = self.ledgers[index]
        return Position(info.ledger_id, info.entries - 1)

    def clamp_offset(self, position: Position, *, after: bool) -> int:
        """The offset of ``position`` if it exists; otherwise of the next entry after it
        (``after=True``, may be ``total_entries``) or the last one before it (``after=False``,
        may be -1). For positions that a caller computed, not read."""
        i = bisect.bisect_left(self._ids, position.ledger_id)
        if i < len(self._ids) and self._ids[i] == position.ledger_id:
            entries = max(0, self.ledgers[i].entries)
            if 0 <= position.entry_id < entries:
                return self._first_offset[i] + position.entry_id
            if position.entry_id >= entries:
                return self._first_offset[i] + entries - (0 if after else 1)
            return self._first_offset[i] - (0 if after else 1)
        start = self._first_offset[i] if i < len(self._ids) else self.total_entries
        return start if after else start - 1

    def next_position(self, position: Position) -> Position:
        """Where a reader goes after ``position``: the next entry, in a later ledger if need
        be; past the last entry, the next entry the last ledger will get."""
        offset = self.clamp_offset(position, after=False) + 1
        if offset < self.total_entries:
            return self.position_at(offset)
        last = self.ledgers[-1] if self.ledgers else None
        if last is None:
            return Position(position.ledger_id, position.entry_id + 1)
        return Position(last.ledger_id, max(0, last.entries))
