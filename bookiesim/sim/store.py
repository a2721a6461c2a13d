"""Each client's window on the simulation's one metadata store, recording ledger writes.

All clients share one :class:`~bookiesim.metadata.memory_store.MemoryStore` (answers at
once, so virtual time does not leap while it works). Each gets its own
:class:`RecordingStore` in front of it, which tells the :class:`History` about every ledger
metadata write that took effect and *who* made it — the invariants need the author (S1:
"the client whose compare-and-set wrote CLOSED"), and the legality of each change (A12) is
checked at the store, whatever the client believed.

Why the record is exact: the memory store yields once at the start of each operation and
then completes it without yielding, so nothing runs between a write taking effect and the
line after ``await`` that records it; the records come in the store's own order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bookiesim.metadata.forwarding import ForwardingStore
from bookiesim.metadata.ledger_paths import ledger_id_from_path
from bookiesim.metadata.ledgers import LedgerMetadata
from bookiesim.metadata.store import ANY_VERSION

if TYPE_CHECKING:
    from bookiesim.metadata.memory_store import MemoryStore
    from bookiesim.sim.history import History

__all__ = ["RecordingStore"]


def _ledger_of(path: str, root: str) -> int | None:
    try:
        return ledger_id_from_path(path, root)
    except ValueError:
        return None


class RecordingStore(ForwardingStore):
    """A :class:`~bookiesim.metadata.store.MetadataStore` for one client (see the module
    docstring). Closing it does not close the shared store."""

    def __init__(self, inner: MemoryStore, client: str, history: History) -> None:
        super().__init__(inner)
        self.client = client
        self.history = history

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        created = await super().create(
            path, value, ephemeral=ephemeral, sequential=sequential, make_parents=make_parents
        )
        self._record(created, value)
        return created

    async def set(self, path: str, value: bytes, expected_version: int) -> int:
        version = await super().set(path, value, expected_version)
        self._record(path, value)
        return version

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        await super().delete(path, expected_version)
        ledger_id = _ledger_of(path, self.ledgers_root)
        if ledger_id is not None:
            self.history.metadata_written(self.client, ledger_id, None)

    async def close(self) -> None:
        """The shared store outlives every client."""

    def _record(self, path: str, value: bytes) -> None:
        ledger_id = _ledger_of(path, self.ledgers_root)
        if ledger_id is not None:
            self.history.metadata_written(self.client, ledger_id, LedgerMetadata.from_bytes(value))
