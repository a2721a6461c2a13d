"""A Pulsar-style managed ledger: a topic stored as a sequence of BookKeeper ledgers.

Theory of operation
-------------------
The managed ledger owns one *open* ledger it appends to, and a list of closed ones, all
described by one ManagedLedgerInfo record at ``/managed-ledgers/<name>``
(reference/pulsar.md §5). Its life cycle follows upstream's ``ManagedLedgerImpl``:

* **open** — read the record (creating an empty one if missing), re-open the last ledger
  *with recovery* (which fences a previous owner out), record its final entries, size and a
  close time of now, drop ledgers that ended empty, create a fresh ledger, and write the
  record back by compare-and-set. Unlike upstream at our reference snapshot, the recovered
  ledger keeps every field it had — PIP-404 properties included (upstream #26509).
* **add** — counters move first, then the "full" rule is checked (§5.2): entries ≥
  ``max_entries_per_ledger`` or size ≥ ``max_size_per_ledger_mb``, or older than
  ``maximum_rollover_time_ms``; when full — and older than ``minimum_rollover_time_ms`` if
  that is set — the ledger is closed and the next one created at once. With no minimum, a
  ledger holds exactly ``max_entries_per_ledger`` entries. A timer applies the time rules
  to idle ledgers.
* **close of a ledger** — its LedgerInfo becomes a copy of the old one (properties kept:
  upstream #26227) with entries, size and close timestamp, plus PIP-345's bounds as
  properties; it reaches the store with the next write (normally the creation of the next
  ledger). An empty ledger is dropped and deleted after that write.
* **metadata writes** are serialised by one lock (upstream's ``metadataMutex``) and always
  write the whole record, built *inside* the lock from the current in-memory state, with a
  compare-and-set. A lost compare-and-set means another owner took over: the managed ledger
  is fenced. After a PIP-404 property write only the property changes in memory — entries,
  size and close time are never taken from the record that was written, so a close that
  happened while the write was in flight cannot be undone (upstream #26228).

Entries are stored in Pulsar's layout (:mod:`bookiesim.proto.pulsar_entry`).
:meth:`ManagedLedger.publish` adds broker entry metadata (broker timestamp, index) as a
broker with both interceptors does; the index continues across restarts from the ``index``
property and the last entry.
"""

from __future__ import annotations

import logging
import random
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from bookiesim.client import (
    BKError,
    BookKeeper,
    LedgerFencedError,
    LedgerHandle,
    ReadOnlyLedgerHandle,
)
from bookiesim.metadata.errors import BadVersionError, MetadataError
from bookiesim.mledger.config import ManagedLedgerConfig
from bookiesim.mledger.cursor import ManagedCursor
from bookiesim.mledger.errors import (
    LedgerNotFoundError,
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
)
from bookiesim.mledger.finder import Predicate, find_newest_matching
from bookiesim.mledger.ledger_properties import get_property, remove_property, set_properties
from bookiesim.mledger.meta_store import MetaStore
from bookiesim.mledger.position import LedgerList, Position
from bookiesim.mledger.publishing import Message, encode_messages, wall_clock_ms
from bookiesim.mledger.reading import ReadHandles, read_across, read_one, scan_bounds
from bookiesim.mledger.record import (
    INDEX_PROPERTY,
    LedgerInfo,
    build_record,
    ledger_infos_of,
    ledger_list_of,
    max_end_index,
)
from bookiesim.mledger.rollover import LedgerFill
from bookiesim.mledger.seek import (
    SeekOutcome,
    SeekStrategy,
    seek_by_index,
    seek_by_timestamp,
)
from bookiesim.mledger.state import ManagedLedgerLifecycle, MLEvent

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

    from bookiesim.proto import MLDataFormats_pb2 as ml_pb

__all__ = ["ManagedLedger", "open_managed_ledger"]

log = logging.getLogger(__name__)


class ManagedLedger:
    """One managed ledger; get one with :func:`open_managed_ledger` (see the module
    docstring for the life cycle)."""

    def __init__(
        self,
        bk: BookKeeper,
        name: str,
        config: ManagedLedgerConfig | None = None,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        rng: random.Random | None = None,
    ) -> None:
        self.bk = bk
        self.name = name
        self.config = config or ManagedLedgerConfig()
        self.clock = clock
        self.meta = MetaStore(
            bk.store, self.config.ledger_info_compression, self.config.cursor_info_compression
        )
        self.cursors: dict[str, ManagedCursor] = {}
        self._rng = rng or random.Random()
        self._infos: dict[int, LedgerInfo] = {}
        self._properties: dict[str, str] = {}
        self._terminated: ml_pb.NestedPositionInfo | None = None
        self._version = -1
        self._current: LedgerHandle | None = None
        self._fill = LedgerFill()
        """How full ``_current`` is, for the rollover rules."""
        self._readers = ReadHandles(bk, name, self.config.password)
        self._index = -1
        self._life = ManagedLedgerLifecycle()
        self._to_delete: list[int] = []
        self._metadata_lock = trio.Lock()
        self._add_lock = trio.Lock()
        self._timer_scope: trio.CancelScope | None = None

    def __repr__(self) -> str:
        return f"ManagedLedger({self.name!r}, ledgers={list(self._infos)})"

    # -- opening ----------------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        bk: BookKeeper,
        name: str,
        config: ManagedLedgerConfig | None = None,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        create_if_missing: bool = True,
        rollover_check_interval: float | None = 1.0,
    ) -> ManagedLedger:
        """Open (or create) ``name``: recover the last ledger, create a new one, load the
        cursors. ``rollover_check_interval`` seconds between the timer's checks of the
        time-based rollover rules (None: only at adds and :meth:`check_rollover`); the
        timer runs in the client's nursery until :meth:`close`."""
        ml = cls(bk, name, config, clock=clock)
        await ml._initialize(create_if_missing)
        if rollover_check_interval is not None:
            ml._timer_scope = trio.CancelScope()
            bk.nursery.start_soon(ml._rollover_timer, rollover_check_interval, ml._timer_scope)
        return ml

    async def _initialize(self, create_if_missing: bool) -> None:
        found = await self.meta.get_ledger_info(self.name, create_if_missing=create_if_missing)
        if found is None:
            raise ManagedLedgerError(f"managed ledger {self.name!r} does not exist")
        info, self._version = found
        now = self.clock()
        self._infos = ledger_infos_of(info, now)
        self._properties = {kv.key: kv.value for kv in info.properties}
        if info.HasField("terminatedPosition"):
            self._terminated = info.terminatedPosition
        self._index = max(-1, int(self._properties.get(INDEX_PROPERTY, "-1")))
        if self._infos:
            await self._recover_last_ledger(now)
        for ledger_id, li in list(self._infos.items()):
            if li.HasField("entries") and li.entries == 0:
                del self._infos[ledger_id]
                self._to_delete.append(ledger_id)
        self._index = max(self._index, max_end_index(self._infos.values()))
        if self._terminated is None:
            await self._create_ledger()  # also "saves it back"
        else:
            async with self._metadata_lock:
                await self._write_info()
        for cursor_name in await self.meta.cursors(self.name):
            self.cursors[cursor_name] = await ManagedCursor.load(self, cursor_name)

    async def _recover_last_ledger(self, now: int) -> None:
        last_id = max(self._infos)
        li = self._infos[last_id]
        # Recovery fences the previous owner's handle, so it can add no more entries.
        handle = await self.bk.open_ledger(last_id, recovery=True, password=self.config.password)
        self._readers.keep(last_id, handle)
        entries = handle.last_add_confirmed + 1
        if li.HasField("entries") and li.entries == entries:
            return  # closed in the record already (a clean close wrote it)
        # Keep every field the record had (properties, offload context): upstream #26509
        # rebuilt this LedgerInfo from scratch here and so lost the last ledger's properties.
        li.entries, li.size, li.timestamp = entries, handle.length, now
        if entries > 0:
            bounds, last_index = await scan_bounds(handle, entries)
            set_properties(li, bounds.properties())
            if last_index is not None:
                self._index = max(self._index, last_index)

    # -- the record ---------------------------------------------------------------------------

    def _record(self, extra: LedgerInfo | None = None) -> ml_pb.ManagedLedgerInfo:
        return build_record(
            self._infos.values(), self._properties, self._index, self._terminated, extra
        )

    async def _write_info(self, record: ml_pb.ManagedLedgerInfo | None = None) -> None:
        """Compare-and-set the whole record (the caller holds the metadata lock)."""
        if self._life.fenced:
            raise ManagedLedgerFencedError(f"managed ledger {self.name!r} is fenced")
        try:
            self._version = await self.meta.put_ledger_info(
                self.name, record or self._record(), self._version
            )
        except BadVersionError as exc:
            self._life.fire(MLEvent.FENCE)
            raise ManagedLedgerFencedError(
                f"managed ledger {self.name!r}: its metadata was changed by another owner "
                f"({exc}); fenced"
            ) from exc
        await self._delete_dropped_ledgers()

    async def _delete_dropped_ledgers(self) -> None:
        while self._to_delete:
            ledger_id = self._to_delete.pop()
            self._readers.forget(ledger_id)
            await self._delete_quietly(ledger_id)  # on failure the data is unreachable already

    # -- ledgers ------------------------------------------------------------------------------

    async def _create_ledger(self) -> None:
        config = self.config
        handle = await self.bk.create_ledger(
            config.ensemble_size, config.write_quorum, config.ack_quorum, password=config.password
        )
        info = LedgerInfo(ledgerId=handle.ledger_id, timestamp=0)
        try:
            async with self._metadata_lock:
                await self._write_info(self._record(extra=info))
        except (ManagedLedgerError, MetadataError):
            await self._delete_quietly(handle.ledger_id)
            raise
        self._infos[handle.ledger_id] = info
        self._current = handle
        self._fill = LedgerFill.new(config, self.clock(), self._rng)
        log.info("%s: ledger %d opened", self.name, handle.ledger_id)

    async def _delete_quietly(self, ledger_id: int) -> None:
        try:
            await self.bk.delete_ledger(ledger_id)
        except (BKError, MetadataError) as exc:
            log.warning("%s: could not delete ledger %d: %s", self.name, ledger_id, exc)

    def _ledger_closed(self, handle: LedgerHandle) -> None:
        """The ledger's final info, in memory: a copy of what it had (properties included,
        unlike upstream before #26227) with entries, size, close time and PIP-345 bounds."""
        ledger_id = handle.ledger_id
        entries = handle.last_add_confirmed + 1
        if entries <= 0:
            self._infos.pop(ledger_id, None)
            self._to_delete.append(ledger_id)
            return
        li = self._infos[ledger_id]
        li.entries, li.size, li.timestamp = entries, handle.length, self.clock()
        set_properties(li, self._fill.bounds.properties())
        self._readers.keep(ledger_id, handle)

    async def _rollover(self) -> None:
        handle, self._current = self._current, None
        if handle is None:
            return
        try:
            await handle.close()
        except LedgerFencedError as exc:
            self._life.fire(MLEvent.FENCE)
            raise ManagedLedgerFencedError(
                f"managed ledger {self.name!r}: ledger {handle.ledger_id} was fenced by "
                "another owner"
            ) from exc
        self._ledger_closed(handle)
        await self._create_ledger()

    async def check_rollover(self) -> bool:
        """Apply the time-based rules now (the timer calls this): roll over a ledger that
        has entries and is full by age, or idle for ``inactive_ledger_rollover_time_ms``."""
        async with self._add_lock:
            if self._life.closed or self._life.fenced or self._current is None:
                return False
            if self._fill.entries == 0:
                return False
            now = self.clock()
            if not (self._fill.is_idle(self.config, now) or self._fill.is_full(self.config, now)):
                return False
            await self._rollover()
            return True

    async def _rollover_timer(self, interval: float, scope: trio.CancelScope) -> None:
        with scope:
            while not self._life.closed and not self._life.fenced:
                await trio.sleep(interval)
                try:
                    await self.check_rollover()
                except (ManagedLedgerError, BKError, MetadataError) as exc:
                    log.warning("%s: timed rollover failed: %s", self.name, exc)

    # -- adding ---------------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if self._life.closed:
            raise ManagedLedgerClosedError(f"managed ledger {self.name!r} is closed")
        if self._life.fenced:
            raise ManagedLedgerFencedError(f"managed ledger {self.name!r} is fenced")
        if self._terminated is not None:
            raise ManagedLedgerClosedError(f"managed ledger {self.name!r} is terminated")

    async def _writable_ledger(self) -> LedgerHandle:
        self._check_writable()
        handle = self._current
        if handle is not None and handle.error is not None:
            if isinstance(handle.error, LedgerFencedError):
                self._life.fire(MLEvent.FENCE)  # someone recovered our ledger: a new owner
                raise ManagedLedgerFencedError(
                    f"managed ledger {self.name!r}: ledger {handle.ledger_id} fenced"
                ) from handle.error
            await self._rollover()  # a broken ledger: close what it has and go on
            handle = self._current
        if handle is None:  # a previous rollover failed half-way
            await self._create_ledger()
            handle = self._current
        assert handle is not None
        return handle

    async def _add_locked(self, payloads: Sequence[bytes]) -> list[Position]:
        positions: list[Position] = []
        while len(positions) < len(payloads):
            handle = await self._writable_ledger()
            batch = payloads[len(positions) :]
            batch = batch[: self._fill.fits(self.config, self.clock(), batch)]
            futures = [handle.append_async(payload) for payload in batch]
            for future, payload in zip(futures, batch, strict=True):
                try:
                    entry_id = await future.result()
                except LedgerFencedError as exc:
                    # Only a recovery fences a ledger: another owner opened the topic.
                    self._life.fire(MLEvent.FENCE)
                    raise ManagedLedgerFencedError(
                        f"managed ledger {self.name!r}: ledger {handle.ledger_id} was fenced "
                        "by another owner"
                    ) from exc
                positions.append(Position(handle.ledger_id, entry_id))
                self._fill.add(payload)
                if self._fill.bounds.max_index is not None:
                    self._index = max(self._index, self._fill.bounds.max_index)
            self._fill.last_add_ms = self.clock()
            if self._fill.is_full(self.config, self._fill.last_add_ms):
                await self._rollover()
        return positions

    async def add_entries(self, payloads: Sequence[bytes]) -> list[Position]:
        """Append entries as they are (pipelined within a ledger); their positions."""
        async with self._add_lock:
            return await self._add_locked(payloads)

    async def add_entry(self, payload: bytes) -> Position:
        return (await self.add_entries([payload]))[0]

    async def publish(self, messages: Sequence[Message]) -> list[Position]:
        """Store messages as a broker does: each in Pulsar's entry layout with a CRC32C
        checksum and, if configured, broker entry metadata (broker timestamp and the index
        of the entry's last message, counting from 0 across the topic)."""
        async with self._add_lock:
            payloads = encode_messages(
                messages,
                self.clock,
                last_index=self._index,
                broker_entry_metadata=self.config.broker_entry_metadata,
            )
            return await self._add_locked(payloads)

    # -- reading ----------------------------------------------------------------------------------

    def ledger_list(self) -> LedgerList:
        """The ledgers as searches see them; the open ledger with what it holds so far."""
        current = self._current.ledger_id if self._current is not None else None
        return ledger_list_of(self._infos, current, self._fill)

    @property
    def last_confirmed_position(self) -> Position | None:
        return self.ledger_list().last_position()

    @property
    def last_index(self) -> int:
        """The index of the last message stored (-1: none)."""
        return self._index

    @property
    def is_closed(self) -> bool:
        return self._life.closed

    @property
    def is_fenced(self) -> bool:
        return self._life.fenced

    async def _reader(self, ledger_id: int) -> ReadOnlyLedgerHandle:
        if self._current is not None and ledger_id == self._current.ledger_id:
            return self._current
        return await self._readers.get(ledger_id, known=ledger_id in self._infos)

    async def read_entry(self, position: Position) -> bytes:
        """One entry's payload (an :class:`~bookiesim.mledger.finder.EntrySource`)."""
        return await read_one(self.name, self._reader, position)

    async def read_entries(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
        """Up to ``max_entries`` entries from ``start`` on (across ledgers)."""
        return await read_across(self.ledger_list(), self._reader, start, max_entries)

    # -- finding ----------------------------------------------------------------------------------

    async def find_newest_matching(
        self, predicate: Predicate, start: Position | None = None, end: Position | None = None
    ) -> Position | None:
        """The last position of ``[start, end]`` (inclusive; None: from the first / to the
        last entry) where the monotone ``predicate`` holds, acknowledgements ignored
        (upstream's ``isFindFromLedger`` variant), without reading outside the range."""
        result = await find_newest_matching(self.ledger_list(), self, predicate, start, end)
        return result.position

    async def seek_by_timestamp(
        self, timestamp: int, strategy: SeekStrategy = SeekStrategy.AUTO
    ) -> SeekOutcome:
        return await seek_by_timestamp(
            self.ledger_list(),
            self,
            timestamp,
            max_clock_skew_ms=self.config.cursor_reset_max_clock_skew_ms,
            strategy=strategy,
        )

    async def seek_by_index(
        self, index: int, strategy: SeekStrategy = SeekStrategy.AUTO
    ) -> SeekOutcome:
        return await seek_by_index(self.ledger_list(), self, index, strategy=strategy)

    # -- PIP-404 per-ledger properties ------------------------------------------------------------

    def _known_ledger(self, ledger_id: int) -> LedgerInfo:
        if ledger_id not in self._infos:
            raise LedgerNotFoundError(
                f"{self.name}: ledger {ledger_id} not found (not one of this managed "
                "ledger's ledgers, or trimmed)"
            )
        return self._infos[ledger_id]

    async def _change_ledger_properties(
        self, ledger_id: int, change: Callable[[LedgerInfo], None]
    ) -> None:
        if self._life.fenced:
            raise ManagedLedgerFencedError(f"managed ledger {self.name!r} is fenced")
        self._known_ledger(ledger_id)
        async with self._metadata_lock:
            current = self._known_ledger(ledger_id)  # may have been dropped meanwhile
            record = self._record()
            for li in record.ledgerInfo:
                if li.ledgerId == ledger_id:
                    change(li)
            await self._write_info(record)
            # Only the properties move into memory: entries, size and close time stay what
            # they are *now* (upstream #26228 restored them from the written record).
            change(current)

    async def add_ledger_property(self, ledger_id: int, key: str, value: str) -> None:
        """Set ``key`` on one ledger (the open one included) and persist it."""
        await self._change_ledger_properties(ledger_id, lambda li: set_properties(li, {key: value}))

    async def remove_ledger_property(self, ledger_id: int, key: str) -> None:
        """Remove ``key`` (a missing key still writes the record, as upstream does)."""
        await self._change_ledger_properties(ledger_id, lambda li: remove_property(li, key))

    def get_ledger_property(self, ledger_id: int, key: str) -> str | None:
        """The value in memory, or None; raises :class:`LedgerNotFoundError`."""
        li = self._known_ledger(ledger_id)
        if self._current is not None and ledger_id == self._current.ledger_id:
            value = get_property(li, key)
            return value if value is not None else self._fill.bounds.properties().get(key)
        return get_property(li, key)

    def ledger_info(self, ledger_id: int) -> LedgerInfo:
        """A copy of one ledger's info as it is in memory."""
        copy = LedgerInfo()
        copy.CopyFrom(self._known_ledger(ledger_id))
        return copy

    # -- cursors ----------------------------------------------------------------------------------

    async def open_cursor(self, name: str, *, earliest: bool = False) -> ManagedCursor:
        """The cursor ``name``, created at the end (or at the first entry, ``earliest``)
        if it does not exist."""
        cursor = self.cursors.get(name)
        if cursor is None:
            cursor = await ManagedCursor.create(self, name, earliest=earliest)
            self.cursors[name] = cursor
        return cursor

    # -- stats and closing -------------------------------------------------------------------------

    def stats(self) -> dict[str, object]:
        """What ``bookiesim topic stats`` prints (upstream's internal stats, in short)."""
        current = self._current.ledger_id if self._current is not None else None
        ledgers = [
            {
                "ledgerId": summary.ledger_id,
                "entries": summary.entries,
                "size": self._fill.size
                if summary.ledger_id == current
                else self._infos[summary.ledger_id].size,
                "timestamp": summary.close_timestamp,
                "properties": dict(summary.properties),
            }
            for summary in self.ledger_list().ledgers
        ]
        last = self.last_confirmed_position
        return {
            "name": self.name,
            "ledgers": ledgers,
            "entries": self.ledger_list().total_entries,
            "lastConfirmedEntry": None if last is None else str(last),
            "lastIndex": self._index,
            "properties": dict(self._properties),
            "version": self._version,
            "state": "fenced" if self._life.fenced else ("closed" if self._life.closed else "open"),
            "cursors": sorted(self.cursors),
        }

    def _check(self) -> None:
        """Assert the invariants between operations (tests call it); O(ledgers)."""
        self._life._check()
        assert list(self._infos) == sorted(self._infos), "ledgers are kept in id order"
        assert min(self._index + 1, self._fill.entries, self._fill.size) >= 0
        if self._life.closed or self._terminated is not None:
            assert self._current is None, "a closed or terminated ML has no open ledger"
        if self._current is not None:
            assert self._current.ledger_id == max(self._infos), "it appends to its last ledger"
            assert self._fill.entries == self._current.last_add_confirmed + 1
        for ledger_id, li in self._infos.items():
            if self._current is None or ledger_id != self._current.ledger_id:
                assert not li.HasField("entries") or li.entries > 0, "empty ledgers are dropped"
        assert all(name == c.name for name, c in self.cursors.items())

    async def close(self) -> None:
        """Close the open ledger and write its final info (so a later open need not recover
        it), and stop the timer. Cursors persist their state as they change."""
        async with self._add_lock:
            if self._life.closed:
                return
            self._life.fire(MLEvent.CLOSE)
            if self._timer_scope is not None:
                self._timer_scope.cancel()
            handle, self._current = self._current, None
            if handle is None or self._life.fenced:
                return
            await handle.close()
            self._ledger_closed(handle)
            async with self._metadata_lock:
                await self._write_info()

    def abandon(self) -> None:
        """Stop the timer and close nothing, as if the owner had crashed (for tests). The
        object still works, as a zombie owner would: its writes fail once another owner has
        opened the managed ledger."""
        if self._timer_scope is not None:
            self._timer_scope.cancel()


@asynccontextmanager
async def open_managed_ledger(
    bk: BookKeeper,
    name: str,
    config: ManagedLedgerConfig | None = None,
    *,
    clock: Callable[[], int] = wall_clock_ms,
    create_if_missing: bool = True,
    rollover_check_interval: float | None = 1.0,
) -> AsyncIterator[ManagedLedger]:
    """A managed ledger for the block; closed after it (unless fenced or abandoned)."""
    ml = await ManagedLedger.open(
        bk,
        name,
        config,
        clock=clock,
        create_if_missing=create_if_missing,
        rollover_check_interval=rollover_check_interval,
    )
    try:
        yield ml
    finally:
        if not ml.is_closed:
            await ml.close()
