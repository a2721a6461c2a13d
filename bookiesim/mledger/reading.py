"""Reading a managed ledger's entries: the read handles it keeps, reads across ledgers, and
the scan that recovers a ledger's PIP-345 bounds.

Kept apart from :mod:`.managed_ledger` because reading touches none of its life cycle: it
needs the ledger list (what exists and how many entries each holds) and a handle per ledger.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from bookiesim.client import BookKeeper, NoSuchLedgerError, ReadOnlyLedgerHandle
from bookiesim.mledger.errors import LedgerNotFoundError
from bookiesim.mledger.position import LedgerList, Position
from bookiesim.mledger.seek import EntryBounds, entry_index

__all__ = ["READ_BATCH", "ReadHandles", "read_across", "scan_bounds"]

READ_BATCH: Final = 1000
"""Entries per read request when a whole ledger is scanned."""

Reader = Callable[[int], Awaitable[ReadOnlyLedgerHandle]]


class ReadHandles:
    """Read-only handles of one managed ledger's ledgers, opened on first read and kept
    (upstream's ``ledgerCache``) until the ledger is deleted."""

    def __init__(self, bk: BookKeeper, name: str, password: bytes) -> None:
        self._bk = bk
        self._name = name
        self._password = password
        self._handles: dict[int, ReadOnlyLedgerHandle] = {}

    def keep(self, ledger_id: int, handle: ReadOnlyLedgerHandle) -> None:
        self._handles[ledger_id] = handle

    def forget(self, ledger_id: int) -> None:
        self._handles.pop(ledger_id, None)

    async def get(self, ledger_id: int, *, known: bool) -> ReadOnlyLedgerHandle:
        """The handle of ``ledger_id``, opened now if needed; ``known``: the ledger is one
        of the managed ledger's (else :class:`LedgerNotFoundError`)."""
        handle = self._handles.get(ledger_id)
        if handle is None:
            if not known:
                raise LedgerNotFoundError(f"{self._name}: ledger {ledger_id} not found")
            handle = await self._bk.open_ledger(ledger_id, password=self._password)
            self._handles[ledger_id] = handle
        return handle


async def read_one(name: str, reader: Reader, position: Position) -> bytes:
    """One entry's payload; a ledger deleted under us is :class:`LedgerNotFoundError`."""
    handle = await reader(position.ledger_id)
    try:
        return (await handle.read_entries(position.entry_id, position.entry_id))[0].payload
    except NoSuchLedgerError as exc:
        raise LedgerNotFoundError(f"{name}: ledger {position.ledger_id} is gone") from exc


async def read_across(
    ledgers: LedgerList, reader: Reader, start: Position, max_entries: int
) -> list[tuple[Position, bytes]]:
    """Up to ``max_entries`` entries from ``start`` on, across ledgers, one read request per
    ledger."""
    offset = ledgers.clamp_offset(start, after=True)
    out: list[tuple[Position, bytes]] = []
    while len(out) < max_entries and offset < ledgers.total_entries:
        first = ledgers.position_at(offset)
        info = ledgers.ledgers[ledgers.index_of(first.ledger_id)]
        last_id = min(info.entries - 1, first.entry_id + max_entries - len(out) - 1)
        handle = await reader(first.ledger_id)
        entries = await handle.read_entries(first.entry_id, last_id)
        out.extend((Position(first.ledger_id, entry.entry_id), entry.payload) for entry in entries)
        offset += last_id - first.entry_id + 1
    return out


async def scan_bounds(handle: ReadOnlyLedgerHandle, entries: int) -> tuple[EntryBounds, int | None]:
    """The PIP-345 bounds of a ledger's first ``entries`` entries (> 0), read in batches,
    and the index of its last entry (None: it has none)."""
    bounds = EntryBounds()
    for first in range(0, entries, READ_BATCH):
        last = min(entries, first + READ_BATCH) - 1
        for entry in await handle.read_entries(first, last):
            bounds.observe(entry.payload)
    last_index = entry_index((await handle.read_entry(entries - 1)).payload)
    return bounds, last_index
