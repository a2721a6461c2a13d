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

Entries are stored in Pulsar's layout (:mod:`.entry_format`). :meth:`ManagedLedger.publish`
adds broker entry metadata (broker timestamp, index) as a broker with both interceptors
does; the index continues across restarts from the ``index`` property and the last entry.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import trio

from bookiesim.client import (
    BKError,
    BookKeeper,
    LedgerFencedError,
    LedgerHandle,
    NoSuchLedgerError,
    ReadOnlyLedgerHandle,
)
from bookiesim.metadata.errors import BadVersionError, MetadataError
from bookiesim.mledger.config import ManagedLedgerConfig
from bookiesim.mledger.entry_format import encode_pulsar_entry
from bookiesim.mledger.errors import (
    LedgerNotFoundError,
    ManagedLedgerClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
)
from bookiesim.mledger.finder import Predicate, find_newest_matching
from bookiesim.mledger.ledger_properties import (
    get_property,
    properties_of,
    remove_property,
    set_properties,
)
from bookiesim.mledger.meta_store import MetaStore
from bookiesim.mledger.position import LedgerList, LedgerSummary, Position
from bookiesim.mledger.seek import (
    END_INDEX,
    EntryBounds,
    SeekOutcome,
    SeekStrategy,
    bounds_properties,
    entry_index,
    seek_by_index,
    seek_by_timestamp,
)
from bookiesim.proto import MLDataFormats_pb2 as ml_pb

if TYPE_CHECKING:
    from bookiesim.mledger.cursor import ManagedCursor

__all__ = ["ManagedLedger", "Message", "open_managed_ledger", "wall_clock_ms"]

log = logging.getLogger(__name__)

LedgerInfo = ml_pb.ManagedLedgerInfo.LedgerInfo
INDEX_PROPERTY: Final = "index"
"""ML property holding the last assigned index, as upstream's index interceptor stores it."""
ROLLOVER_JITTER: Final = 0.05
"""Upstream spreads the max-rollover timer by up to 5% so ledgers do not roll together."""
READ_BATCH: Final = 1000


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Message:
    """What a producer hands the broker: a payload and its MessageMetadata fields."""

    payload: bytes
    publish_time: int | None = None
    """Client clock ms; None: the managed ledger's clock at publish."""
    num_messages: int = 1
    producer_name: str = "bookiesim"


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
        self._current_entries = 0
        self._current_size = 0
        self._bounds = EntryBounds()
        self._created_ms = 0
        self._last_add_ms = 0
        self._rollover_after_ms = 0.0
        self._readers: dict[int, ReadOnlyLedgerHandle] = {}
        self._index = -1
        self._fenced = False
        self._closed = False
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
        for li in sorted(info.ledgerInfo, key=lambda li: li.ledgerId):
            copy = LedgerInfo()
            copy.CopyFrom(li)
            if not copy.timestamp:  # upstream patches missing and 0 close times to now
                copy.timestamp = now
            self._infos[copy.ledgerId] = copy
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
        for li in self._infos.values():
            end_index = properties_of(li).get(END_INDEX)
            if end_index is not None and end_index.lstrip("-").isdigit():
                self._index = max(self._index, int(end_index))
        if self._terminated is None:
            await self._create_ledger()  # also "saves it back"
        else:
            async with self._metadata_lock:
                await self._write_info()
        from bookiesim.mledger.cursor import ManagedCursor

        for cursor_name in await self.meta.cursors(self.name):
            self.cursors[cursor_name] = await ManagedCursor.load(self, cursor_name)

    async def _recover_last_ledger(self, now: int) -> None:
        last_id = max(self._infos)
        li = self._infos[last_id]
        # Recovery fences the previous owner's handle, so it can add no more entries.
        handle = await self.bk.open_ledger(last_id, recovery=True, password=self.config.password)
        self._readers[last_id] = handle
        entries = handle.last_add_confirmed + 1
        if li.HasField("entries") and li.entries == entries:
            return  # closed in the record already (a clean close wrote it)
        # Keep every field the record had (properties, offload context): upstream #26509
        # rebuilt this LedgerInfo from scratch here and so lost the last ledger's properties.
        li.entries, li.size, li.timestamp = entries, handle.length, now
        if entries > 0:
            bounds = EntryBounds()
            for first in range(0, entries, READ_BATCH):
                last = min(entries, first + READ_BATCH) - 1
                for entry in await handle.read_entries(first, last):
                    bounds.observe(entry.payload)
            set_properties(li, bounds.properties())
            last_index = entry_index((await handle.read_entry(entries - 1)).payload)
            if last_index is not None:
                self._index = max(self._index, last_index)

    # -- the record ---------------------------------------------------------------------------

    def _record(self, extra: LedgerInfo | None = None) -> ml_pb.ManagedLedgerInfo:
        info = ml_pb.ManagedLedgerInfo()
        for li in self._infos.values():
            info.ledgerInfo.add().CopyFrom(li)
        if extra is not None:
            info.ledgerInfo.add().CopyFrom(extra)
        props = dict(self._properties)
        if self._index >= 0:
            props[INDEX_PROPERTY] = str(self._index)
        for key, value in props.items():
            info.properties.add(key=key, value=value)
        if self._terminated is not None:
            info.terminatedPosition.CopyFrom(self._terminated)
        return info

    async def _write_info(self, record: ml_pb.ManagedLedgerInfo | None = None) -> None:
        """Compare-and-set the whole record (the caller holds the metadata lock)."""
        if self._fenced:
            raise ManagedLedgerFencedError(f"managed ledger {self.name!r} is fenced")
        try:
            self._version = await self.meta.put_ledger_info(
                self.name, record or self._record(), self._version
            )
        except BadVersionError as exc:
            self._fenced = True
            raise ManagedLedgerFencedError(
                f"managed ledger {self.name!r}: its metadata was changed by another owner "
                f"({exc}); fenced"
            ) from exc
        await self._delete_dropped_ledgers()

    async def _delete_dropped_ledgers(self) -> None:
        while self._to_delete:
            ledger_id = self._to_delete.pop()
            self._readers.pop(ledger_id, None)
            try:
                await self.bk.delete_ledger(ledger_id)
            except (BKError, MetadataError) as exc:  # the data is unreachable already
                log.info("%s: could not delete empty ledger %d: %s", self.name, ledger_id, exc)

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
        self._current_entries = self._current_size = 0
        self._bounds = EntryBounds()
        self._created_ms = self._last_add_ms = self.clock()
        jitter = 1 + self._rng.uniform(0, ROLLOVER_JITTER)
        self._rollover_after_ms = config.maximum_rollover_time_ms * jitter
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
        set_properties(li, self._bounds.properties())
        self._readers[ledger_id] = handle

    def _is_full(self, now: int) -> bool:
        """Upstream's ``currentLedgerIsFull`` (reference §5.2)."""
        config = self.config
        space = (
            self._current_entries >= config.max_entries_per_ledger
            or self._current_size >= config.max_size_per_ledger_bytes
        )
        age = now - self._created_ms
        if not (space or age >= self._rollover_after_ms):
            return False
        return config.minimum_rollover_time_ms <= 0 or age > config.minimum_rollover_time_ms

    async def _rollover(self) -> None:
        handle, self._current = self._current, None
        if handle is None:
            return
        try:
            await handle.close()
        except LedgerFencedError as exc:
            self._fenced = True
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
            if self._closed or self._fenced or self._current is None:
                return False
            if self._current_entries == 0:
                return False
            now = self.clock()
            inactive = self.config.inactive_ledger_rollover_time_ms
            idle = inactive > 0 and now - self._last_add_ms >= inactive
            if not (idle or self._is_full(now)):
                return False
            await self._rollover()
            return True

    async def _rollover_timer(self, interval: float, scope: trio.CancelScope) -> None:
        with scope:
            while not self._closed and not self._fenced:
                await trio.sleep(interval)
                try:
                    await self.check_rollover()
                except (ManagedLedgerError, BKError, MetadataError) as exc:
                    log.warning("%s: timed rollover failed: %s", self.name, exc)

    # -- adding ---------------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if self._closed:
            raise ManagedLedgerClosedError(f"managed ledger {self.name!r} is closed")
        if self._fenced:
            raise ManagedLedgerFencedError(f"managed ledger {self.name!r} is fenced")
        if self._terminated is not None:
            raise ManagedLedgerClosedError(f"managed ledger {self.name!r} is terminated")

    async def _writable_ledger(self) -> LedgerHandle:
        self._check_writable()
        handle = self._current
        if handle is not None and handle.error is not None:
            if isinstance(handle.error, LedgerFencedError):
                self._fenced = True  # someone recovered our ledger: a new owner
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

    def _fits(self, payloads: Sequence[bytes]) -> int:
        """How many of ``payloads`` go into the current ledger: up to and including the add
        that makes it full (1 at least)."""
        config = self.config
        now = self.clock()
        if config.minimum_rollover_time_ms > 0 and now - self._created_ms <= (
            config.minimum_rollover_time_ms
        ):
            return len(payloads)  # cannot roll yet: writes continue past the maximum
        if now - self._created_ms >= self._rollover_after_ms:
            return 1
        entries, size = self._current_entries, self._current_size
        for n, payload in enumerate(payloads, start=1):
            entries += 1
            size += len(payload)
            if entries >= config.max_entries_per_ledger or size >= config.max_size_per_ledger_bytes:
                return n
        return len(payloads)

    async def _add_locked(self, payloads: Sequence[bytes]) -> list[Position]:
        positions: list[Position] = []
        while len(positions) < len(payloads):
            handle = await self._writable_ledger()
            batch = payloads[len(positions) :]
            batch = batch[: self._fits(batch)]
            futures = [handle.append_async(payload) for payload in batch]
            for future, payload in zip(futures, batch, strict=True):
                try:
                    entry_id = await future.result()
                except LedgerFencedError as exc:
                    # Only a recovery fences a ledger: another owner opened the topic.
                    self._fenced = True
                    raise ManagedLedgerFencedError(
                        f"managed ledger {self.name!r}: ledger {handle.ledger_id} was fenced "
                        "by another owner"
                    ) from exc
                positions.append(Position(handle.ledger_id, entry_id))
                self._current_entries += 1
                self._current_size += len(payload)
                self._bounds.observe(payload)
                if self._bounds.max_index is not None:
                    self._index = max(self._index, self._bounds.max_index)
            self._last_add_ms = self.clock()
            if self._is_full(self._last_add_ms):
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
            index = self._index
            payloads = []
            for message in messages:
                now = self.clock()
                broker_timestamp = entry_idx = None
                if self.config.broker_entry_metadata:
                    index += message.num_messages
                    broker_timestamp, entry_idx = now, index
                payloads.append(
                    encode_pulsar_entry(
                        message.payload,
                        publish_time=now if message.publish_time is None else message.publish_time,
                        producer_name=message.producer_name,
                        num_messages=message.num_messages,
                        broker_timestamp=broker_timestamp,
                        index=entry_idx,
                    )
                )
            return await self._add_locked(payloads)

    # -- reading ----------------------------------------------------------------------------------

    def ledger_list(self) -> LedgerList:
        """The ledgers as searches see them; the open ledger with what it holds so far."""
        summaries = []
        current = self._current.ledger_id if self._current is not None else None
        for ledger_id, li in self._infos.items():
            props = properties_of(li)
            if ledger_id == current:
                props.update(self._bounds.properties())
                summaries.append(LedgerSummary(ledger_id, self._current_entries, 0, props))
            else:
                timestamp = li.timestamp if li.HasField("timestamp") else None
                entries = li.entries if li.HasField("entries") else 0
                summaries.append(LedgerSummary(ledger_id, entries, timestamp, props))
        return LedgerList(summaries)

    @property
    def last_confirmed_position(self) -> Position | None:
        return self.ledger_list().last_position()

    @property
    def last_index(self) -> int:
        """The index of the last message stored (-1: none)."""
        return self._index

    @property
    def is_fenced(self) -> bool:
        return self._fenced

    async def _reader(self, ledger_id: int) -> ReadOnlyLedgerHandle:
        if self._current is not None and ledger_id == self._current.ledger_id:
            return self._current
        handle = self._readers.get(ledger_id)
        if handle is None:
            if ledger_id not in self._infos:
                raise LedgerNotFoundError(f"{self.name}: ledger {ledger_id} not found")
            handle = await self.bk.open_ledger(ledger_id, password=self.config.password)
            self._readers[ledger_id] = handle
        return handle

    async def read_entry(self, position: Position) -> bytes:
        """One entry's payload (an :class:`~bookiesim.mledger.finder.EntrySource`)."""
        handle = await self._reader(position.ledger_id)
        try:
            return (await handle.read_entries(position.entry_id, position.entry_id))[0].payload
        except NoSuchLedgerError as exc:
            raise LedgerNotFoundError(f"{self.name}: ledger {position.ledger_id} is gone") from exc

    async def read_entries(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
        """Up to ``max_entries`` entries from ``start`` on (across ledgers)."""
        ledgers = self.ledger_list()
        offset = ledgers.clamp_offset(start, after=True)
        out: list[tuple[Position, bytes]] = []
        while len(out) < max_entries and offset < ledgers.total_entries:
            first = ledgers.position_at(offset)
            info = ledgers.ledgers[ledgers.index_of(first.ledger_id)]
            last_id = min(info.entries - 1, first.entry_id + max_entries - len(out) - 1)
            handle = await self._reader(first.ledger_id)
            for entry in await handle.read_entries(first.entry_id, last_id):
                out.append((Position(first.ledger_id, entry.entry_id), entry.payload))
            offset += last_id - first.entry_id + 1
        return out

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
        if self._fenced:
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
            return value if value is not None else self._bounds.properties().get(key)
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
        from bookiesim.mledger.cursor import ManagedCursor

        cursor = self.cursors.get(name)
        if cursor is None:
            cursor = await ManagedCursor.create(self, name, earliest=earliest)
            self.cursors[name] = cursor
        return cursor

    # -- stats and closing -------------------------------------------------------------------------

    def stats(self) -> dict[str, object]:
        """What ``bookiesim topic stats`` prints (upstream's internal stats, in short)."""
        ledgers = []
        current = self._current.ledger_id if self._current is not None else None
        for summary in self.ledger_list().ledgers:
            size = self._current_size if summary.ledger_id == current else None
            ledgers.append(
                {
                    "ledgerId": summary.ledger_id,
                    "entries": summary.entries,
                    "size": self._infos[summary.ledger_id].size if size is None else size,
                    "timestamp": summary.close_timestamp,
                    "properties": dict(summary.properties),
                }
            )
        last = self.last_confirmed_position
        return {
            "name": self.name,
            "ledgers": ledgers,
            "entries": self.ledger_list().total_entries,
            "lastConfirmedEntry": None if last is None else str(last),
            "lastIndex": self._index,
            "properties": dict(self._properties),
            "version": self._version,
            "state": "fenced" if self._fenced else ("closed" if self._closed else "open"),
            "cursors": sorted(self.cursors),
        }

    async def close(self) -> None:
        """Close the open ledger and write its final info (so a later open need not recover
        it), and stop the timer. Cursors persist their state as they change."""
        async with self._add_lock:
            if self._closed:
                return
            self._closed = True
            if self._timer_scope is not None:
                self._timer_scope.cancel()
            handle, self._current = self._current, None
            if handle is None or self._fenced:
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
        if not ml._closed:
            await ml.close()


def bounds_of(ml: ManagedLedger, ledger_id: int) -> dict[str, str]:
    """The PIP-345 properties of one ledger (what :meth:`ManagedLedger.stats` shows)."""
    return bounds_properties(properties_of(ml.ledger_info(ledger_id)))
