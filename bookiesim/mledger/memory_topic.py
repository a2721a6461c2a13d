"""An in-memory topic for seek experiments: the ledger list and entries a search reads,
without bookies.

Why: the seek logic reads through :class:`~bookiesim.mledger.finder.EntrySource` and a
:class:`~bookiesim.mledger.position.LedgerList`, so it can be measured and property-tested
on a million entries in memory; ``bookiesim bench seek`` and the hypothesis tests use this,
and the managed ledger itself backs the same interfaces with real ledgers. Entries are
stored as their timestamps and indexes and encoded in Pulsar's layout on each read (a
million encoded entries would not fit comfortably in memory), and every read is counted.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bookiesim.mledger.position import LedgerList, LedgerSummary, Position
from bookiesim.mledger.seek import EntryBounds
from bookiesim.proto.pulsar_entry import encode_pulsar_entry

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["MemoryLedger", "MemoryTopic"]


@dataclass
class MemoryLedger:
    ledger_id: int
    timestamps: array[int] = field(default_factory=lambda: array("q"))
    """Each entry's broker timestamp (what seeks compare)."""
    indexes: array[int] = field(default_factory=lambda: array("q"))
    """Each entry's BrokerEntryMetadata index."""
    close_timestamp: int = 0
    """0 while open."""
    with_properties: bool = True
    """Whether the PIP-345 bounds are recorded for it (closed ledgers; the open one is
    tracked in memory by a managed ledger, so it has them too)."""


class MemoryTopic:
    """Ledgers of Pulsar entries in memory, readable as an entry source."""

    def __init__(self, ledgers: Sequence[MemoryLedger]) -> None:
        self.ledgers = list(ledgers)
        self._by_id = {ledger.ledger_id: ledger for ledger in self.ledgers}
        self.reads = 0

    def ledger_list(self, *, properties: bool = True) -> LedgerList:
        """The topic's ledgers as a search sees them; ``properties=False`` hides the PIP-345
        bounds (a topic written before they existed)."""
        summaries = []
        for ledger in self.ledgers:
            props: dict[str, str] = {}
            if properties and ledger.with_properties and len(ledger.timestamps):
                bounds = EntryBounds()
                bounds.min_timestamp, bounds.max_timestamp = (
                    min(ledger.timestamps),
                    max(ledger.timestamps),
                )
                bounds.min_index, bounds.max_index = min(ledger.indexes), max(ledger.indexes)
                props = bounds.properties()
            summaries.append(
                LedgerSummary(
                    ledger.ledger_id, len(ledger.timestamps), ledger.close_timestamp, props
                )
            )
        return LedgerList(summaries)

    def entry(self, position: Position) -> bytes:
        ledger = self._by_id[position.ledger_id]
        ts = ledger.timestamps[position.entry_id]
        return encode_pulsar_entry(
            b"",
            publish_time=ts,
            broker_timestamp=ts,
            index=ledger.indexes[position.entry_id],
            checksum=False,
        )

    async def read_entry(self, position: Position) -> bytes:
        self.reads += 1
        return self.entry(position)
