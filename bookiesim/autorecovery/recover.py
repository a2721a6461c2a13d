"""``recover BOOKIE``: re-replicate a lost bookie's ledgers now (upstream's
``BookKeeperAdmin.recoverBookieData``), without the auditor and without marks.

Theory of operation
-------------------
For every ledger whose metadata names one of the given bookies (or the one ``ledger_id``
given), in ledger-id order, as upstream does:

1. An OPEN ledger is left alone with ``skip_open`` (``-sk``).
2. A ledger that is not closed and whose **last** ensemble names a lost bookie is first
   recovered (fenced, its tail re-replicated by the client's recovery, and closed), because
   its open-ended last fragment cannot be copied while a writer may still add to it —
   upstream's "fence required". A dry run only says that it would be.
3. Every settled fragment that names a lost bookie is copied to a replacement and swapped in
   by compare-and-set, followed by BP-32's WriteClose to the replacement
   (:meth:`~.replicator.FragmentReplicator.replicate_ledger`, the replication worker's own
   code). A dry run picks the replacement the copy would use and shows the ensemble before
   and after.

``query`` (``-q``) only lists the ledgers that name the bookies, with each segment's
ensemble. A ledger that fails (no bookie left to take a copy, an entry no replica returns)
fails the run unless ``skip_unrecoverable`` (``-sku``), as upstream; the others are still
tried. ``delete_cookies`` (``-d``) removes the bookies' cookies once every ledger is done
(never on a dry run), so their ids may be used again.

The outcome of each ledger goes to ``on_ledger`` as it is known (the shell's progress bar and
table, the HTTP route's log), and the whole run's to the returned :class:`RecoverReport`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bookiesim.autorecovery.admin import AdminError, check_bookie_id
from bookiesim.autorecovery.config import AutoRecoveryConfig
from bookiesim.autorecovery.fragments import fragments_on
from bookiesim.autorecovery.replicator import FragmentReplicator
from bookiesim.client.errors import BKError, NoSuchLedgerError, NotEnoughBookiesError
from bookiesim.metadata.cookies import cookie_node
from bookiesim.metadata.errors import NoNodeError
from bookiesim.metadata.registration import registered_bookies

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from bookiesim.autorecovery.metrics import AutoRecoveryMetrics
    from bookiesim.client.bookkeeper import BookKeeper
    from bookiesim.metadata.ledgers import LedgerMetadata

__all__ = ["LedgerOutcome", "RecoverReport", "ledgers_naming", "recover_bookie_data"]


@dataclass(frozen=True)
class LedgerOutcome:
    """What ``recover`` did (or, on a dry run, would do) to one ledger."""

    ledger_id: int
    state: str
    """The ledger's state when it was looked at: OPEN, IN_RECOVERY, CLOSED."""
    outcome: str
    """``recovered``, ``planned`` (dry run), ``skipped`` (open, ``-sk``), ``failed``,
    ``deleted`` (gone meanwhile) or ``nothing`` (no fragment to copy)."""
    fenced: bool = False
    """It was recovered (fenced and closed) first (dry run: it would be)."""
    fragments: int = 0
    """Fragments copied (dry run: to copy)."""
    entries: int = 0
    bytes: int = 0
    plan: tuple[tuple[int, tuple[str, ...], tuple[str, ...]], ...] = ()
    """(first entry, ensemble now, ensemble after) per fragment; the dry run's plan."""
    write_closes: tuple[str, ...] = ()
    """The WriteClose outcome of each copy that sent one (or skipped it)."""
    error: str | None = None


@dataclass
class RecoverReport:
    bookies: tuple[str, ...]
    ledgers: list[LedgerOutcome] = field(default_factory=list)
    cookies_deleted: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[LedgerOutcome]:
        return [o for o in self.ledgers if o.outcome == "failed"]

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.ledgers if o.outcome == outcome)

    def summary(self) -> str:
        counts = {o.outcome: self.count(o.outcome) for o in self.ledgers}
        shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no ledger"
        entries = sum(o.entries for o in self.ledgers)
        size = sum(o.bytes for o in self.ledgers)
        return f"{shown}; {entries} entries, {size} bytes copied"


async def ledgers_naming(client: BookKeeper, bookies: Collection[str]) -> dict[int, LedgerMetadata]:
    """Every ledger whose metadata names any of ``bookies`` in some segment (upstream's
    ``getLedgersContainBookies``), by id."""
    wanted = set(bookies)
    found: dict[int, LedgerMetadata] = {}
    for ledger_id in await client.list_ledgers():
        try:
            metadata, _ = await client.read_metadata(ledger_id)
        except BKError:
            continue  # deleted since the listing
        if metadata.bookies() & wanted:
            found[ledger_id] = metadata
    return found


async def recover_bookie_data(
    client: BookKeeper,
    bookies: Collection[str],
    *,
    config: AutoRecoveryConfig | None = None,
    metrics: AutoRecoveryMetrics | None = None,
    ledger_id: int | None = None,
    dry_run: bool = False,
    skip_open: bool = False,
    skip_unrecoverable: bool = False,
    delete_cookies: bool = False,
    on_ledger: Callable[[LedgerOutcome], None] | None = None,
    on_found: Callable[[int], None] | None = None,
) -> RecoverReport:
    """Re-replicate the ``bookies``' ledgers (see the module docstring). ``on_found`` gets
    the number of ledgers to look at once they are known. :class:`AdminError` if a bookie
    is still registered (its data is there: nothing to recover) or an id is bad."""
    lost = tuple(sorted({check_bookie_id(b) for b in bookies}))
    if not lost:
        raise AdminError("name at least one bookie to recover")
    running = sorted(set(lost) & await registered_bookies(client.store))
    if running:
        raise AdminError(
            f"bookie {', '.join(running)} is registered (running): recover only a bookie "
            "that is gone"
        )
    replicator = FragmentReplicator(client, config or AutoRecoveryConfig(), metrics)
    report = RecoverReport(lost)
    if ledger_id is None:
        todo = await ledgers_naming(client, lost)
    else:
        metadata, _ = await client.read_metadata(ledger_id)
        todo = {ledger_id: metadata}
    if on_found is not None:
        on_found(len(todo))
    for lid, metadata in sorted(todo.items()):
        outcome = await _recover_ledger(replicator, lid, metadata, set(lost), dry_run, skip_open)
        report.ledgers.append(outcome)
        if on_ledger is not None:
            on_ledger(outcome)
    if report.failed and not skip_unrecoverable:
        first = report.failed[0]
        raise AdminError(
            f"{len(report.failed)} ledger(s) not recovered, the first {first.ledger_id}: "
            f"{first.error} (-sku skips unrecoverable ledgers)"
        )
    if delete_cookies and not dry_run:
        for bookie in lost:
            try:
                await client.store.delete(cookie_node(client.ledgers_root, bookie))
            except NoNodeError:
                continue
            report.cookies_deleted.append(bookie)
    return report


async def _recover_ledger(
    replicator: FragmentReplicator,
    ledger_id: int,
    metadata: LedgerMetadata,
    lost: set[str],
    dry_run: bool,
    skip_open: bool,
) -> LedgerOutcome:
    client = replicator.client
    state = metadata.state.name
    if skip_open and state == "OPEN":
        return LedgerOutcome(ledger_id, state, "skipped")
    fence = not metadata.is_closed and bool(set(metadata.last_ensemble[1]) & lost)
    if dry_run:
        return await _plan(replicator, ledger_id, metadata, lost, fence)
    try:
        if fence:
            await client.open_ledger(ledger_id, recovery=True)
        result = await replicator.replicate_ledger(ledger_id, lost)
    except NoSuchLedgerError:
        return LedgerOutcome(ledger_id, state, "deleted", fence)
    except BKError as exc:
        return LedgerOutcome(ledger_id, state, "failed", fence, error=str(exc))
    copies = result.copies
    error = None
    if not result.healed:
        why = [f"{f}: {exc}" for f, _, exc in result.failures]
        if result.open_fragments:
            why.append("its last fragment is still open")
        error = "; ".join(why)
    return LedgerOutcome(
        ledger_id,
        state,
        "failed" if error else "recovered" if copies else "nothing",
        fence,
        fragments=len(copies),
        entries=sum(c.entries for c in copies),
        bytes=sum(c.bytes for c in copies),
        write_closes=tuple(c.write_close for c in copies if c.write_close is not None),
        error=error,
    )


async def _plan(
    replicator: FragmentReplicator,
    ledger_id: int,
    metadata: LedgerMetadata,
    lost: set[str],
    fence: bool,
) -> LedgerOutcome:
    plan: list[tuple[int, tuple[str, ...], tuple[str, ...]]] = []
    for fragment in fragments_on(metadata, lost):
        after = list(fragment.ensemble)
        for position in fragment.positions_of(lost):
            try:
                after[position] = await replicator.choose_replacement(ledger_id, fragment)
            except NotEnoughBookiesError:
                after[position] = "?"
        plan.append((fragment.first_entry_id, fragment.ensemble, tuple(after)))
    return LedgerOutcome(
        ledger_id,
        metadata.state.name,
        "planned" if plan else "nothing",
        fence,
        fragments=len(plan),
        plan=tuple(plan),
    )
