"""A durable cursor of a managed ledger: what a subscription has consumed and acknowledged.

State, as upstream's ``ManagedCursorImpl`` keeps it:

* the **mark-delete position** — every entry up to it is acknowledged;
* **individually deleted** entries after it (acknowledged out of order), persisted as
  ``MessageRange``\\ s whose lower end is exclusive and upper end inclusive, one range per
  run of consecutive entries of one ledger; when the entry after the mark-delete position
  is acknowledged, the mark-delete position moves over the run;
* **properties**: mark-delete ``LongProperty``\\ s and PIP-105 ``cursorProperties``;
* the **read position** (in memory only), where the next read starts.

Everything is stored in the cursor's own node, ``/managed-ledgers/<name>/<cursor>``, as a
ManagedCursorInfo with ``cursorsLedgerId = -1`` ("the position is in this record"), written
by compare-and-set after every change and compressed as configured (PIP-146). Upstream
writes positions to a cursor *ledger* while the broker runs and only puts them in the node on
close; keeping them in the node makes each change one metadata write, which is what PIP-146
compresses, at the price of more metadata traffic. A record that upstream left pointing at a
cursor ledger is read from that ledger's last entry (a ``PositionInfo``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sortedcontainers import SortedSet

from bookiesim.metadata.errors import BadVersionError
from bookiesim.mledger.errors import ManagedLedgerFencedError
from bookiesim.mledger.position import LedgerList, Position
from bookiesim.mledger.seek import SeekOutcome, SeekStrategy
from bookiesim.proto import MLDataFormats_pb2 as ml_pb

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from bookiesim.mledger.interfaces import CursorLedger

__all__ = ["ManagedCursor", "acked_ranges"]

NO_CURSOR_LEDGER = -1


def acked_ranges(acked: Iterable[Position]) -> list[tuple[Position, Position]]:
    """Sorted acknowledged positions as open-closed ranges ``(lower, upper]`` of consecutive
    entries of one ledger, upstream's MessageRange convention."""
    ranges: list[tuple[Position, Position]] = []
    for pos in acked:
        if ranges:
            lower, upper = ranges[-1]
            if upper.ledger_id == pos.ledger_id and upper.entry_id + 1 == pos.entry_id:
                ranges[-1] = (lower, pos)
                continue
        ranges.append((Position(pos.ledger_id, pos.entry_id - 1), pos))
    return ranges


def _previous(ledgers: LedgerList, position: Position) -> Position:
    """The entry before ``position`` (or ``(ledger, -1)`` when it is the first)."""
    offset = ledgers.clamp_offset(position, after=True) - 1
    if offset >= 0:
        return ledgers.position_at(offset)
    first = ledgers.ledgers[0].ledger_id if len(ledgers) else position.ledger_id
    return Position(first, -1)


class ManagedCursor:
    """Get one with :meth:`~bookiesim.mledger.managed_ledger.ManagedLedger.open_cursor`; it
    sees its managed ledger through the narrow :class:`~.interfaces.CursorLedger`."""

    def __init__(self, ml: CursorLedger, name: str, mark_delete: Position) -> None:
        self.ml = ml
        self.name = name
        self.mark_delete_position = mark_delete
        self.read_position = ml.ledger_list().next_position(mark_delete)
        self.individually_deleted: SortedSet[Position] = SortedSet()
        self.properties: dict[str, int] = {}
        """Mark-delete properties (``LongProperty``)."""
        self.cursor_properties: dict[str, str] = {}
        """PIP-105 cursor properties (``StringProperty``)."""
        self._version: int | None = None

    def __repr__(self) -> str:
        where = f"{self.ml.name!r}/{self.name!r}"
        return f"ManagedCursor({where}, mark_delete={self.mark_delete_position})"

    # -- creating and loading --------------------------------------------------------------

    @classmethod
    async def create(cls, ml: CursorLedger, name: str, *, earliest: bool) -> ManagedCursor:
        ledgers = ml.ledger_list()
        if earliest:
            first = ledgers.first_position()
            start = _previous(ledgers, first) if first else Position(_first_id(ledgers), -1)
        else:
            last = ledgers.last_position()
            start = last if last is not None else Position(_first_id(ledgers), -1)
        cursor = cls(ml, name, start)
        await cursor.persist()
        return cursor

    @classmethod
    async def load(cls, ml: CursorLedger, name: str) -> ManagedCursor:
        found = await ml.meta.get_cursor_info(ml.name, name)
        if found is None:
            raise KeyError(name)
        info, version = found
        if info.cursorsLedgerId != NO_CURSOR_LEDGER:
            position = await cls._position_from_ledger(ml, info.cursorsLedgerId)
            if position is not None:
                info = position
        mark = Position(info.markDeleteLedgerId, info.markDeleteEntryId)
        cursor = cls(ml, name, mark)
        cursor._version = version
        for rng in info.individualDeletedMessages:
            lower, upper = rng.lowerEndpoint, rng.upperEndpoint
            if lower.ledgerId == upper.ledgerId:
                for entry_id in range(lower.entryId + 1, upper.entryId + 1):
                    cursor.individually_deleted.add(Position(upper.ledgerId, entry_id))
        cursor.properties = {p.name: p.value for p in info.properties}
        cursor.cursor_properties = {p.name: p.value for p in info.cursorProperties}
        cursor.read_position = ml.ledger_list().next_position(mark)
        return cursor

    @staticmethod
    async def _position_from_ledger(
        ml: CursorLedger, ledger_id: int
    ) -> ml_pb.ManagedCursorInfo | None:
        """Upstream's cursor ledger: its last entry is a PositionInfo."""
        handle = await ml.bk.open_ledger(ledger_id, recovery=True)
        if handle.last_add_confirmed < 0:
            return None
        entry = await handle.read_entry(handle.last_add_confirmed)
        position = ml_pb.PositionInfo.FromString(entry.payload)
        info = ml_pb.ManagedCursorInfo(
            cursorsLedgerId=NO_CURSOR_LEDGER,
            markDeleteLedgerId=position.ledgerId,
            markDeleteEntryId=position.entryId,
        )
        info.individualDeletedMessages.extend(position.individualDeletedMessages)
        info.properties.extend(position.properties)
        return info

    # -- the record ----------------------------------------------------------------------------

    def info(self) -> ml_pb.ManagedCursorInfo:
        """The ManagedCursorInfo this cursor stores."""
        info = ml_pb.ManagedCursorInfo(
            cursorsLedgerId=NO_CURSOR_LEDGER,
            markDeleteLedgerId=self.mark_delete_position.ledger_id,
            markDeleteEntryId=self.mark_delete_position.entry_id,
            lastActive=self.ml.clock(),  # deprecated upstream, but still written there
        )
        for lower, upper in acked_ranges(self.individually_deleted):
            rng = info.individualDeletedMessages.add()
            rng.lowerEndpoint.ledgerId, rng.lowerEndpoint.entryId = lower
            rng.upperEndpoint.ledgerId, rng.upperEndpoint.entryId = upper
        for key, value in self.properties.items():
            info.properties.add(name=key, value=value)
        for key, text in self.cursor_properties.items():
            info.cursorProperties.add(name=key, value=text)
        return info

    async def persist(self) -> None:
        """Write the state by compare-and-set (create on first write)."""
        try:
            self._version = await self.ml.meta.put_cursor_info(
                self.ml.name, self.name, self.info(), self._version
            )
        except BadVersionError as exc:
            raise ManagedLedgerFencedError(
                f"cursor {self.ml.name}/{self.name} was changed by another owner: {exc}"
            ) from exc

    # -- reading and acknowledging -----------------------------------------------------------------

    async def read_entries(self, max_entries: int) -> list[tuple[Position, bytes]]:
        """Up to ``max_entries`` from the read position on, skipping acknowledged ones."""
        out: list[tuple[Position, bytes]] = []
        while len(out) < max_entries:
            batch = await self.ml.read_entries(self.read_position, max_entries - len(out))
            if not batch:
                break
            self.read_position = self.ml.ledger_list().next_position(batch[-1][0])
            out.extend(item for item in batch if item[0] not in self.individually_deleted)
        return out

    def _advance_mark_delete(self, ledgers: LedgerList) -> None:
        while self.individually_deleted:
            following = ledgers.next_position(self.mark_delete_position)
            if self.individually_deleted[0] != following:
                break
            self.individually_deleted.pop(0)
            self.mark_delete_position = following

    async def mark_delete(
        self, position: Position, properties: Mapping[str, int] | None = None
    ) -> None:
        """Acknowledge everything up to ``position`` (a position at or before the current
        one changes nothing)."""
        if position <= self.mark_delete_position and properties is None:
            return
        if position > self.mark_delete_position:
            self.mark_delete_position = position
            while self.individually_deleted and self.individually_deleted[0] <= position:
                self.individually_deleted.pop(0)
            self._advance_mark_delete(self.ml.ledger_list())
            self.read_position = max(
                self.read_position, self.ml.ledger_list().next_position(self.mark_delete_position)
            )
        if properties is not None:
            self.properties = dict(properties)
        await self.persist()

    async def delete(self, positions: Iterable[Position]) -> None:
        """Acknowledge single entries (out of order)."""
        changed = False
        for position in positions:
            if position > self.mark_delete_position and position not in self.individually_deleted:
                self.individually_deleted.add(position)
                changed = True
        if changed:
            self._advance_mark_delete(self.ml.ledger_list())
            await self.persist()

    async def reset(self, position: Position) -> None:
        """Move the cursor so that the next read is ``position`` (upstream's resetCursor:
        acknowledgements after it are forgotten)."""
        ledgers = self.ml.ledger_list()
        self.mark_delete_position = _previous(ledgers, position)
        self.read_position = position
        self.individually_deleted.clear()
        await self.persist()

    async def set_cursor_property(self, key: str, value: str) -> None:
        self.cursor_properties[key] = value
        await self.persist()

    # -- seeking --------------------------------------------------------------------------------

    async def seek_by_timestamp(
        self, timestamp: int, strategy: SeekStrategy = SeekStrategy.AUTO
    ) -> SeekOutcome:
        """Reset to the first entry whose timestamp is ``timestamp`` or later."""
        outcome = await self.ml.seek_by_timestamp(timestamp, strategy)
        if outcome.reset_to is not None:
            await self.reset(outcome.reset_to)
        return outcome

    async def seek_by_index(
        self, index: int, strategy: SeekStrategy = SeekStrategy.AUTO
    ) -> SeekOutcome:
        """Reset to the entry holding message ``index``."""
        outcome = await self.ml.seek_by_index(index, strategy)
        if outcome.reset_to is not None:
            await self.reset(outcome.reset_to)
        return outcome

    def backlog(self) -> int:
        """Entries after the mark-delete position not acknowledged individually."""
        ledgers = self.ml.ledger_list()
        after = ledgers.clamp_offset(self.mark_delete_position, after=False) + 1
        return max(0, ledgers.total_entries - after - len(self.individually_deleted))

    def stats(self) -> dict[str, object]:
        return {
            "name": self.name,
            "markDeletePosition": str(self.mark_delete_position),
            "readPosition": str(self.read_position),
            "individuallyDeletedMessages": [
                f"({lower},{upper}]" for lower, upper in acked_ranges(self.individually_deleted)
            ],
            "backlog": self.backlog(),
            "properties": dict(self.properties),
            "cursorProperties": dict(self.cursor_properties),
            "version": self._version,
        }


def _first_id(ledgers: LedgerList) -> int:
    return ledgers.ledgers[0].ledger_id if len(ledgers) else -1
