"""An add in flight: :class:`AddFuture`, what :meth:`LedgerHandle.append_async` returns.

The handle (:mod:`.ledger_handle`) records each bookie's ack on it and settles it, in entry
order, once Qa bookies of the entry's write set stored it, or with the error that stopped
the handle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from bookiesim.client.errors import BKError

__all__ = ["AddFuture"]


class AddFuture:
    """An add in flight: :meth:`result` waits until it is acknowledged (in entry order)."""

    __slots__ = (
        "_done",
        "_event",
        "acked",
        "body",
        "entry_id",
        "error",
        "length",
        "quorum",
        "sent",
    )

    def __init__(self, entry_id: int, length: int, body: bytes) -> None:
        self.entry_id = entry_id
        self.length = length
        self.body = body
        self.acked: set[int] = set()
        self.quorum = False
        self.sent = False
        self._done = False
        self._event: trio.Event | None = None
        self.error: BKError | None = None

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("failed" if self.error else "acked")
        return f"AddFuture(entry_id={self.entry_id}, {state})"

    @property
    def done(self) -> bool:
        return self._done

    def _finish(self, error: BKError | None) -> None:
        self._done = True
        self.error = error
        self.body = b""
        if self._event is not None:
            self._event.set()

    async def result(self) -> int:
        """The entry id once acknowledged; raises the add's error if it failed."""
        if not self._done:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()
        if self.error is not None:
            raise self.error
        return self.entry_id
