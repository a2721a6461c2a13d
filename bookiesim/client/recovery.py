"""Ledger recovery: take an open ledger over from its (crashed or zombie) writer and close it
at a point that includes every entry the writer acknowledged.

Steps (reference §7, invariants §2 "Recoverer", A4-A9):

1. **IN_RECOVERY** in the metadata (compare-and-set). A ledger already IN_RECOVERY is left
   as it is (another recoverer runs; upstream writes nothing either); a CLOSED one needs no
   recovery.
2. **Fence** the last ensemble: a fencing read of entry -1 to each of its bookies. A fenced
   bookie rejects the writer's normal adds from then on. We go on once the fenced answers
   cover the ensemble (:func:`~bookiesim.client.distribution.ensemble_covered`): then no
   write set has Qa unfenced bookies left, so the writer cannot get anything more
   acknowledged. LAC := max(LAC in the returned entries' headers, first entry of the last
   ensemble - 1); the floor is upstream's fix for #2615 (invariants §5.2): entries before the
   last ensemble are settled, and starting lower would make recovery propose an ensemble
   below an existing segment. ``unsafe_recovery_below_last_ensemble`` drops the floor (and
   reads each entry from its own segment, as upstream did then) to re-create the bug.
3. **Read forward** from LAC + 1, each entry from its write set in the last ensemble as it
   was at the start (A7). One good copy means the entry may have been acknowledged: it is
   re-added with RECOVERY_ADD (which a fenced bookie accepts) to its write set, carrying the
   LAC this recovery started from (the re-adds' own acknowledgements count only if the close
   succeeds; a higher LAC left on the bookies by an aborted recovery would make the next one
   skip entries). Qw - Qa + 1 explicit "no such entry" answers mean it cannot have been
   acknowledged: the ledger ends before it. Anything else (errors, timeouts) is *unknown*:
   recovery aborts and the ledger stays IN_RECOVERY for a later attempt (A6). These reads
   **fence too** — the fix for upstream #2614 (invariants §5.1): a bookie that was not
   fenced in step 2 could otherwise answer "no such entry" and accept the writer's add a
   moment later, so the writer would acknowledge an entry past the end recovery settles on.
   ``unsafe_recovery_reads_without_fence`` turns the fix off to re-create the bug.
4. **Close**: when every re-add is acknowledged, CLOSED with last entry and length — and the
   ensemble changes the re-adds needed — in one compare-and-set that requires IN_RECOVERY
   (A9). If another recoverer closed first, its result stands.

Reads are pipelined (``recovery_read_window`` entries ahead) and the re-adds go through a
:class:`~bookiesim.client.ledger_handle.LedgerHandle` in recovery mode, so they are
pipelined as well and get ensemble changes for free.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

import trio

from bookiesim.client.digest import DigestManager, DigestMismatchError, VerifiedEntry
from bookiesim.client.distribution import FenceTracker, ReadOutcome, RecoveryReadTracker
from bookiesim.client.errors import (
    BKError,
    LedgerRecoveryError,
    NoSuchLedgerError,
    UnauthorizedError,
)
from bookiesim.client.ledger_handle import LedgerHandle
from bookiesim.client.read_handle import ReadOnlyLedgerHandle
from bookiesim.metadata.errors import NoSuchLedgerError as MetaNoSuchLedgerError
from bookiesim.metadata.ledgers import LedgerMetadata, LedgerState
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.v3 import read_request

if TYPE_CHECKING:
    from collections.abc import Callable

    from bookiesim.client.add_future import AddFuture
    from bookiesim.client.bookie_pool import Outcome
    from bookiesim.client.context import ClientContext

__all__ = ["recover_ledger"]

log = logging.getLogger(__name__)

_MISSING = (pb.ENOENTRY, pb.ENOLEDGER)


async def recover_ledger(ctx: ClientContext, ledger_id: int) -> ReadOnlyLedgerHandle:
    """Recover ``ledger_id`` (a no-op for a closed ledger) and return a read-only handle on
    its final metadata. Raises :class:`LedgerRecoveryError` if the end cannot be decided
    now; the ledger is then left IN_RECOVERY."""
    metadata, version = await _mark_in_recovery(ctx, ledger_id)
    if metadata.is_closed:
        return ReadOnlyLedgerHandle(ctx, ledger_id, metadata, version)
    ctx.stats.recoveries += 1
    op = _Recovery(ctx, ledger_id, metadata, version)
    return await op.run()


async def _mark_in_recovery(ctx: ClientContext, ledger_id: int) -> tuple[LedgerMetadata, int]:
    attempts = 0

    def mark(current: LedgerMetadata) -> LedgerMetadata | None:
        nonlocal attempts
        attempts += 1
        if current.state is LedgerState.OPEN:
            return current.in_recovery()
        return None  # IN_RECOVERY already (another recoverer), or CLOSED

    try:
        return await ctx.ledger_manager.update_with_retry(ledger_id, mark)
    except MetaNoSuchLedgerError:
        raise NoSuchLedgerError("no metadata", ledger_id=ledger_id) from None
    finally:
        ctx.stats.metadata_conflicts += max(0, attempts - 1)


class _Recovery:
    """One recovery attempt of one ledger (steps 2-4 of the module docstring), on the
    metadata snapshot taken when it was marked IN_RECOVERY."""

    def __init__(
        self, ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, version: int
    ) -> None:
        self.ctx = ctx
        self.ledger_id = ledger_id
        self.metadata = metadata
        self.version = version
        reader = ReadOnlyLedgerHandle(ctx, ledger_id, metadata, version)
        self.reader = reader
        self.digest: DigestManager = reader.digest
        self.dist = reader.dist
        self.first, self.ensemble = metadata.last_ensemble
        self.fence = not ctx.config.unsafe_recovery_reads_without_fence
        # #2615 re-created: no floor, and entries below the last segment read from their own
        # segment (upstream's reads always followed the metadata; the floor made that moot).
        self.unfloored = ctx.config.unsafe_recovery_below_last_ensemble
        self.recovery_lac = -1

    def _error(self, message: str, entry_id: int | None = None) -> LedgerRecoveryError:
        return LedgerRecoveryError(message, ledger_id=self.ledger_id, entry_id=entry_id)

    async def run(self) -> ReadOnlyLedgerHandle:
        lac, lengths = await self._fence_last_ensemble()
        if not self.unfloored:
            lac = max(lac, self.first - 1)
        self.recovery_lac = lac
        log.info(
            "recovering ledger %d from entry %d (last ensemble %s from %d)",
            self.ledger_id,
            lac + 1,
            self.ensemble,
            self.first,
        )
        writer = LedgerHandle(
            self.ctx,
            self.ledger_id,
            self.metadata,
            self.version,
            recovery=True,
            last_add_confirmed=lac,
            length=lengths.get(lac, 0),
        )
        last, last_length = await self._read_and_readd(writer, lac)
        if last == lac and lac >= 0 and lac not in lengths:
            last_length = (await self.reader.read_unconfirmed_entries(lac, lac))[0].length
        return await self._close(writer, last, last_length)

    # -- step 2: fence -----------------------------------------------------------------------

    async def _fence_last_ensemble(self) -> tuple[int, dict[int, int]]:
        """Fencing reads of entry -1 until coverage; (max LAC seen, entry id → length of
        the entries returned)."""
        tracker = FenceTracker(self.dist)
        lengths: dict[int, int] = {}
        done = trio.Event()
        unauthorized: list[BKError] = []
        ensemble = self.ensemble

        def on_outcome(position: int, outcome: Outcome) -> None:
            bookie = ensemble[position]
            if isinstance(outcome, BKError):
                tracker.record_failed(position)
            elif outcome.status == pb.EOK and outcome.readResponse.HasField("body"):
                try:
                    v = self.digest.verify(outcome.readResponse.body)
                except DigestMismatchError as exc:
                    log.warning("fencing read from %s: %s", bookie, exc)
                    tracker.record_failed(position)
                else:
                    tracker.record_fenced(position, v.lac)
                    lengths[v.entry_id] = v.length
            elif outcome.status in _MISSING:
                tracker.record_fenced(position, -1)
            elif outcome.status == pb.EUA:
                unauthorized.append(
                    UnauthorizedError(
                        "fencing read: master key rejected",
                        ledger_id=self.ledger_id,
                        bookie=bookie,
                    )
                )
                tracker.record_failed(position)
            else:
                log.info("fencing read from %s: %s", bookie, pb.StatusCode.Name(outcome.status))
                tracker.record_failed(position)
            if unauthorized or tracker.covered() or tracker.all_answered():
                done.set()

        for position, bookie in enumerate(ensemble):
            self.ctx.pool.submit(
                bookie,
                read_request(self.ledger_id, -1, fence_key=self.digest.master_key),
                partial(on_outcome, position),
            )
        await done.wait()
        if unauthorized:
            raise unauthorized[0]
        if not tracker.covered():
            raise self._error(
                f"fencing reached only {sorted(ensemble[p] for p in tracker.positive)} of "
                f"{list(ensemble)}: not enough to rule out a write quorum "
                f"(Qw={self.dist.write_quorum}, Qa={self.dist.ack_quorum})"
            )
        return tracker.lac, lengths

    # -- step 3: read forward and re-add -------------------------------------------------------

    async def _read_and_readd(self, writer: LedgerHandle, lac: int) -> tuple[int, int]:
        """Returns (last entry id, ledger length) once every recovered entry is re-added."""
        max_window = max(1, self.ctx.config.recovery_read_window)
        outcomes: dict[int, _Decided] = {}
        progress = trio.Event()
        next_id = lac + 1
        issued = next_id
        end: int | None = None
        adds: list[AddFuture] = []
        last_length = writer.length
        key = self.digest.master_key if self.fence else None

        parallel = self.ctx.config.parallel_recovery_reads

        def issue(entry_id: int) -> None:
            read = _EntryRead(self, entry_id, key, outcomes, wake)
            if parallel:
                read.parallel = True
                for i in range(len(read.positions)):
                    read.ask(i)
            else:
                read.ask(0)

        def wake() -> None:
            progress.set()

        while end is None:
            # Read ahead, but little at first: the tail after the LAC is usually short, and
            # every read past the end is a wasted fence; double the window as entries
            # keep turning up.
            window = min(max_window, 4 + 2 * (next_id - lac - 1))
            while issued < next_id + window:
                issue(issued)
                issued += 1
            await progress.wait()
            progress = trio.Event()
            while next_id in outcomes:
                result, found, detail = outcomes.pop(next_id)
                if result is ReadOutcome.FOUND:
                    assert found is not None
                    adds.append(writer._append_recovered(next_id, found.payload, found.length))
                    last_length = found.length
                    next_id += 1
                elif result is ReadOutcome.MISSING:
                    end = next_id - 1
                    break
                else:
                    raise self._error(
                        f"cannot tell whether the entry exists ({detail})", entry_id=next_id
                    )
            if writer.error is not None:
                raise self._error(f"re-adding entries failed: {writer.error}")
        await writer.wait_for_pending()
        for add in adds:
            if add.error is not None:
                raise self._error(f"re-adding entries failed: {add.error}", add.entry_id)
        self.ctx.stats.recovered_entries += len(adds)
        return end, last_length

    # -- step 4: close -------------------------------------------------------------------------

    async def _close(self, writer: LedgerHandle, last: int, length: int) -> ReadOnlyLedgerHandle:
        # Only the segments this recovery changed are written back: an earlier one may have
        # had a lost bookie replaced by a replication worker meanwhile, which must stand.
        snapshot = self.metadata.ensembles
        changed = {
            first: bookies
            for first, bookies in writer.metadata.ensembles.items()
            if tuple(snapshot.get(first, ())) != tuple(bookies)
        }
        attempts = 0

        def close(current: LedgerMetadata) -> LedgerMetadata | None:
            nonlocal attempts
            attempts += 1
            if current.state is LedgerState.CLOSED:
                return None  # another recoverer (or the writer) won; its close stands
            if current.state is not LedgerState.IN_RECOVERY:
                raise self._error(f"ledger went {current.state.name} during recovery")
            new = current.closed(last, length)
            for first, bookies in changed.items():
                new = new.with_ensemble(first, bookies)
            return new

        try:
            metadata, version = await self.ctx.ledger_manager.update_with_retry(
                self.ledger_id, close
            )
        except MetaNoSuchLedgerError:
            raise NoSuchLedgerError("deleted during recovery", ledger_id=self.ledger_id) from None
        finally:
            self.ctx.stats.metadata_conflicts += max(0, attempts - 1)
        if (metadata.last_entry_id, metadata.length) != (last, length):
            log.info(
                "ledger %d: another client closed it at %d first (we found %d)",
                self.ledger_id,
                metadata.last_entry_id,
                last,
            )
        else:
            log.info("recovered ledger %d: last entry %d, %d bytes", self.ledger_id, last, length)
        if writer.last_add_pushed > self.recovery_lac:
            # The fencing reads rotated the ledger's logs, but the re-adds opened new ones
            # on the bookies they went to; like a writer's close, tell them we are done.
            self.ctx.send_write_close(self.ledger_id, writer.metadata, self.digest.master_key)
        return ReadOnlyLedgerHandle(self.ctx, self.ledger_id, metadata, version)


_Decided = tuple[ReadOutcome, VerifiedEntry | None, str]
"""What recovery concluded about an entry: the outcome, the entry if found, the answers."""


class _EntryRead:
    """The recovery read of one entry.

    By default replicas are asked one at a time, in write-set order (upstream's default):
    one good copy settles the entry, so most entries cost a single read; a "no such entry"
    (or an error) moves on to the next replica. With ``parallel_recovery_reads`` (upstream's
    ``enableParallelRecoveryRead``) the whole write set is asked at once. Each read fences
    the bookie it goes to, which is what makes its negative answer permanent (the #2614
    fix); bookies never asked need not be fenced, since no decision rests on them. (A class
    rather than closures: recovery makes one per entry.)
    """

    __slots__ = (
        "answers",
        "decided",
        "done",
        "entry_id",
        "outcomes",
        "parallel",
        "positions",
        "recovery",
        "request",
        "tracker",
    )

    def __init__(
        self,
        recovery: _Recovery,
        entry_id: int,
        fence_key: bytes | None,
        outcomes: dict[int, _Decided],
        done: Callable[[], None],
    ) -> None:
        self.recovery = recovery
        self.entry_id = entry_id
        self.outcomes = outcomes
        self.done = done
        dist = recovery.dist
        self.tracker = RecoveryReadTracker(dist.write_quorum, dist.ack_quorum)
        self.positions = dist.write_set(entry_id)
        # High priority, as upstream's recovery reads entries (its first fencing read of
        # entry -1 is not): a read-only bookie still serves them.
        self.request = read_request(
            recovery.ledger_id, entry_id, fence_key=fence_key, high_priority=True
        )
        self.answers: list[str] = []
        self.decided = False
        self.parallel = False

    def ask(self, i: int) -> None:
        recovery = self.recovery
        ensemble = recovery.ensemble
        if recovery.unfloored and self.entry_id < recovery.first:
            ensemble = recovery.metadata.ensemble_at(self.entry_id)
        bookie = ensemble[self.positions[i]]
        self.recovery.ctx.pool.submit(bookie, self.request, partial(self.on_outcome, i, bookie))

    def on_outcome(self, i: int, bookie: str, outcome: Outcome) -> None:
        if self.decided:
            return  # a parallel read's late answer
        tracker = self.tracker
        entry: VerifiedEntry | None = None
        if isinstance(outcome, BKError):
            self.answers.append(f"{bookie}: {outcome}")
            result = tracker.record_failed()
        elif outcome.status == pb.EOK and outcome.readResponse.HasField("body"):
            try:
                entry = self.recovery.digest.verify(
                    outcome.readResponse.body, expected_entry_id=self.entry_id
                )
            except DigestMismatchError as exc:
                self.answers.append(f"{bookie}: {exc}")
                result = tracker.record_failed()
            else:
                result = tracker.record_found()
        else:
            self.answers.append(f"{bookie}: {pb.StatusCode.Name(outcome.status)}")
            if outcome.status in _MISSING:
                result = tracker.record_missing()
            else:
                result = tracker.record_failed()
        if result is not ReadOutcome.PENDING:
            self.decided = True
            self.outcomes[self.entry_id] = (result, entry, "; ".join(self.answers))
            self.done()
        elif not self.parallel and i + 1 < len(self.positions):
            self.ask(i + 1)
