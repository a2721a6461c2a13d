"""Message TTL: acknowledge what is older than the TTL on a subscription's behalf
(upstream's ``PersistentMessageExpiryMonitor``, reference/pulsar.md §3.6).

One check, :meth:`MessageExpiryMonitor.expire_messages`, does what upstream's does:

1. **by ledger close time** — from the mark-delete ledger on, every closed ledger whose
   close time is more than the TTL ago is expired whole (the cursor is mark-deleted to its
   last entry). Close times are the broker's clock, so producers with clocks in the future
   cannot keep messages alive forever (``testIncorrectClientClock``);
2. **by entry timestamp** — the newest entry published before ``now - TTL`` is found with
   the seek machinery (PIP-345 properties, then close times, then a full search) within the
   entries after the mark-delete position, and mark-deleted.

A check already running makes a concurrent one return False at once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from bookiesim.mledger.errors import ManagedLedgerError
from bookiesim.mledger.position import Position

if TYPE_CHECKING:
    from bookiesim.mledger.cursor import ManagedCursor

__all__ = ["MessageExpiryMonitor"]

log = logging.getLogger(__name__)


class MessageExpiryMonitor:
    """Expires messages of one cursor."""

    def __init__(self, cursor: ManagedCursor) -> None:
        self.cursor = cursor
        self._running = False
        self.expired_checks = 0
        """Checks that moved the mark-delete position."""

    def _expired_by_close_time(self, now: int, ttl_ms: int) -> Position | None:
        ml = self.cursor.ml
        ledgers = ml.ledger_list()
        mark = self.cursor.mark_delete_position
        found: Position | None = None
        for info in ledgers.ledgers:
            if info.ledger_id < mark.ledger_id:
                continue
            if not info.close_timestamp or now <= info.close_timestamp + ttl_ms:
                break
            if info.entries > 0:
                found = Position(info.ledger_id, info.entries - 1)
        return found

    async def expire_messages(self, ttl_seconds: float) -> bool:
        """One check with TTL ``ttl_seconds``; True if the mark-delete position moved."""
        if self._running:
            return False
        self._running = True
        try:
            cursor, ml = self.cursor, self.cursor.ml
            before = cursor.mark_delete_position
            now = ml.clock()
            ttl_ms = int(ttl_seconds * 1000)
            by_close = self._expired_by_close_time(now, ttl_ms)
            if by_close is not None and by_close > cursor.mark_delete_position:
                await cursor.mark_delete(by_close)
            outcome = await ml.seek_by_timestamp(now - ttl_ms)
            if outcome.found is not None and outcome.found > cursor.mark_delete_position:
                await cursor.mark_delete(outcome.found)
            moved = cursor.mark_delete_position != before
            self.expired_checks += moved
            return moved
        finally:
            self._running = False

    async def run(self, ttl_seconds: float, interval: float) -> None:
        """Check every ``interval`` seconds until cancelled."""
        while True:
            try:
                await self.expire_messages(ttl_seconds)
            except ManagedLedgerError as exc:
                log.warning("expiry of %s: %s", self.cursor, exc)
            await trio.sleep(interval)
