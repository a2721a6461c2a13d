"""Ledger handles: upstream's HandleFactory and LedgerDescriptor (reference §7).

:class:`HandleFactory` hands out one :class:`LedgerDescriptor` per ledger this process has
touched. A *write* handle creates the ledger on first contact (persisting its master key,
also when the first contact is a fencing read) and afterwards checks the key byte for byte
(EUA on a mismatch); a *read-only* handle requires the ledger to exist (ENOLEDGER) and checks
no key.

A descriptor is the trio-side shell around the pure
:class:`~bookiesim.bookie.ledger_state.LedgerStateMachine`: it owns what needs an event loop
(the wait for a fence record to become durable, the wake-up of long-poll LAC watchers) and
the bookie's view of the ledger's LAC.
"""

from __future__ import annotations

import trio

from bookiesim.bookie.errors import BookieIOError, NoLedgerError, UnauthorizedError
from bookiesim.bookie.journal.records import FenceRecord, JournalRecord, MasterKeyRecord
from bookiesim.bookie.ledger_state import LedgerEvent, LedgerState, LedgerStateMachine
from bookiesim.bookie.ledger_storage import LedgerStorage, entry_header

__all__ = ["HandleFactory", "LedgerDescriptor"]


class _FenceWrite:
    """One fence record on its way to disk; every fencing read that arrives meanwhile waits
    for this one, and each sees this write's own outcome."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: BaseException | None = None


class LedgerDescriptor:
    """What the bookie keeps in memory per ledger it has seen in this process."""

    __slots__ = ("_fence_write", "_lac_changed", "lac", "ledger_id", "machine", "master_key")

    def __init__(self, ledger_id: int, master_key: bytes, *, fenced: bool, lac: int = -1) -> None:
        self.ledger_id = ledger_id
        self.master_key = master_key
        self.lac = lac
        self.machine = LedgerStateMachine(fenced=fenced, ledger_id=ledger_id)
        self._fence_write: _FenceWrite | None = None
        # Created only while a long poll waits: replacing an event on every add would cost
        # more than the rest of the add path's bookkeeping.
        self._lac_changed: trio.Event | None = None

    @property
    def state(self) -> LedgerState:
        return self.machine.state

    @property
    def fenced(self) -> bool:
        return self.machine.fenced

    def check_key(self, master_key: bytes) -> None:
        if self.master_key != master_key:
            raise UnauthorizedError(f"master key mismatch for ledger {self.ledger_id}")

    # -- master key -----------------------------------------------------------------------

    def key_record(self) -> MasterKeyRecord | None:
        """The master-key record to journal ahead of this ledger's next record, the first
        time this process journals anything for it (§6.1); None afterwards."""
        machine = self.machine
        if machine.key_journaled:
            return None
        machine.process(LedgerEvent.JOURNAL_KEY)
        return MasterKeyRecord(self.ledger_id, self.master_key)

    def with_key(self, records: list[JournalRecord]) -> list[JournalRecord]:
        """``records`` with the master-key record in front if it is still pending."""
        key = self.key_record()
        if key is not None:
            records.insert(0, key)
        return records

    # -- fencing ----------------------------------------------------------------------------

    @property
    def fence_is_durable(self) -> bool:
        return self.machine.fence_durable

    @property
    def needs_fence_record(self) -> bool:
        """A fencing read must journal a fence record (none durable, none in flight)."""
        return not (self.machine.fence_durable or self.machine.fence_in_flight)

    def begin_fence(self) -> list[JournalRecord]:
        """Move to FENCING and return the records to journal, with :meth:`fence_logged` as
        their completion."""
        records: list[JournalRecord] = [FenceRecord(self.ledger_id)]
        if not self.machine.key_journaled:
            records.insert(0, MasterKeyRecord(self.ledger_id, self.master_key))
        self.machine.process(LedgerEvent.FENCE)
        self._fence_write = _FenceWrite()
        return records

    def fence_logged(self, error: BaseException | None) -> None:
        """The journal's completion for the fence record of :meth:`begin_fence`."""
        write = self._fence_write
        assert write is not None
        write.error = error
        self.machine.process(
            LedgerEvent.FENCE_SYNCED if error is None else LedgerEvent.FENCE_WRITE_FAILED
        )
        write.done.set()

    async def wait_fence_durable(self) -> None:
        """Return once the fence record in flight (or the last one) is durable; EIO if that
        write failed."""
        write = self._fence_write
        assert write is not None, "no fence record was journaled"
        await write.done.wait()
        if write.error is not None:
            raise BookieIOError(f"fence of ledger {self.ledger_id} not persisted: {write.error}")

    # -- LAC and long polls -----------------------------------------------------------------

    def advance_lac(self, lac: int) -> None:
        if lac > self.lac:
            self.lac = lac
            if self._lac_changed is not None:
                self.wake_watchers()

    def wake_watchers(self) -> None:
        event = self._lac_changed
        if event is not None:
            self._lac_changed = None
            event.set()

    async def wait_for_change(self) -> None:
        if self._lac_changed is None:
            self._lac_changed = trio.Event()
        await self._lac_changed.wait()

    def _check(self) -> None:
        self.machine._check()
        assert self.machine.ledger_id == self.ledger_id
        in_flight = self.machine.fence_in_flight
        if in_flight or self.machine.fence_durable:
            assert self._fence_write is not None
            assert self._fence_write.done.is_set() != in_flight

    def __repr__(self) -> str:
        return f"LedgerDescriptor({self.ledger_id}, {self.state.name}, lac={self.lac})"


class HandleFactory:
    """One descriptor per ledger this process has touched, created on demand from storage."""

    __slots__ = ("_handles", "_storage")

    def __init__(self, storage: LedgerStorage) -> None:
        self._storage = storage
        self._handles: dict[int, LedgerDescriptor] = {}

    def get_handle(self, ledger_id: int, master_key: bytes) -> LedgerDescriptor:
        """The write handle: creates the ledger (persisting the key) on first contact;
        afterwards the key must match byte for byte (EUA otherwise)."""
        handle = self._handles.get(ledger_id)
        if handle is None:
            if self._storage.ledger_exists(ledger_id):
                handle = self._load(ledger_id)
            else:
                self._storage.create_ledger(ledger_id, master_key)
                handle = LedgerDescriptor(ledger_id, master_key, fenced=False)
                self._handles[ledger_id] = handle
        handle.check_key(master_key)
        return handle

    def get_read_only_handle(self, ledger_id: int) -> LedgerDescriptor:
        """The read-only handle: the ledger must exist (ENOLEDGER); no key check."""
        handle = self._handles.get(ledger_id)
        if handle is None:
            if not self._storage.ledger_exists(ledger_id):
                raise NoLedgerError(ledger_id)
            handle = self._load(ledger_id)
        return handle

    def peek(self, ledger_id: int) -> LedgerDescriptor | None:
        """The handle if this process has one, without touching storage."""
        return self._handles.get(ledger_id)

    def forget(self, ledger_id: int) -> None:
        """The ledger was deleted: drop its handle (long polls wake and find it gone)."""
        handle = self._handles.pop(ledger_id, None)
        if handle is not None:
            handle.wake_watchers()

    def _load(self, ledger_id: int) -> LedgerDescriptor:
        storage = self._storage
        handle = LedgerDescriptor(
            ledger_id, storage.master_key(ledger_id), fenced=storage.is_fenced(ledger_id)
        )
        last = storage.last_entry_id(ledger_id)
        if last >= 0:
            handle.lac = entry_header(storage.read_entry(ledger_id, last)).lac
        self._handles[ledger_id] = handle
        return handle

    def __len__(self) -> int:
        return len(self._handles)

    def _check(self) -> None:
        for ledger_id, handle in self._handles.items():
            assert handle.ledger_id == ledger_id
            handle._check()
