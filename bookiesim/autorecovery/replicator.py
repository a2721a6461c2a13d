"""Copying a lost bookie's share of a fragment to a replacement (upstream's
``LedgerFragmentReplicator`` and ``BookKeeperAdmin.replicateLedgerFragment``).

Theory of operation
-------------------
For one fragment of a ledger (:mod:`.fragments`) and one lost bookie of its ensemble,
:meth:`FragmentReplicator.replicate` does, in this order:

1. **Choose a replacement** as a writer's ensemble change would: a writable registered bookie
   (not read-only) that is not in the fragment's ensemble, at random with the client's
   generator. None left: :class:`~bookiesim.client.errors.NotEnoughBookiesError`.
2. **Copy** every entry the lost bookie stored in the fragment (its write-set share): read it
   from a surviving replica (the other bookies of its write set, registered ones first; a
   failed read or a body whose digest does not check tries the next), then write the body
   as read to the replacement as a RECOVERY_ADD (high priority, the master key computed from
   the ledger's password as the client computes it; :mod:`.replica_io`). At most
   ``rereplicationEntryBatchSize`` entries are in flight. An entry no replica returns fails
   the copy. A fragment with no entry for that position needs no copy.
3. **Swap** the bookie in that segment of the metadata by compare-and-set
   (:meth:`~bookiesim.metadata.ledgers.LedgerManager.update_with_retry`), only now that every
   entry is on the replacement (acknowledged, so journaled). If the segment no longer names
   the lost bookie there — another worker replaced it first — nothing is written: no bookie
   is swapped twice.
4. **WriteClose** (BP-32, reason ``replication``) to the replacement, if its registration
   advertises ``writeClose`` (``skipped`` otherwise, as over the v2 protocol, or when
   ``write_close_after_replication`` is off for an experiment), so the log the copies opened
   is sealed at its next checkpoint. Not sent when nothing was copied (no log was opened),
   nor when the ledger is still open and the replacement is in its last ensemble (its writer
   is still writing to that log; its own close will say when it is done).

A copy interrupted anywhere before step 3 leaves the metadata as it was: the entries already
on the replacement are orphans its garbage collector reclaims (the ledger does not name it),
and a later attempt starts afresh, perhaps on another bookie.

:meth:`FragmentReplicator.replicate_ledger` applies this to every settled fragment of a
ledger that names a lost bookie (or a registered bookie found missing entries,
:meth:`FragmentReplicator.misses_entries`), re-reading the metadata after each swap; the
replication worker (:mod:`.worker`) and ``recover BOOKIE`` use it.

Two bug switches of :class:`~bookiesim.autorecovery.config.AutoRecoveryConfig` re-create
faults for the simulator's campaign: ``unsafe_swap_before_copy`` does step 3 before step 2
(readers may then find the new bookie without the entries), and
``unsafe_replication_adds_without_recovery_flag`` copies with plain adds, which a bookie
that has the ledger fenced refuses (upstream 4.16.0-4.16.3).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from bookiesim.autorecovery.checker import entries_to_verify
from bookiesim.autorecovery.fragments import (
    Fragment,
    distribution,
    fragments_on,
    ledger_fragments,
    stored_entries,
)
from bookiesim.autorecovery.replica_io import (
    has_entries,
    read_first_good,
    write_close_for_replication,
    write_entry,
)
from bookiesim.client.digest import DigestManager, DigestType
from bookiesim.client.errors import (
    BKError,
    MetadataConflictError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
)
from bookiesim.metadata.errors import NoSuchLedgerError as MetaNoSuchLedgerError

if TYPE_CHECKING:
    from collections.abc import Collection

    from bookiesim.autorecovery.config import AutoRecoveryConfig
    from bookiesim.autorecovery.metrics import AutoRecoveryMetrics
    from bookiesim.client.bookkeeper import BookKeeper
    from bookiesim.client.distribution import RoundRobinDistribution
    from bookiesim.metadata.ledgers import LedgerMetadata

__all__ = ["FragmentCopy", "FragmentReplicator", "LedgerReplication"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FragmentCopy:
    """What one :meth:`FragmentReplicator.replicate` did."""

    ledger_id: int
    fragment: Fragment
    lost: str
    replacement: str
    entries: int
    """Entries written to the replacement."""
    bytes: int
    """Their payload bytes."""
    swapped: bool
    """False when the metadata no longer named ``lost`` there (replaced by someone else)."""
    write_close: str | None
    """``ok``, ``failed``, ``skipped`` (not advertised), or None (not due, see the module)."""


@dataclass
class LedgerReplication:
    """What :meth:`FragmentReplicator.replicate_ledger` did to one ledger."""

    ledger_id: int
    metadata: LedgerMetadata
    """As stored after the last swap."""
    copies: list[FragmentCopy] = field(default_factory=list)
    failures: list[tuple[Fragment, str, BKError]] = field(default_factory=list)
    """(fragment, lost bookie, why) for each copy that failed."""
    open_fragments: list[Fragment] = field(default_factory=list)
    """The ledger's open-ended last fragment, if it names a lost bookie: not copied."""

    @property
    def healed(self) -> bool:
        """No fragment names a lost bookie any more."""
        return not self.failures and not self.open_fragments


@dataclass
class _Copy:
    """One copy under way: what it copies where, and how much is done."""

    ledger_id: int
    fragment: Fragment
    position: int
    replacement: str
    digest: DigestManager
    dist: RoundRobinDistribution
    unavailable: frozenset[str]
    entries: int = 0
    bytes: int = 0


class FragmentReplicator:
    """Copies fragments of lost bookies through ``client``'s connections and metadata."""

    def __init__(
        self,
        client: BookKeeper,
        config: AutoRecoveryConfig,
        metrics: AutoRecoveryMetrics | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self.metrics = metrics

    # -- one ledger ----------------------------------------------------------------------------

    async def replicate_ledger(
        self,
        ledger_id: int,
        lost: Collection[str],
        *,
        incomplete: Collection[tuple[int, str]] = (),
    ) -> LedgerReplication:
        """Replicate every settled fragment of ``ledger_id`` that names a bookie in ``lost``,
        and the (segment's first entry, bookie) pairs of ``incomplete`` (a bookie still there
        but missing entries, see :meth:`misses_entries`), one bookie at a time, re-reading the
        metadata after each swap. A failed copy is recorded and the next one tried. Raises
        :class:`NoSuchLedgerError` if the ledger has no metadata."""
        metadata, _ = await self.client.read_metadata(ledger_id)
        result = LedgerReplication(ledger_id, metadata)
        tried: set[tuple[int, str]] = set()
        while True:
            todo = [
                (f, bookie)
                for f in ledger_fragments(result.metadata)
                for bookie in f.ensemble
                if (bookie in lost or (f.first_entry_id, bookie) in incomplete)
                and f.is_closed
                and (f.first_entry_id, bookie) not in tried
            ]
            if not todo:
                break
            fragment, bookie = todo[0]
            tried.add((fragment.first_entry_id, bookie))
            try:
                copy = await self.replicate(ledger_id, result.metadata, fragment, bookie, lost)
            except BKError as exc:
                log.warning(
                    "ledger %d: %s of %s not replicated: %s", ledger_id, fragment, bookie, exc
                )
                result.failures.append((fragment, bookie, exc))
            else:
                result.copies.append(copy)
            result.metadata, _ = await self.client.read_metadata(ledger_id)
        result.open_fragments = [f for f in fragments_on(result.metadata, lost) if not f.is_closed]
        return result

    # -- one fragment, one lost bookie -------------------------------------------------------

    async def replicate(
        self,
        ledger_id: int,
        metadata: LedgerMetadata,
        fragment: Fragment,
        lost: str,
        unavailable: Collection[str] = (),
    ) -> FragmentCopy:
        """Copy ``lost``'s share of ``fragment`` to a new bookie and swap it in (steps 1-4 of
        the module docstring). ``unavailable`` bookies are read from last. Raises
        :class:`NotEnoughBookiesError` when no bookie can take the copy, another
        :class:`BKError` when an entry cannot be read or written, and
        :class:`MetadataConflictError` when the segment changed in a way that forbids the
        swap."""
        if not fragment.is_closed:
            raise ValueError(f"ledger {ledger_id}: fragment {fragment} is still open")
        if lost not in fragment.ensemble:
            raise ValueError(f"ledger {ledger_id}: {lost} is not in fragment {fragment}")
        try:
            replacement = await self.choose_replacement(ledger_id, fragment)
        except NotEnoughBookiesError:
            self._count("failed", None)
            raise
        job = _Copy(
            ledger_id=ledger_id,
            fragment=fragment,
            position=fragment.ensemble.index(lost),
            replacement=replacement,
            digest=DigestManager(
                ledger_id, metadata.password, DigestType(int(metadata.digest_type))
            ),
            dist=distribution(metadata),
            unavailable=frozenset(unavailable) | {lost},
        )
        try:
            if self.config.unsafe_swap_before_copy:  # the bug switch: readers may find holes
                swapped, metadata = await self.replace_bookie(
                    ledger_id, fragment.first_entry_id, lost, replacement
                )
                await self._copy(job)
            else:
                await self._copy(job)
                swapped, metadata = await self.replace_bookie(
                    ledger_id, fragment.first_entry_id, lost, replacement
                )
        except BKError:
            self._count("failed", job)
            raise
        self._count("ok", job)
        log.info(
            "ledger %d: %s of %s copied to %s (%d entries, %d bytes)%s",
            ledger_id,
            fragment,
            lost,
            replacement,
            job.entries,
            job.bytes,
            "" if swapped else "; already replaced by someone else",
        )
        write_close = None
        if job.entries and (metadata.is_closed or replacement not in metadata.last_ensemble[1]):
            write_close = await self._write_close(ledger_id, replacement, job.digest.master_key)
            if self.metrics is not None:
                self.metrics.write_close_after_replication(write_close)
        return FragmentCopy(
            ledger_id, fragment, lost, replacement, job.entries, job.bytes, swapped, write_close
        )

    def _count(self, outcome: str, job: _Copy | None) -> None:
        if self.metrics is not None:
            entries, bytes_ = (0, 0) if job is None else (job.entries, job.bytes)
            self.metrics.fragment_replicated(outcome, entries, bytes_)

    async def choose_replacement(self, ledger_id: int, fragment: Fragment) -> str:
        """A writable registered bookie outside the fragment's ensemble, chosen at random
        (the client's rule for an ensemble change)."""
        live = await self.client.live_bookies()
        candidates = sorted(b for b in live if b not in fragment.ensemble)
        if not candidates:
            raise NotEnoughBookiesError(
                f"no bookie to replace one of {list(fragment.ensemble)}: the writable bookies "
                f"are {sorted(live)}",
                ledger_id=ledger_id,
            )
        return self.client.rng.choice(candidates)

    async def replace_bookie(
        self, ledger_id: int, first_entry_id: int, lost: str, replacement: str
    ) -> tuple[bool, LedgerMetadata]:
        """Swap ``lost`` for ``replacement`` in the segment starting at ``first_entry_id``, by
        compare-and-set on the current metadata. Returns (whether this call swapped, the
        metadata now stored); False when the segment no longer names ``lost``."""
        swapped = False

        def swap(current: LedgerMetadata) -> LedgerMetadata | None:
            nonlocal swapped
            swapped = False
            segment = current.ensembles.get(first_entry_id)
            if segment is None:
                raise MetadataConflictError(
                    f"no segment starts at entry {first_entry_id} any more", ledger_id=ledger_id
                )
            if lost not in segment:
                return None
            if replacement in segment:
                raise MetadataConflictError(
                    f"{replacement} joined the segment at entry {first_entry_id} meanwhile",
                    ledger_id=ledger_id,
                )
            swapped = True
            bookies = [replacement if b == lost else b for b in segment]
            return current.with_ensemble(first_entry_id, bookies)

        try:
            metadata, _ = await self.client.ledger_manager.update_with_retry(ledger_id, swap)
        except MetaNoSuchLedgerError:
            raise NoSuchLedgerError("deleted during replication", ledger_id=ledger_id) from None
        return swapped, metadata

    async def misses_entries(
        self, ledger_id: int, metadata: LedgerMetadata, fragment: Fragment, bookie: str
    ) -> bool:
        """Whether ``bookie`` (registered) answers that it lacks one of the entries it should
        store in the closed ``fragment`` that upstream's worker reads to check it: the first,
        the last, and ``auditorLedgerVerificationPercentage`` of the others
        (:func:`~.checker.entries_to_verify`)."""
        position = fragment.ensemble.index(bookie)
        held = list(stored_entries(fragment, distribution(metadata), position))
        percentage = self.config.auditor_ledger_verification_percentage
        chosen = entries_to_verify(held, percentage, self.client.rng)
        return not await has_entries(self.client.pool, bookie, ledger_id, chosen)

    # -- the copy ------------------------------------------------------------------------------

    async def _copy(self, job: _Copy) -> None:
        """Entries in flight at most ``rereplication_entry_batch_size``; the first failure
        stops the others and is raised (not wrapped in an exception group)."""
        entries = stored_entries(job.fragment, job.dist, job.position)
        failures: list[BKError] = []

        async def worker(cancel: trio.CancelScope) -> None:
            for entry_id in entries:
                try:
                    await self._copy_entry(job, entry_id)
                except BKError as exc:
                    failures.append(exc)
                    cancel.cancel()
                    return

        async with trio.open_nursery() as nursery:
            for _ in range(self.config.rereplication_entry_batch_size):
                nursery.start_soon(worker, nursery.cancel_scope)
        if failures:
            raise failures[0]

    async def _copy_entry(self, job: _Copy, entry_id: int) -> None:
        ensemble = job.fragment.ensemble
        sources = [ensemble[p] for p in job.dist.write_set(entry_id) if p != job.position]
        sources.sort(key=lambda b: b in job.unavailable)  # stable: write-set order otherwise
        pool = self.client.pool
        body, payload = await read_first_good(pool, job.digest, entry_id, sources)
        recovery = not self.config.unsafe_replication_adds_without_recovery_flag
        await write_entry(pool, job.replacement, job.digest, entry_id, body, recovery=recovery)
        job.entries += 1
        job.bytes += payload

    async def _write_close(self, ledger_id: int, bookie: str, master_key: bytes) -> str:
        """WriteClose (reason replication) to ``bookie`` if it advertises it: ``ok``,
        ``failed`` or ``skipped``."""
        if not self.config.write_close_after_replication:
            return "skipped"
        info = (await self.client.live_bookies()).get(bookie)
        if info is None or not info.supports_write_close or self.client.pool.v2:
            return "skipped"
        return await write_close_for_replication(self.client.pool, bookie, ledger_id, master_key)
