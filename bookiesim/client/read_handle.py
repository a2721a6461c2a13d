"""Reading a ledger: :class:`ReadOnlyLedgerHandle`, and the :class:`LedgerEntry` it returns.

A reader asks each bookie of an entry's write set in turn until one returns a body whose
digest checks (a corrupt copy is logged and the next replica tried), and bounds its reads by
the last add confirmed it knows: the metadata's last entry for a closed ledger, else what
the bookies' entries report (:meth:`ReadOnlyLedgerHandle.read_last_add_confirmed`). The
writer (:mod:`.ledger_handle`) is a reader too.

Where the ledger ends is decided by quorum coverage, as upstream decides it
(:mod:`.distribution`): a bookie that cannot be reached, times out or answers an error is
*unknown* (it may hold what the others lack), an explicit "no such entry/ledger" is
*definitely not there*. The LAC is known once the answers of the last ensemble cover every
write set (upstream's ``ReadLastConfirmedOp``), and an entry past the LAC was never
acknowledged once ``Qw - Qa + 1`` bookies of its write set say they lack it (upstream's
recovery reads in ``PendingReadOp``). One dead bookie therefore decides nothing either way,
and a reader that cannot reach enough bookies gets an error, never an empty ledger.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import trio

from bookiesim.client.digest import DigestManager, DigestMismatchError, DigestType
from bookiesim.client.distribution import (
    ReadOutcome,
    RecoveryReadTracker,
    RoundRobinDistribution,
    ensemble_covered,
)
from bookiesim.client.errors import (
    BKError,
    BookieRequestError,
    BookieUnavailableError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from bookiesim.metadata.errors import NoSuchLedgerError as MetaNoSuchLedgerError
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.v3 import WireRequest, from_message, read_request

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bookiesim.client.bookie_pool import Outcome
    from bookiesim.client.context import ClientContext
    from bookiesim.metadata.ledgers import LedgerMetadata

__all__ = ["LedgerEntry", "ReadOnlyLedgerHandle"]

log = logging.getLogger(__name__)

_MISSING = (pb.ENOENTRY, pb.ENOLEDGER)


@dataclass(frozen=True)
class LedgerEntry:
    """One entry read back: its payload and the ledger length up to and including it."""

    ledger_id: int
    entry_id: int
    payload: bytes
    length: int


def _digest_type(metadata: LedgerMetadata) -> DigestType:
    return DigestType(int(metadata.digest_type))


class ReadOnlyLedgerHandle:
    """Reads a ledger: entries from any replica of their write set, digests verified.

    Open ledgers can be read up to the last add confirmed that this handle knows
    (:meth:`read_last_add_confirmed` refreshes it); closed ones up to their last entry,
    never past it (invariants S7b).
    """

    def __init__(self, ctx: ClientContext, ledger_id: int, metadata: LedgerMetadata, version: int):
        self._ctx = ctx
        self.ledger_id = ledger_id
        self.metadata = metadata
        self.version = version
        self.digest = DigestManager(ledger_id, metadata.password, _digest_type(metadata))
        self.dist = RoundRobinDistribution(
            metadata.ensemble_size, metadata.write_quorum_size, metadata.ack_quorum_size
        )
        self._lac = metadata.last_entry_id if metadata.is_closed else -1
        self._lac_length = metadata.length if metadata.is_closed else 0

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(ledger_id={self.ledger_id}, "
            f"state={self.metadata.state.name}, lac={self._lac})"
        )

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry id known to be acknowledged (-1: none)."""
        return self._lac

    @property
    def length(self) -> int:
        """Bytes in entries 0..LAC (the metadata's length once the ledger is closed)."""
        return self._lac_length

    @property
    def is_closed(self) -> bool:
        return self.metadata.is_closed

    # -- reads -------------------------------------------------------------------------------

    async def read_entry(self, entry_id: int) -> LedgerEntry:
        return (await self.read_entries(entry_id, entry_id))[0]

    async def read_entries(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` (inclusive), which must not pass the LAC (closed: the
        last entry). Raises :class:`NoSuchEntryError` for ids outside the ledger."""
        bound = self.metadata.last_entry_id if self.metadata.is_closed else self._lac
        if first < 0 or last < first:
            raise NoSuchEntryError(
                f"bad range {first}..{last}", ledger_id=self.ledger_id, entry_id=first
            )
        if last > bound:
            what = "last entry" if self.metadata.is_closed else "last add confirmed"
            raise NoSuchEntryError(
                f"past the {what} ({bound})", ledger_id=self.ledger_id, entry_id=last
            )
        return await self._read_range(first, last, past_lac=False)

    async def read_unconfirmed_entries(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` without the LAC bound (upstream's readUnconfirmedEntries):
        whatever the bookies hold, digest-checked. Raises :class:`NoSuchEntryError` when one
        of them was never acknowledged (quorum coverage, as for :meth:`read_past_lac`)."""
        return await self._read_range(first, last, past_lac=True)

    async def _read_range(self, first: int, last: int, *, past_lac: bool) -> list[LedgerEntry]:
        results: dict[int, LedgerEntry] = {}
        ids = iter(range(first, last + 1))
        window = max(1, self._ctx.config.read_window)

        failures: list[BKError] = []

        async def worker(cancel: trio.CancelScope) -> None:
            for entry_id in ids:
                try:
                    results[entry_id] = await self._read_from_replicas(entry_id, past_lac)
                except BKError as exc:
                    # Raised here, the error would reach the caller wrapped in an exception
                    # group; the first failure cancels the other readers instead.
                    failures.append(exc)
                    cancel.cancel()
                    return

        async with trio.open_nursery() as nursery:
            for _ in range(min(window, last - first + 1)):
                nursery.start_soon(worker, nursery.cancel_scope)
        if failures:
            raise failures[0]
        return [results[i] for i in range(first, last + 1)]

    async def read_entry_unconfirmed(self, entry_id: int) -> LedgerEntry:
        """One entry whatever the LAC says (see :meth:`read_unconfirmed_entries`)."""
        return await self._read_from_replicas(entry_id, past_lac=True)

    async def read_past_lac(self, entry_id: int) -> LedgerEntry | None:
        """An entry past the LAC if some replica holds it, or None once enough replicas of
        its write set said they lack it that it cannot have been acknowledged (``Qw - Qa +
        1`` explicit "no such entry/ledger"). Raises when neither can be told (too few
        answers: bookies unreachable, errors, corrupt copies)."""
        try:
            return await self._read_from_replicas(entry_id, past_lac=True, stop_at_missing=True)
        except NoSuchEntryError:
            return None

    async def _read_from_replicas(
        self, entry_id: int, past_lac: bool = False, *, stop_at_missing: bool = False
    ) -> LedgerEntry:
        """Try each bookie of the entry's write set in turn until one returns a good body.

        ``past_lac``: the entry may not exist, so a failure is told by coverage: no such
        entry when enough replicas lack it that it cannot have been acknowledged, else "cannot
        tell". ``stop_at_missing``: stop asking as soon as that is so (upstream's recovery
        read, for the end of a ledger); otherwise every replica is asked before giving up, as
        upstream's other reads do, since one that lacks an entry (a copy not yet
        re-replicated) does not mean the next one does."""
        ensemble = self.metadata.ensemble_at(entry_id)
        errors: list[BKError] = []
        tracker = RecoveryReadTracker(self.dist.write_quorum, self.dist.ack_quorum)
        for position in self.dist.write_set(entry_id):
            bookie = ensemble[position]
            try:
                response = await self._ctx.pool.call(bookie, read_request(self.ledger_id, entry_id))
            except BookieUnavailableError as exc:
                errors.append(exc)
                tracker.record_failed()
                continue
            status = response.status
            if status == pb.EOK and response.readResponse.HasField("body"):
                try:
                    v = self.digest.verify(response.readResponse.body, expected_entry_id=entry_id)
                except DigestMismatchError as exc:
                    exc.bookie = bookie
                    log.warning("%s (from bookie %s); trying the next replica", exc, bookie)
                    errors.append(exc)
                    tracker.record_failed()
                    continue
                return LedgerEntry(self.ledger_id, entry_id, v.payload, v.length)
            status = status if status != pb.EOK else pb.ENOENTRY
            errors.append(
                BookieRequestError(
                    status,
                    ledger_id=self.ledger_id,
                    entry_id=entry_id,
                    bookie=bookie,
                    operation="read",
                )
            )
            missing = tracker.record_missing() if status in _MISSING else tracker.record_failed()
            if stop_at_missing and missing is ReadOutcome.MISSING:
                break
        raise _read_failure(
            self.ledger_id, entry_id, ensemble, errors, tracker if past_lac else None
        )

    async def read_last_add_confirmed(self) -> int:
        """Ask the bookies of the last ensemble for their last entry (no fencing) and raise
        the known LAC to the highest LAC found in those entries' headers.

        Re-reads the metadata first: a closed ledger answers its last entry at once, and an
        ensemble change since the handle was opened is followed.
        """
        try:
            self.metadata, self.version = await self._ctx.ledger_manager.read(self.ledger_id)
        except MetaNoSuchLedgerError:
            raise NoSuchLedgerError("no metadata", ledger_id=self.ledger_id) from None
        if self.metadata.is_closed:
            self._lac = self.metadata.last_entry_id
            self._lac_length = self.metadata.length
            return self._lac
        lac, length = await self._read_lac_from_bookies()
        if lac > self._lac:
            if length is None:
                length = (await self._read_from_replicas(lac)).length
            self._lac = lac
            self._lac_length = length
        return self._lac

    async def _read_lac_from_bookies(self) -> tuple[int, int | None]:
        """Ask every bookie of the last ensemble, until the answers cover the ensemble;
        returns (the highest LAC found, and the length at that entry if an answer was that
        entry). Raises :class:`BookieUnavailableError` when every bookie answered without
        coverage (upstream's ``ReadLastConfirmedOp`` fails then too): too few of them could
        say what they hold to rule out an entry acknowledged beyond what the others report.

        Over v3 the question is ReadLac, as upstream's client asks it: each bookie returns
        the explicit LAC a writer sent (WriteLac), which its index keeps across a restart,
        and its last entry, whose header carries the LAC piggybacked on it. Over v2, which
        has no ReadLac, it is a read of entry -1 (the last entry), as upstream's v2 client
        asks it.
        """
        _, ensemble = self.metadata.last_ensemble
        positive: set[int] = set()
        answered = 0
        lac = -1
        lengths: dict[int, int] = {}
        unknown: dict[int, str] = {}
        done = trio.Event()
        v2 = self._ctx.pool.v2

        def entry(body: bytes) -> None:
            nonlocal lac
            v = self.digest.verify(body)
            lac = max(lac, v.lac)
            lengths[v.entry_id] = v.length

        def on_outcome(position: int, outcome: Outcome) -> None:
            nonlocal answered, lac
            answered += 1
            bookie = ensemble[position]
            if not isinstance(outcome, BKError):
                if outcome.status == pb.EOK:
                    try:
                        if v2:
                            read = outcome.readResponse
                            if read.HasField("body"):
                                entry(read.body)
                                positive.add(position)
                        else:
                            answer = outcome.readLacResponse
                            if answer.lacBody:
                                lac = max(lac, self.digest.verify_lac(answer.lacBody))
                            if answer.lastEntryBody:
                                entry(answer.lastEntryBody)
                            positive.add(position)
                    except DigestMismatchError as exc:
                        log.warning("LAC read from %s: %s", bookie, exc)
                        unknown[position] = "digest mismatch"
                elif outcome.status in _MISSING:
                    positive.add(position)
                else:
                    unknown[position] = pb.StatusCode.Name(outcome.status)
            else:
                unknown[position] = str(outcome)
            if ensemble_covered(self.dist, positive) or answered == len(ensemble):
                done.set()

        request = read_request(self.ledger_id, -1) if v2 else self._read_lac_request()
        for position, bookie in enumerate(ensemble):
            self._ctx.pool.submit(bookie, request, partial(on_outcome, position))
        await done.wait()
        if not ensemble_covered(self.dist, positive):
            answers = "; ".join(
                f"{ensemble[p]}: {unknown.get(p, 'no answer')}"
                for p in range(len(ensemble))
                if p not in positive
            )
            raise BookieUnavailableError(
                f"cannot learn the last add confirmed: {len(positive)} of the {len(ensemble)} "
                f"bookies of the last ensemble answered, too few to rule out an entry "
                f"acknowledged by the others (E={self.dist.ensemble_size}, "
                f"Qw={self.dist.write_quorum}, Qa={self.dist.ack_quorum}) ({answers})",
                ledger_id=self.ledger_id,
            )
        return lac, lengths.get(lac)

    def _read_lac_request(self) -> WireRequest:
        return from_message(pb.Request(readLacRequest=pb.ReadLacRequest(ledgerId=self.ledger_id)))


def _read_failure(
    ledger_id: int,
    entry_id: int,
    ensemble: Sequence[str],
    errors: list[BKError],
    past_lac: RecoveryReadTracker | None = None,
) -> BKError:
    """The error for an entry no replica could return, most telling first: every replica
    lacks it, or (past the LAC, whose ``past_lac`` tracker decides) enough of them that it
    was never acknowledged → no such entry; a corrupt copy → digest mismatch; else the
    bookie errors (past the LAC: it cannot be told whether the entry was acknowledged)."""
    if past_lac is not None and past_lac.outcome() is ReadOutcome.MISSING:
        return NoSuchEntryError(
            f"never acknowledged: {past_lac.missing} of its write set said no such entry "
            f"({'; '.join(str(e) for e in errors)})",
            ledger_id=ledger_id,
            entry_id=entry_id,
        )
    missing = [e for e in errors if isinstance(e, BookieRequestError) and e.status in _MISSING]
    if len(missing) == len(errors):
        return NoSuchEntryError(
            f"not on any replica ({', '.join(e.bookie or '?' for e in errors)})",
            ledger_id=ledger_id,
            entry_id=entry_id,
        )
    for e in errors:
        if isinstance(e, DigestMismatchError):
            return e
    detail = "; ".join(str(e) for e in errors)
    if past_lac is not None:
        need = past_lac.write_quorum - past_lac.ack_quorum + 1
        return BookieUnavailableError(
            f"cannot tell whether it was acknowledged: {past_lac.missing} of its write set "
            f"said no such entry, {need} needed to rule out an ack quorum ({detail})",
            ledger_id=ledger_id,
            entry_id=entry_id,
        )
    return BookieUnavailableError(
        f"no replica of {list(ensemble)} returned it: {detail}",
        ledger_id=ledger_id,
        entry_id=entry_id,
    )
