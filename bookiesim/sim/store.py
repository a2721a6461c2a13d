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

Auto-recovery's marks (``underreplication/ledgers/…/urL…``) are traced as they come and go.
An auto-recovery node gets a :class:`SessionStore`: the memory store's one session never
expires, so the simulation expires a crashed node's ephemerals itself (its ledger locks and
its vote in the auditor election), as ZooKeeper would once the session timed out.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from bookiesim.metadata.errors import MetadataError
from bookiesim.metadata.forwarding import ForwardingStore
from bookiesim.metadata.ledger_paths import ledger_id_from_path
from bookiesim.metadata.ledgers import LedgerMetadata
from bookiesim.metadata.store import ANY_VERSION, Versioned, basename, join_path
from bookiesim.metadata.underreplication_format import (
    LEDGERS,
    UnderReplicationFormatError,
    decode_mark,
    ledger_id_of_mark,
    underreplication_path,
)

if TYPE_CHECKING:
    from bookiesim.metadata.memory_store import MemoryStore
    from bookiesim.sim.history import History

__all__ = ["RecordingStore", "SessionStore"]


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
        self._marks = join_path(underreplication_path(inner.ledgers_root), LEDGERS) + "/"

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
        self._mark(created, value)
        return created

    async def set(self, path: str, value: bytes, expected_version: int) -> int:
        version = await super().set(path, value, expected_version)
        self._record(path, value)
        self._mark(path, value)
        return version

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        await super().delete(path, expected_version)
        ledger_id = _ledger_of(path, self.ledgers_root)
        if ledger_id is not None:
            self.history.metadata_written(self.client, ledger_id, None)
        self._mark(path, None)

    async def close(self) -> None:
        """The shared store outlives every client."""

    def _record(self, path: str, value: bytes) -> None:
        ledger_id = _ledger_of(path, self.ledgers_root)
        if ledger_id is not None:
            self.history.metadata_written(self.client, ledger_id, LedgerMetadata.from_bytes(value))

    def _mark(self, path: str, value: bytes | None) -> None:
        """Trace an under-replication mark written (``value``) or deleted (None)."""
        if not path.startswith(self._marks):
            return
        ledger_id = ledger_id_of_mark(basename(path))
        if ledger_id is None:
            return
        if value is None:
            self.history.trace(f"{self.client}: mark of ledger {ledger_id} removed")
            return
        try:
            replicas, _ = decode_mark(value, path)
        except UnderReplicationFormatError:
            replicas = ("?",)
        self.history.trace(
            f"{self.client}: ledger {ledger_id} marked under-replicated, missing "
            f"{', '.join(replicas)}"
        )


class SessionStore(RecordingStore):
    """A :class:`RecordingStore` for one auto-recovery node, whose ephemerals
    :meth:`expire` removes (see the module docstring).

    :attr:`frozen` is the node's kill -9: set at the crash instant, before its tasks are
    cancelled, so that what their cleanup does (release its locks, withdraw its vote) never
    reaches the store, as nothing a killed process does would. Writes then fail and reads
    find nothing; the ephemerals stay until :meth:`expire`."""

    def __init__(self, inner: MemoryStore, client: str, history: History) -> None:
        super().__init__(inner, client, history)
        self.ephemerals: set[str] = set()
        self.frozen = False

    def _alive(self, path: str) -> None:
        if self.frozen:
            raise MetadataError(f"{path}: {self.client} was killed")

    async def get(self, path: str) -> Versioned | None:
        return None if self.frozen else await super().get(path)

    async def children(self, path: str) -> list[str]:
        self._alive(path)
        return await super().children(path)

    async def set(self, path: str, value: bytes, expected_version: int) -> int:
        self._alive(path)
        return await super().set(path, value, expected_version)

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        self._alive(path)
        created = await super().create(
            path, value, ephemeral=ephemeral, sequential=sequential, make_parents=make_parents
        )
        if ephemeral:
            self.ephemerals.add(created)
        return created

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        self._alive(path)
        await super().delete(path, expected_version)
        self.ephemerals.discard(path)

    async def expire(self) -> int:
        """The session timed out: its ephemerals go (the node is dead by now). How many."""
        gone = 0
        for path in sorted(self.ephemerals):
            with contextlib.suppress(MetadataError):
                await self.inner.delete(path)
                gone += 1
        self.ephemerals.clear()
        return gone
