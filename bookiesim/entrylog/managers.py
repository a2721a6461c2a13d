"""Which entry log a ledger writes to: upstream's ``EntryLogManager`` and its two implementations.

Two layers, as upstream (``EntryLogManagerBase`` + ``EntryLoggerAllocator``):
:class:`~bookiesim.entrylog.log_files.LogFiles` owns the *files* and the state of each
(:mod:`bookiesim.entrylog.lifecycle`); a manager owns the *map*: which log each ledger's next
entry goes to. When a log rotates is decided by one
:class:`~bookiesim.entrylog.rotation.RotationPolicy`, shared by both managers (and the only
place that knows what ``upstream_behaviour`` turns off).
:class:`EntryLogManagerForEntryLogPerLedger` gives every ledger its own log;
:class:`EntryLogManagerForSingleEntryLog` interleaves all ledgers in one log. Both satisfy
:class:`EntryLogManager`; the entry logger picks one from ``entryLogPerLedgerEnabled``.
Everything here runs on the owner thread.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections import OrderedDict
from itertools import accumulate
from typing import TYPE_CHECKING, Protocol

from bookiesim.entrylog.rotation import RotationEvent, RotationPolicy, RotationReason

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from bookiesim.entrylog.buffered_channel import BufferedChannel
    from bookiesim.entrylog.log_files import LogFiles
    from bookiesim.entrylog.writer import EntryLogWriter

__all__ = [
    "EntryLogManager",
    "EntryLogManagerForEntryLogPerLedger",
    "EntryLogManagerForSingleEntryLog",
]

_LEDGER_ID = struct.Struct(">q").unpack_from


class EntryLogManager(Protocol):
    """Which log each ledger writes to, and when a log is rotated (upstream
    ``EntryLogManager``). All methods run on the owner thread."""

    def add_entry(self, ledger_id: int, body: bytes) -> int:
        """Append ``body`` (whose first 8 bytes are ``ledger_id``); return its location."""
        ...

    def add_entries(
        self, ledger_id: int, bodies: Sequence[bytes], *, defer_writes: bool = False
    ) -> list[int]:
        """:meth:`add_entry` of each body in turn, with the same rotations, a stretch of the
        run per log; their locations. ``defer_writes``: full buffers wait for the caller to
        take them (:meth:`EntryLogWriter.take_pending`) from the ledger's current log."""
        ...

    def rotate_failed_writer(self, writer: BufferedChannel) -> bool:
        """A deferred write of ``writer`` failed: rotate it as an add's write error would
        have (BP-32), if it is still active; True if it was."""
        ...

    def create_new_log(self, ledger_id: int) -> EntryLogWriter:
        """Give the ledger a fresh log now (upstream ``createNewLog``): a held log is rotated
        with :attr:`RotationReason.SIZE`, as upstream's roll."""
        ...

    def rotate_ledger(self, ledger_id: int, reason: RotationReason) -> bool:
        """Rotate the ledger's active log; False if it has none (or in single-log mode)."""
        ...

    def expire_idle(self, now: float) -> list[RotationEvent]:
        """Rotate every log idle for at least the expiry time; [] where nothing expires."""
        ...

    def next_expiry_deadline(self) -> float | None:
        """Clock time at which the next log expires; None if none will."""
        ...

    def current_log(self, ledger_id: int) -> EntryLogWriter | None:
        """The ledger's active log, without counting as an access."""
        ...

    def active_writers(self) -> list[EntryLogWriter]:
        """Every active log (a copy), least recently written first."""
        ...

    def active_logs(self) -> dict[int, int]:
        """Ledger id -> id of the active log it writes to."""
        ...

    @property
    def active_log_count(self) -> int: ...

    def close(self) -> None:
        """Forget the active logs (the caller closes the files)."""
        ...

    def _check(self) -> None: ...


class _RunCutter:
    """Cuts a run of entries into stretches that each fit the log they go to.

    :meth:`RotationPolicy.on_add` for a whole stretch at once: the bodies from ``start`` fit
    a log with ``room`` bytes left (:meth:`RotationPolicy.room`) while their records'
    cumulative size is at most ``room``, so the stretch ends where a bisection of the
    cumulative sizes says. Those are made only for a run that does not fit whole (a flush's
    run mostly does); until then one sum does.
    """

    __slots__ = ("_bodies", "_ends", "_total")

    def __init__(self, bodies: Sequence[bytes]) -> None:
        self._bodies = bodies
        self._total = sum(map(len, bodies)) + 4 * len(bodies)
        self._ends: list[int] | None = None

    def fitting(self, start: int, room: int) -> int:
        """The end of the longest stretch from ``start`` that fits; ``start`` if none does."""
        ends = self._ends
        if ends is None:  # still at the run's start
            if self._total <= room:
                return len(self._bodies)
            ends = self._ends = list(accumulate([len(b) + 4 for b in self._bodies]))
        return bisect_right(ends, room + (ends[start - 1] if start else 0), start)


def _write_run(
    ledger_id: int,
    bodies: Sequence[bytes],
    writer: EntryLogWriter | None,
    *,
    policy: RotationPolicy,
    new_log: Callable[[], EntryLogWriter],
    write_failed: Callable[[], None],
    defer_writes: bool,
) -> list[int]:
    """Both managers' :meth:`~EntryLogManager.add_entries`: each stretch that fits
    ``writer`` (the ledger's log, None without one) goes in one
    :meth:`~EntryLogWriter.append_run`; where the next body would pass the limit,
    ``new_log()`` rolls or installs a log, which takes at least that body whatever its size
    (as :meth:`~EntryLogManager.add_entry` does). An ``OSError`` calls ``write_failed()``
    (the BP-32 rotation) and propagates.

    The bodies are checked by the writer, a stretch at a time (checking them here too cost
    as much again: reading each body's first bytes is a cache miss), so a ``ValueError``
    leaves the stretches before the bad body's written and nothing of its own."""
    cutter = _RunCutter(bodies)
    room = policy.room
    locations: list[int] = []
    start = 0
    while start < len(bodies):
        stop = start if writer is None else cutter.fitting(start, room(writer.position))
        if writer is None or stop == start:  # no log yet, or the next body would pass
            writer = new_log()
            stop = max(start + 1, cutter.fitting(start, room(writer.position)))
        try:
            locations += writer.append_run(ledger_id, bodies[start:stop], defer_writes=defer_writes)
        except OSError:
            write_failed()
            raise
        start = stop
    return locations


class _ActiveLog:
    """A ledger's active log and when it was last written (the per-ledger map's value)."""

    __slots__ = ("last_write", "ledger_id", "writer")

    def __init__(self, ledger_id: int, writer: EntryLogWriter, last_write: float) -> None:
        self.ledger_id = ledger_id
        self.writer = writer
        self.last_write = last_write


class EntryLogManagerForEntryLogPerLedger:
    """Every ledger writes to a log of its own (upstream ``EntryLogManagerForEntryLogPerLedger``).

    The ledger -> log map is an ``OrderedDict`` kept in write order: an add moves its ledger
    to the end, so the front is always the least recently written ledger. That one structure
    answers both of upstream's Guava cache policies in O(1): ``maximumSize`` evicts the front
    (:attr:`RotationReason.MAX_ACTIVE`), and ``expireAfterAccess`` pops from the front while
    the front has been idle long enough (:attr:`RotationReason.EXPIRY`) — on a timer through
    :meth:`expire_idle` (ours), or, with the policy's ``lazy_expiry`` (upstream behaviour),
    only when an add touches the map, which is when Guava cleans up; a bookie that stops
    writing then never rotates its logs. Only adds count as accesses: reads, checkpoints and
    every query here leave the order alone (upstream's ``replicaOfCurrentLogChannels`` serves
    those).
    """

    def __init__(
        self,
        files: LogFiles,
        *,
        policy: RotationPolicy,
        clock: Callable[[], float],
        fsync_before_roll: bool = False,
    ) -> None:
        if not policy.per_ledger:
            raise ValueError("the per-ledger manager needs a per-ledger rotation policy")
        self._files = files
        self._policy = policy
        self._clock = clock
        self._lazy_expiry = policy.lazy_expiry
        self._fsync_before_roll = fsync_before_roll
        self._slots: OrderedDict[int, _ActiveLog] = OrderedDict()

    # ---------------------------------------------------------------- the add path

    def add_entry(self, ledger_id: int, body: bytes) -> int:
        """Append to the ledger's log: one dict look-up and a move to the end, then the write.

        Rolls first if the entry would pass ``logSizeLimit`` (upstream's ``position + size +
        4 > limit``); a ledger without a log gets one, evicting the least recently written
        ledger's log when ``max_active_logs`` are active. An ``OSError`` from the write
        rotates the log (BP-32: before the error reaches the client) and propagates.
        """
        try:
            if _LEDGER_ID(body)[0] != ledger_id:
                raise ValueError(
                    f"entry of ledger {_LEDGER_ID(body)[0]} added as ledger {ledger_id}: a log "
                    "must never hold two ledgers"
                )
        except struct.error:
            raise ValueError(f"entry of {len(body)} bytes has no ledger id") from None
        now = self._clock()
        if self._lazy_expiry:
            self._expire(now)
        slot = self._slots.get(ledger_id)
        if slot is None or self._policy.on_add(slot.writer.position, len(body)) is not None:
            slot = self._install(ledger_id, slot, now)
        else:
            self._slots.move_to_end(ledger_id)
            slot.last_write = now
        try:
            return slot.writer.append(body)
        except OSError:
            self._rotate(ledger_id, self._policy.on_write_error())
            raise

    def add_entries(
        self, ledger_id: int, bodies: Sequence[bytes], *, defer_writes: bool = False
    ) -> list[int]:
        """:meth:`add_entry` of each body in turn, a stretch per log rather than a call per
        entry (the sorted storage's flush): the same rolls, evictions and write-error
        rotation, with the clock read (and lazy expiry run) once for the run."""
        if not bodies:
            return []
        now = self._clock()
        if self._lazy_expiry:
            self._expire(now)
        slot = self._slots.get(ledger_id)
        if slot is not None:
            self._slots.move_to_end(ledger_id)
            slot.last_write = now

        def new_log() -> EntryLogWriter:
            return self._install(ledger_id, self._slots.get(ledger_id), now).writer

        def write_failed() -> None:
            self._rotate(ledger_id, self._policy.on_write_error())

        writer = None if slot is None else slot.writer
        return _write_run(
            ledger_id,
            bodies,
            writer,
            policy=self._policy,
            new_log=new_log,
            write_failed=write_failed,
            defer_writes=defer_writes,
        )

    def rotate_failed_writer(self, writer: BufferedChannel) -> bool:
        for ledger_id, slot in self._slots.items():
            if slot.writer is writer:
                return self._rotate(ledger_id, self._policy.on_write_error())
        return False

    def _install(self, ledger_id: int, slot: _ActiveLog | None, now: float) -> _ActiveLog:
        if slot is not None:
            if self._fsync_before_roll:
                slot.writer.fsync()  # upstream: with flushEntrylogBytes > 0, before a roll
            self._rotate(ledger_id, RotationReason.SIZE)
        else:
            slots = self._slots
            while (reason := self._policy.on_new_ledger(len(slots))) is not None:
                self._rotate(next(iter(slots)), reason)
        slot = _ActiveLog(ledger_id, self._files.activate_log(), now)
        self._slots[ledger_id] = slot
        return slot

    def create_new_log(self, ledger_id: int) -> EntryLogWriter:
        slot = self._slots.get(ledger_id)
        return self._install(ledger_id, slot, self._clock()).writer

    # ---------------------------------------------------------------- rotation

    def rotate_ledger(self, ledger_id: int, reason: RotationReason) -> bool:
        accepted = self._policy.on_signal(reason)
        return accepted is not None and self._rotate(ledger_id, accepted)

    def _rotate(self, ledger_id: int, reason: RotationReason) -> bool:
        slot = self._slots.pop(ledger_id, None)
        if slot is None:
            return False
        self._files.rotate(slot.writer, ledger_id, reason)
        return True

    def expire_idle(self, now: float) -> list[RotationEvent]:
        return [] if self._lazy_expiry else self._expire(now)

    def _expire(self, now: float) -> list[RotationEvent]:
        slots = self._slots
        on_idle = self._policy.on_idle
        events: list[RotationEvent] = []
        while slots:
            slot = next(iter(slots.values()))
            reason = on_idle(slot.last_write, now)
            if reason is None:
                break
            del slots[slot.ledger_id]
            events.append(self._files.rotate(slot.writer, slot.ledger_id, reason))
        return events

    def next_expiry_deadline(self) -> float | None:
        if self._lazy_expiry or not self._slots:
            return None
        return self._policy.expiry_deadline(next(iter(self._slots.values())).last_write)

    # ---------------------------------------------------------------- queries (no access)

    def current_log(self, ledger_id: int) -> EntryLogWriter | None:
        slot = self._slots.get(ledger_id)
        return None if slot is None else slot.writer

    def active_writers(self) -> list[EntryLogWriter]:
        return [slot.writer for slot in self._slots.values()]

    def active_logs(self) -> dict[int, int]:
        return {lid: slot.writer.log_id for lid, slot in self._slots.items()}

    def last_write_time(self, ledger_id: int) -> float | None:
        """When the ledger last wrote to its active log (None without one)."""
        slot = self._slots.get(ledger_id)
        return None if slot is None else slot.last_write

    @property
    def active_log_count(self) -> int:
        return len(self._slots)

    def close(self) -> None:
        self._slots.clear()

    def _check(self) -> None:
        """Assert every invariant. O(active logs)."""
        max_active = self._policy.max_active_logs
        assert len(self._slots) <= max_active, (len(self._slots), max_active)
        previous = float("-inf")
        seen_logs: set[int] = set()
        for ledger_id, slot in self._slots.items():
            assert slot.ledger_id == ledger_id
            assert slot.last_write >= previous, "write order and write times disagree"
            previous = slot.last_write
            writer = slot.writer
            assert writer.log_id not in seen_logs, f"log {writer.log_id} serves two ledgers"
            seen_logs.add(writer.log_id)
            assert set(writer.ledger_sizes) <= {ledger_id}, (
                f"log {writer.log_id} of ledger {ledger_id} holds {dict(writer.ledger_sizes)}"
            )
        for record in self._files.rotated_logs():
            if record.writer is not None:
                assert set(record.writer.ledger_sizes) <= {record.ledger_id}


class EntryLogManagerForSingleEntryLog:
    """All ledgers interleave in one active log (upstream ``EntryLogManagerForSingleEntryLog``).

    The log is created lazily by the first add (``testDeferCreateNewLog``) and rotated on
    size and on a write error. Nothing expires and nothing is evicted. BP-32's per-ledger
    rotations (write-close, fence, replication) do not apply: rotating the shared log
    because one ledger is done would cut every other ledger's log short, so the policy
    refuses every signal and :meth:`rotate_ledger` returns False.
    """

    def __init__(
        self,
        files: LogFiles,
        *,
        policy: RotationPolicy,
        fsync_before_roll: bool = False,
    ) -> None:
        if policy.per_ledger:
            raise ValueError("the single-log manager needs a single-log rotation policy")
        self._files = files
        self._policy = policy
        self._fsync_before_roll = fsync_before_roll
        self._current: EntryLogWriter | None = None

    def add_entry(self, ledger_id: int, body: bytes) -> int:
        """Append to the shared log, rolling it first if the entry would pass the limit."""
        writer = self._current
        if writer is None or self._policy.on_add(writer.position, len(body)) is not None:
            writer = self._roll()
        try:
            return writer.append(body)
        except OSError:
            self._rotate_current(self._policy.on_write_error())
            raise

    def add_entries(
        self, ledger_id: int, bodies: Sequence[bytes], *, defer_writes: bool = False
    ) -> list[int]:
        """:meth:`add_entry` of each body in turn, a stretch per log rather than a call per
        entry: the same rolls and write-error rotation."""

        def write_failed() -> None:
            self._rotate_current(self._policy.on_write_error())

        return _write_run(
            ledger_id,
            bodies,
            self._current,
            policy=self._policy,
            new_log=self._roll,
            write_failed=write_failed,
            defer_writes=defer_writes,
        )

    def rotate_failed_writer(self, writer: BufferedChannel) -> bool:
        if self._current is not writer:
            return False
        self._rotate_current(self._policy.on_write_error())
        return True

    def _roll(self) -> EntryLogWriter:
        if self._current is not None:
            if self._fsync_before_roll:
                self._current.fsync()
            self._rotate_current(RotationReason.SIZE)
        writer = self._current = self._files.activate_log()
        return writer

    def _rotate_current(self, reason: RotationReason) -> None:
        writer = self._current
        if writer is not None:
            self._current = None
            self._files.rotate(writer, None, reason)

    def create_new_log(self, ledger_id: int) -> EntryLogWriter:
        return self._roll()

    def rotate_ledger(self, ledger_id: int, reason: RotationReason) -> bool:
        # The policy refuses every signal in single-log mode; asked all the same, so that
        # the rule lives in one place.
        accepted = self._policy.on_signal(reason)
        assert accepted is None, accepted
        return False

    def expire_idle(self, now: float) -> list[RotationEvent]:
        return []

    def next_expiry_deadline(self) -> float | None:
        return None

    def current_log(self, ledger_id: int) -> EntryLogWriter | None:
        return self._current

    def active_writers(self) -> list[EntryLogWriter]:
        return [] if self._current is None else [self._current]

    def active_logs(self) -> dict[int, int]:
        """Every ledger with entries in the shared log -> its id."""
        current = self._current
        if current is None:
            return {}
        return dict.fromkeys(current.ledger_sizes, current.log_id)

    @property
    def active_log_count(self) -> int:
        return 0 if self._current is None else 1

    def close(self) -> None:
        self._current = None

    def _check(self) -> None:
        """Assert every invariant. O(1)."""
        current = self._current
        if current is not None:
            assert self._files.open_writer(current.log_id) is current
