"""What a cursor needs from its managed ledger, as a protocol.

Upstream splits the ``ManagedLedger`` and ``ManagedCursor`` interfaces from their ``Impl``
classes, so the cursor code depends on an interface and the ledger code on the cursor. This is
the same split, kept as narrow as the cursor's use: :mod:`.cursor` imports this module and
never :mod:`.managed_ledger`, and :mod:`.managed_ledger` imports :mod:`.cursor` — the
arrows point one way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from bookiesim.mledger.seek import SeekOutcome, SeekStrategy

if TYPE_CHECKING:
    from collections.abc import Callable

    from bookiesim.client import BookKeeper
    from bookiesim.mledger.meta_store import MetaStore
    from bookiesim.mledger.position import LedgerList, Position

__all__ = ["CursorLedger"]


class CursorLedger(Protocol):
    """The managed ledger as its cursors see it (:class:`~.managed_ledger.ManagedLedger`
    implements it)."""

    @property
    def name(self) -> str: ...

    @property
    def bk(self) -> BookKeeper:
        """The client, to read a cursor ledger upstream left behind."""
        ...

    @property
    def meta(self) -> MetaStore:
        """Where the cursor records live."""
        ...

    @property
    def clock(self) -> Callable[[], int]:
        """Wall-clock milliseconds (the ledger's clock, so tests can move it)."""
        ...

    def ledger_list(self) -> LedgerList: ...

    async def read_entries(
        self, start: Position, max_entries: int
    ) -> list[tuple[Position, bytes]]: ...

    async def seek_by_timestamp(
        self, timestamp: int, strategy: SeekStrategy = SeekStrategy.AUTO
    ) -> SeekOutcome: ...

    async def seek_by_index(
        self, index: int, strategy: SeekStrategy = SeekStrategy.AUTO
    ) -> SeekOutcome: ...
