"""Ledger handles: reading any ledger, and writing the one ledger a handle owns.

Theory of operation of the write path
-------------------------------------
A :class:`LedgerHandle` is the *writer* of its ledger: the only client that makes normal
adds. Each :meth:`~LedgerHandle.append_async` takes the next entry id, packages the payload
with the running LAC and the ledger's total length (reference §2.6) and sends it at once to
the entry's write set (:mod:`.distribution`), without waiting for earlier adds: many adds are
in flight. Acks arrive by callback from the connection's reader; an entry is acknowledged to
its caller only when Qa bookies of its write set stored it **and** every earlier entry has
been acknowledged, so the LAC — the highest acknowledged id — only ever moves forward by
one, and every entry up to it is on Qa bookies (invariants S2, A11).

When a bookie of the current ensemble fails (connection refused or lost, timeout, EIO, any
status but EOK/EFENCED/EUA), the handle replaces it — an *ensemble change*: it picks a live
registered bookie outside the ensemble, writes a new segment starting at LAC + 1 into the
metadata by compare-and-set, forgets the acks the replaced bookie gave for entries past the
LAC, and resends the unacknowledged entries to the replacement. Adds made during the change
wait and are sent after it, and no add completes until it is over: the LAC the new segment
starts from must not move while the change is made. If the CAS finds the ledger IN_RECOVERY
or CLOSED, someone else took the ledger over: every pending add fails with
:class:`LedgerFencedError` / :class:`LedgerClosedError`, as it does when a bookie answers
EFENCED. A segment is never proposed below an existing one (invariants S5, upstream #2615).
When every spare bookie has failed the handle too, the change reuses them, each after a
backoff (:mod:`.failed_bookies`, :mod:`.replacement`). A bookie that fails an add already
acknowledged (Qa < Qw) is replaced at the next add (upstream's delayed write failure): the
entry keeps its segment, under-replicated until re-replication notices.

A *recovery* handle (used by :mod:`.recovery`) is the same machine with four differences:
adds carry the RECOVERY_ADD flag (a fenced bookie accepts them), entries keep the length
field they had when the writer made them, ensemble changes stay in memory until the
recovery closes the ledger in one CAS (invariants A9), and every re-add carries the LAC the
recovery started from, since its own acknowledgements mean nothing if it aborts.
"""

from __future__ import annotations

import logging
from collections import deque
from functools import partial
from typing import TYPE_CHECKING

import trio

from bookiesim.client.add_future import AddFuture
from bookiesim.client.errors import (
    BKError,
    BookieRequestError,
    BookieUnavailableError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataConflictError,
    NoSuchLedgerError,
    UnauthorizedError,
)
from bookiesim.client.failed_bookies import FailedBookies
from bookiesim.client.handle_state import (
    ACCEPTS_ADDS,
    CHANGING,
    FAILED,
    RUNNING,
    HandleEvent,
    HandleState,
    next_state,
)
from bookiesim.client.read_handle import ReadOnlyLedgerHandle
from bookiesim.client.replacement import replacement_ensemble
from bookiesim.metadata.errors import MetadataError
from bookiesim.metadata.errors import NoSuchLedgerError as MetaNoSuchLedgerError
from bookiesim.metadata.ledgers import LedgerMetadata, LedgerState
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.v3 import WireRequest, add_request, from_message

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bookiesim.client.bookie_pool import Outcome
    from bookiesim.client.context import ClientContext

__all__ = ["AddFuture", "LedgerHandle"]

log = logging.getLogger(__name__)


def same_segments_to_write(current: LedgerMetadata, known: LedgerMetadata) -> bool:
    """Whether the stored metadata still has the segments a writer knows and the last one
    unchanged: all a writer's ensemble change or close depends on. A replication worker may
    have replaced a lost bookie in an earlier segment meanwhile (upstream's writer accepts
    that too); the writer then adopts the stored segments."""
    return list(current.ensembles) == list(known.ensembles) and (
        current.last_ensemble == known.last_ensemble
    )


class LedgerHandle(ReadOnlyLedgerHandle):
    """The writer of a ledger (see the module docstring for the write path).

    Made by :meth:`BookKeeper.create_ledger`; the recovery of :mod:`.recovery` makes one with
    ``recovery=True``.
    """

    def __init__(
        self,
        ctx: ClientContext,
        ledger_id: int,
        metadata: LedgerMetadata,
        version: int,
        *,
        recovery: bool = False,
        last_add_confirmed: int = -1,
        length: int = 0,
    ) -> None:
        super().__init__(ctx, ledger_id, metadata, version)
        self.recovery = recovery
        self._lac = last_add_confirmed
        # The LAC a recovery's re-adds carry: the one it started from, never one its own
        # acknowledgements made. Those count under ensemble changes kept in memory until the
        # close; if the recovery aborts they are forgotten, and a later recovery that trusted
        # a higher LAC on the bookies would skip re-adding entries that are on fewer than Qa
        # bookies of the write sets the metadata records (S3).
        self._recovery_lac = last_add_confirmed
        self._lac_length = length
        self._last_pushed = last_add_confirmed
        self._length = length
        _, ensemble = metadata.last_ensemble
        self._ensemble: tuple[str, ...] = ensemble
        self._pending: deque[AddFuture] = deque()
        self._failed: dict[int, str] = {}
        # Bookies that failed an add after it had its ack quorum (upstream's
        # delayedWriteFailedBookies): replaced at the next add, from LAC + 1.
        self._failed_after_quorum: dict[int, tuple[str, BKError]] = {}
        config = ctx.config
        self._bad_bookies = FailedBookies(
            config.bookie_retry_backoff, config.bookie_retry_backoff_max
        )
        self._state = HandleState.OPEN
        self._error: BKError | None = None
        self._drained: trio.Event | None = None
        self._lac_sent = last_add_confirmed
        self._lac_task: trio.CancelScope | None = None
        interval = config.explicit_lac_interval
        if interval is not None and not recovery:
            self._lac_task = trio.CancelScope()
            ctx.nursery.start_soon(self._explicit_lac_loop, interval, self._lac_task)

    # -- state -------------------------------------------------------------------------------

    @property
    def last_add_pushed(self) -> int:
        """The highest entry id handed out (acknowledged or not)."""
        return self._last_pushed

    @property
    def ensemble(self) -> tuple[str, ...]:
        """The bookies new entries go to."""
        return self._ensemble

    @property
    def pending_adds(self) -> int:
        return len(self._pending)

    @property
    def error(self) -> BKError | None:
        """Why the handle stopped taking adds (fenced, closed by others, no bookies)."""
        return self._error

    async def read_last_add_confirmed(self) -> int:
        """The writer knows its LAC: no need to ask the bookies."""
        return self._lac

    def _check(self) -> None:
        """Assert the handle's invariants (tests call it between steps)."""
        state, pending = self._state, self._pending
        assert (self._error is not None) == (state in FAILED) or state is HandleState.CLOSED
        # Closed by another client, the handle adopts the end it recorded.
        assert self._lac <= self._last_pushed or state is HandleState.CLOSED
        if pending:
            ids = [op.entry_id for op in pending]
            assert ids == list(range(ids[0], self._last_pushed + 1)), ids
            assert ids[0] == self._lac + 1 or self.recovery, (ids[0], self._lac)
            assert not any(op.done for op in pending)
            assert all(op.sent for op in pending) or state in CHANGING
        if state is HandleState.CLOSED:
            assert not pending
        if state not in CHANGING and self._error is None:
            assert not self._failed, self._failed

    # -- adds --------------------------------------------------------------------------------

    async def add_entry(self, payload: bytes) -> int:
        """Add one entry and wait until it is acknowledged; returns its id."""
        return await self.append_async(payload).result()

    def append_async(self, payload: bytes) -> AddFuture:
        """Start adding ``payload`` and return at once; await ``.result()`` for its id.

        Adds are acknowledged in the order they were made. Raises at once if the handle is
        closed or broken.
        """
        if self.recovery:
            raise BKError("a recovery handle only re-adds entries", ledger_id=self.ledger_id)
        self._check_writable()
        length = self._length + len(payload)
        return self._push(self._last_pushed + 1, payload, length)

    def _append_recovered(self, entry_id: int, payload: bytes, length: int) -> AddFuture:
        """Recovery: re-add entry ``entry_id`` (the next id) with its original length."""
        if entry_id != self._last_pushed + 1:
            raise ValueError(f"recovered entry {entry_id} is not {self._last_pushed + 1}")
        self._check_writable()
        return self._push(entry_id, payload, length)

    def _check_writable(self) -> None:
        if self._error is not None:
            raise self._error
        if self._state not in ACCEPTS_ADDS:
            raise LedgerClosedError("handle is closed", ledger_id=self.ledger_id)

    def _push(self, entry_id: int, payload: bytes, length: int) -> AddFuture:
        lac = self._recovery_lac if self.recovery else self._lac
        body = self.digest.package(entry_id, lac, length, payload)
        op = AddFuture(entry_id, length, body)
        self._last_pushed = entry_id
        self._length = length
        self._pending.append(op)
        if self._failed_after_quorum:
            self._replace_failed_after_quorum()
        if self._state not in CHANGING:
            op.sent = True
            self._send(op, self.dist.write_set(entry_id))
            self._lac_sent = self._lac
        return op

    def _add_request(self, op: AddFuture) -> WireRequest:
        return add_request(
            self.ledger_id, op.entry_id, self.digest.master_key, op.body, recovery=self.recovery
        )

    def _send(self, op: AddFuture, positions: Sequence[int]) -> None:
        request = self._add_request(op)
        submit = self._ctx.pool.submit
        for position in positions:
            bookie = self._ensemble[position]
            submit(bookie, request, partial(self._on_add_outcome, op, position, bookie))

    def _on_add_outcome(self, op: AddFuture, position: int, bookie: str, outcome: Outcome) -> None:
        if self._ensemble[position] != bookie:
            return  # an answer from a bookie since replaced
        if op.done:
            if isinstance(outcome, BKError) or outcome.status != pb.EOK:
                self._failed_after_quorum_by(position, bookie, op, outcome)
            return
        if isinstance(outcome, BKError):
            self._bookie_failed(position, bookie, outcome)
            return
        status = outcome.status
        if status == pb.EOK:
            if position in self._failed:
                return  # being replaced: its acks no longer count (invariants A11)
            if bookie in self._bad_bookies:
                self._bad_bookies.acknowledged(bookie)
            op.acked.add(position)
            if not op.quorum and len(op.acked) >= self.dist.ack_quorum:
                op.quorum = True
                self._complete_in_order()
        elif status == pb.EFENCED:
            self._fail(
                LedgerFencedError(
                    "fenced by a recovering client",
                    ledger_id=self.ledger_id,
                    entry_id=op.entry_id,
                    bookie=bookie,
                )
            )
        elif status == pb.EUA:
            self._fail(
                UnauthorizedError(
                    "master key rejected",
                    ledger_id=self.ledger_id,
                    entry_id=op.entry_id,
                    bookie=bookie,
                )
            )
        else:
            self._bookie_failed(position, bookie, self._add_error(outcome, op, bookie))

    def _add_error(self, outcome: Outcome, op: AddFuture, bookie: str) -> BKError:
        """The error a failed add's outcome stands for: the pool's own, or the status."""
        if isinstance(outcome, BKError):
            return outcome
        return BookieRequestError(
            outcome.status,
            ledger_id=self.ledger_id,
            entry_id=op.entry_id,
            bookie=bookie,
            operation="add",
        )

    def _complete_in_order(self) -> None:
        if self._state in CHANGING:
            # No add completes while an ensemble change is under way (upstream's
            # blockAddCompletions): the change's new segment starts at the LAC it read, and
            # an entry acknowledged meanwhile with an ack of the bookie being replaced would
            # end up on fewer than Qa bookies of the write set the new segment records (S3).
            # The change re-counts the acks and completes what still has its quorum.
            return
        pending = self._pending
        while pending and pending[0].quorum:
            op = pending.popleft()
            self._lac = op.entry_id
            self._lac_length = op.length
            self._ctx.stats.adds_completed += 1
            op._finish(None)
        if not pending and self._drained is not None:
            self._drained.set()

    def _fail(self, error: BKError) -> None:
        """Stop for good: fail every pending add with ``error`` (in entry order)."""
        if self._error is None:
            self._error = error
            log.warning("%s; failing %d pending adds", error, len(self._pending))
        self._state = next_state(self._state, HandleEvent.FAIL)
        pending, self._pending = self._pending, deque()
        for op in pending:
            self._ctx.stats.adds_failed += 1
            op._finish(error)
        if self._drained is not None:
            self._drained.set()
        if self._lac_task is not None:
            self._lac_task.cancel()

    # -- ensemble changes -----------------------------------------------------------------

    def _failed_after_quorum_by(
        self, position: int, bookie: str, op: AddFuture, outcome: Outcome
    ) -> None:
        """A bookie of the write set failed an add acknowledged already: the entry stays on
        fewer than Qw bookies until re-replication notices (upstream counts it, ADD_OP_UR).
        The bookie is replaced at the next add, as upstream's writer does; the entry keeps
        its segment, which starts before LAC + 1."""
        self._ctx.stats.adds_under_replicated += 1
        error = self._add_error(outcome, op, bookie)
        log.info(
            "ledger %d entry %d: %s failed it after its ack quorum: %s",
            self.ledger_id,
            op.entry_id,
            bookie,
            error,
        )
        self._failed_after_quorum.setdefault(position, (bookie, error))

    def _replace_failed_after_quorum(self) -> None:
        delayed, self._failed_after_quorum = self._failed_after_quorum, {}
        for position, (bookie, error) in sorted(delayed.items()):
            if self._ensemble[position] == bookie:
                self._bookie_failed(position, bookie, error)

    def _bookie_failed(self, position: int, bookie: str, error: BKError) -> None:
        if self._state not in RUNNING or position in self._failed:
            return
        log.info(
            "ledger %d: bookie %s (position %d) failed: %s", self.ledger_id, bookie, position, error
        )
        self._failed[position] = bookie
        self._bad_bookies.failed(bookie, trio.current_time())
        if self._state not in CHANGING:
            self._state = next_state(self._state, HandleEvent.BOOKIE_FAILED)
            self._ctx.nursery.start_soon(self._ensemble_change_loop)

    async def _ensemble_change_loop(self) -> None:
        try:
            while self._failed and self._error is None:
                failed = dict(self._failed)
                # Read before the (possibly long) wait for bookies, yet still current at the
                # metadata write: no add completes during a change, so the LAC cannot move.
                first = self._lac + 1
                ensemble = await replacement_ensemble(
                    self._ctx,
                    self.ledger_id,
                    self._ensemble,
                    failed,
                    self._bad_bookies,
                    lambda: self._error,
                )
                await self._commit_ensemble(first, ensemble)
                self._apply_ensemble(ensemble, failed)
        except BKError as exc:
            self._fail(exc)
        except MetadataError as exc:
            self._fail(BKError(f"ensemble change failed: {exc}", ledger_id=self.ledger_id))
        finally:
            self._state = next_state(self._state, HandleEvent.CHANGE_DONE)
            if self._error is None:
                self._complete_in_order()
            if self._drained is not None:
                self._drained.set()

    async def _commit_ensemble(self, first: int, ensemble: tuple[str, ...]) -> None:
        """Record the new segment: in the metadata by CAS (writer), or in memory only
        (recovery, written at close)."""
        last_first = max(self.metadata.ensembles)
        self._ctx.stats.record_proposal(self.ledger_id, first, ensemble, self.recovery)
        if first < last_first:
            # Invariants S5 / upstream #2615: never propose a segment below an existing one.
            raise MetadataConflictError(
                f"refusing an ensemble change at entry {first}, below the segment at {last_first}",
                ledger_id=self.ledger_id,
            )
        if self.recovery:
            self.metadata = self.metadata.with_ensemble(first, ensemble)
            self._ctx.stats.ensemble_changes += 1
            return
        known = self.metadata
        attempts = 0

        def change(current: LedgerMetadata) -> LedgerMetadata:
            nonlocal attempts
            attempts += 1
            if current.state is LedgerState.IN_RECOVERY:
                raise LedgerFencedError(
                    "ledger is being recovered (seen at ensemble change)",
                    ledger_id=self.ledger_id,
                )
            if current.state is LedgerState.CLOSED:
                raise LedgerClosedError(
                    f"closed by another client at entry {current.last_entry_id} "
                    "(seen at ensemble change)",
                    ledger_id=self.ledger_id,
                )
            if not same_segments_to_write(current, known):
                raise MetadataConflictError(
                    "ensembles changed under the writer", ledger_id=self.ledger_id
                )
            return current.with_ensemble(first, ensemble)

        try:
            self.metadata, self.version = await self._ctx.ledger_manager.update_with_retry(
                self.ledger_id, change
            )
        except MetaNoSuchLedgerError:
            raise NoSuchLedgerError("deleted while writing", ledger_id=self.ledger_id) from None
        finally:
            self._ctx.stats.metadata_conflicts += max(0, attempts - 1)
        self._ctx.stats.ensemble_changes += 1
        log.info("ledger %d: ensemble from entry %d is now %s", self.ledger_id, first, ensemble)

    def _apply_ensemble(self, ensemble: tuple[str, ...], failed: dict[int, str]) -> None:
        self._ensemble = ensemble
        replaced = set(failed)
        for position, bookie in failed.items():
            if self._failed.get(position) == bookie:
                del self._failed[position]
        if self._error is not None:
            return
        write_set = self.dist.write_set
        ack_quorum = self.dist.ack_quorum
        for op in self._pending:
            # Forget the replaced bookies' acks (invariants A11) and send the entry to
            # whoever has not got it: the replacements, or everyone if the add was made
            # during the change.
            op.acked -= replaced
            op.quorum = len(op.acked) >= ack_quorum
            positions = write_set(op.entry_id)
            if not op.sent:
                op.sent = True
                self._send(op, positions)
            else:
                todo = [p for p in positions if p in replaced]
                if todo:
                    self._send(op, todo)
        self._lac_sent = self._lac
        # What still has its quorum completes when the change loop ends.

    # -- explicit LAC --------------------------------------------------------------------

    async def write_lac(self) -> int:
        """Send the LAC explicitly (WriteLac) to the current ensemble; returns how many
        bookies stored it. Readers then see it even though no later add carried it."""
        lac = self._lac
        if self._ctx.pool.v2:
            # WriteLac has no v2 form (useV2WireProtocol): readers learn the LAC from the
            # next entry instead, as with upstream's v2 client.
            log.debug("WriteLac of ledger %d not sent: v2 wire protocol", self.ledger_id)
            return 0
        blob = self.digest.package_lac(lac)
        request = from_message(
            pb.Request(
                writeLacRequest=pb.WriteLacRequest(
                    ledgerId=self.ledger_id, lac=lac, masterKey=self.digest.master_key, body=blob
                )
            )
        )
        ok = 0

        async def one(bookie: str) -> None:
            nonlocal ok
            try:
                response = await self._ctx.pool.call(bookie, request)
            except BookieUnavailableError as exc:
                log.info("WriteLac to %s failed: %s", bookie, exc)
                return
            if response.status == pb.EOK:
                ok += 1

        async with trio.open_nursery() as nursery:
            for bookie in self._ensemble:
                nursery.start_soon(one, bookie)
        self._lac_sent = max(self._lac_sent, lac)
        return ok

    async def _explicit_lac_loop(self, interval: float, scope: trio.CancelScope) -> None:
        with scope:
            while self._state in RUNNING:
                await trio.sleep(interval)
                if self._lac > self._lac_sent and not self._pending and self._state in ACCEPTS_ADDS:
                    await self.write_lac()

    # -- close -----------------------------------------------------------------------------

    async def wait_for_pending(self) -> None:
        """Until every add made so far is acknowledged or failed, and no ensemble change is
        under way (so the metadata this handle holds is settled)."""
        while self._pending or self._state in CHANGING:
            self._drained = trio.Event()
            await self._drained.wait()

    async def close(self) -> None:
        """Wait for pending adds, then close the ledger in the metadata (CLOSED, last entry
        = LAC, length) by compare-and-set, then tell the ensemble's bookies (WriteClose,
        without waiting).

        If another client closed or recovered the ledger meanwhile, its metadata stands and
        this handle adopts it. Raises :class:`LedgerFencedError` if a recovery is running.
        """
        if self._state is HandleState.CLOSED:
            return
        self._state = next_state(self._state, HandleEvent.CLOSE)
        if self._lac_task is not None:
            self._lac_task.cancel()
        await self.wait_for_pending()
        lac, length = self._lac, self._lac_length
        known = self.metadata
        closed_by_us = False
        attempts = 0

        def close(current: LedgerMetadata) -> LedgerMetadata | None:
            nonlocal closed_by_us, attempts
            attempts += 1
            if current.state is LedgerState.IN_RECOVERY:
                raise LedgerFencedError(
                    "cannot close: a recovery is in progress", ledger_id=self.ledger_id
                )
            if current.state is LedgerState.CLOSED:
                closed_by_us = False
                return None
            if not same_segments_to_write(current, known):
                raise MetadataConflictError(
                    "ensembles changed under the writer", ledger_id=self.ledger_id
                )
            closed_by_us = True
            return current.closed(lac, length)

        try:
            self.metadata, self.version = await self._ctx.ledger_manager.update_with_retry(
                self.ledger_id, close
            )
        except MetaNoSuchLedgerError:
            raise NoSuchLedgerError("deleted before close", ledger_id=self.ledger_id) from None
        finally:
            self._ctx.stats.metadata_conflicts += max(0, attempts - 1)
        self._state = next_state(self._state, HandleEvent.CLOSED)
        final = self.metadata
        if not closed_by_us:
            log.info(
                "ledger %d was closed by another client at entry %d (our LAC %d)",
                self.ledger_id,
                final.last_entry_id,
                lac,
            )
            if final.last_entry_id < lac:
                # Acknowledged entries past the recovered end: invariants S1 broken.
                raise LedgerClosedError(
                    f"closed by another client at entry {final.last_entry_id}, below the "
                    f"{lac} this handle acknowledged",
                    ledger_id=self.ledger_id,
                )
            self._lac, self._lac_length = final.last_entry_id, final.length
            return
        if self.recovery:
            return
        self._ctx.send_write_close(self.ledger_id, final, self.digest.master_key)
