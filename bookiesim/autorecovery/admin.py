"""Auto-recovery by hand: upstream's ``BookKeeperAdmin`` operations on the shared state.

Theory of operation
-------------------
The shell commands (``bookiesim shell listunderreplicated``, ``whoisauditor``,
``triggeraudit``, ``lostbookierecoverydelay``, ``autorecovery``, ``decommissionbookie``,
``recover``) and the admin HTTP routes (``/api/v1/autorecovery/...``) do the same things, so
both call these functions; what differs is only how they print. Everything goes through the
metadata store — the under-replication records (:class:`UnderReplicationManager`), ledger
metadata, registrations and cookies — exactly as upstream's tools do, so they work whether or
not an auditor runs, and on a cluster where upstream's auditor runs.

* **Trigger an audit** as upstream does: rewrite ``lostBookieRecoveryDelay`` with its own
  value; the auditor watches that node and runs its bookie check at once. Refused when
  re-replication is disabled or no auditor is elected (nobody would notice).
* **Decommission** a bookie that is gone: refused while it is registered (writable or
  read-only); trigger an audit; wait until no ledger's metadata names the bookie in a
  fragment that stores entries on it and no mark names it — the workers' swaps do that —
  then delete its cookie, so the id may be reused. Upstream sleeps 30 s after the trigger and
  then polls each remaining ledger every few seconds; we poll the same two conditions from
  the start (the metadata names the bookie until a worker swapped it out, so there is no
  window in which the answer is "done" too early).
* **Recover** a lost bookie's ledgers now: see :mod:`.recover`.

Failures a user can cause (no auditor, re-replication disabled, a bookie still registered, a
bad id) raise :class:`AdminError` with one line that says what to do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from bookiesim.autorecovery.fragments import distribution, fragments_on, stored_entries
from bookiesim.metadata.cookies import cookie_node
from bookiesim.metadata.errors import NoNodeError, NoSuchLedgerError
from bookiesim.metadata.ledgers import LedgerManager
from bookiesim.metadata.registration import registered_bookies

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from bookiesim.metadata.ledgers import LedgerMetadata
    from bookiesim.metadata.store import MetadataStore
    from bookiesim.metadata.underreplication import (
        UnderReplicatedLedger,
        UnderReplicationManager,
    )

__all__ = [
    "AdminError",
    "DecommissionProgress",
    "check_bookie_id",
    "decommission_bookie",
    "ledgers_storing",
    "list_under_replicated",
    "replica_filter",
    "set_lost_bookie_recovery_delay",
    "stores_entries_on",
    "trigger_audit",
]

DECOMMISSION_POLL = 1.0
"""Seconds between two looks at what still names a decommissioned bookie."""


class AdminError(Exception):
    """An operation refused or impossible now; the message says why, in one line."""


def check_bookie_id(bookie_id: str) -> str:
    """``bookie_id`` if it can be a BookieId (``host:port``, or a custom id without spaces,
    slashes or commas); else :class:`AdminError`."""
    text = bookie_id.strip()
    if not text or any(c in text for c in " /,\t\n") or text.endswith(":"):
        raise AdminError(f"not a bookie id: {bookie_id!r} (expected host:port)")
    return text


def replica_filter(
    missing_replica: str | None = None, excluding_missing_replica: str | None = None
) -> Callable[[Sequence[str]], bool]:
    """Upstream's ``listunderreplicated`` predicate on a mark's replicas: names
    ``missing_replica`` (when given) and does not name ``excluding_missing_replica``."""

    def accept(replicas: Sequence[str]) -> bool:
        if missing_replica and missing_replica not in replicas:
            return False
        return not (excluding_missing_replica and excluding_missing_replica in replicas)

    return accept


async def list_under_replicated(
    urm: UnderReplicationManager,
    *,
    missing_replica: str | None = None,
    excluding_missing_replica: str | None = None,
) -> list[UnderReplicatedLedger]:
    """The marks, by ledger id, that :func:`replica_filter` accepts."""
    accept = replica_filter(missing_replica, excluding_missing_replica)
    return [mark for mark in await urm.under_replicated() if accept(mark.replicas)]


async def trigger_audit(urm: UnderReplicationManager) -> int:
    """Make the auditor run its bookie check now; returns the delay it rewrote."""
    if not await urm.is_enabled():
        raise AdminError(
            "auto-recovery is disabled, so no audit would run: enable it first "
            "(bookiesim shell autorecovery -enable)"
        )
    if await urm.auditor() is None:
        raise AdminError("no auditor elected, though auto-recovery is enabled: is one running?")
    delay = await urm.get_lost_bookie_recovery_delay()
    if delay is None:
        # An elected auditor writes its configured delay at start; without it there is
        # nothing to rewrite, and writing a value of our own would change its behaviour.
        raise AdminError("lostBookieRecoveryDelay is not in the store yet: the auditor sets it")
    await urm.set_lost_bookie_recovery_delay(delay)
    return delay


async def set_lost_bookie_recovery_delay(urm: UnderReplicationManager, seconds: int) -> None:
    if seconds < 0:
        raise AdminError(f"lostBookieRecoveryDelay must be 0 or more seconds, got {seconds}")
    await urm.set_lost_bookie_recovery_delay(seconds)


def stores_entries_on(metadata: LedgerMetadata, bookie_id: str) -> bool:
    """Whether the metadata still has ``bookie_id`` store entries of the ledger: it holds a
    position in an open-ended fragment, or in a closed one with an entry striped onto it
    (upstream's ``areEntriesOfLedgerStoredInTheBookie``)."""
    dist = distribution(metadata)
    for fragment in fragments_on(metadata, {bookie_id}):
        if not fragment.is_closed:
            return True
        for position in fragment.positions_of({bookie_id}):
            if next(stored_entries(fragment, dist, position), None) is not None:
                return True
    return False


async def ledgers_storing(
    ledgers: LedgerManager, bookie_ids: Iterable[str], *, only: Iterable[int] | None = None
) -> dict[int, LedgerMetadata]:
    """Ledgers (all, or those of ``only``) whose metadata names any of ``bookie_ids`` in a
    fragment storing entries on it, with that metadata; deleted ledgers are left out."""
    wanted = set(bookie_ids)
    ids = await ledgers.list_ledgers() if only is None else sorted(set(only))
    found: dict[int, LedgerMetadata] = {}
    for ledger_id in ids:
        try:
            metadata, _ = await ledgers.read(ledger_id)
        except NoSuchLedgerError:
            continue  # deleted since the listing: nothing left to replicate
        if any(stores_entries_on(metadata, b) for b in wanted):
            found[ledger_id] = metadata
    return found


@dataclass(frozen=True)
class DecommissionProgress:
    """One look at what still names the bookie being decommissioned."""

    bookie_id: str
    ledgers: tuple[int, ...]
    """Ledgers whose metadata still stores entries on it."""
    marked: tuple[int, ...]
    """Ledgers still marked under-replicated with it among their missing replicas."""
    elapsed: float

    @property
    def remaining(self) -> int:
        return len(set(self.ledgers) | set(self.marked))

    @property
    def done(self) -> bool:
        return self.remaining == 0


async def decommission_bookie(
    store: MetadataStore,
    urm: UnderReplicationManager,
    bookie_id: str,
    *,
    poll: float = DECOMMISSION_POLL,
    on_progress: Callable[[DecommissionProgress], None] | None = None,
) -> bool:
    """Decommission a bookie that is gone (see the module docstring); returns whether a
    cookie was deleted (False: it had none, e.g. deleted before). Runs until done: the
    caller bounds it (``trio.fail_after``) if it must."""
    bookie_id = check_bookie_id(bookie_id)
    if bookie_id in await registered_bookies(store):
        raise AdminError(
            f"bookie {bookie_id} is still registered (it is running): stop it before "
            "decommissioning it"
        )
    await trigger_audit(urm)
    ledgers = LedgerManager(store)
    started = time.monotonic()
    # One walk of every ledger, then only those left: a ledger created later cannot name a
    # bookie that is not registered, and a swap never puts it back.
    storing = await ledgers_storing(ledgers, [bookie_id])
    while True:
        marks = await list_under_replicated(urm, missing_replica=bookie_id)
        marked = tuple(m.ledger_id for m in marks)
        storing = await ledgers_storing(ledgers, [bookie_id], only=[*storing, *marked])
        progress = DecommissionProgress(
            bookie_id, tuple(sorted(storing)), marked, time.monotonic() - started
        )
        if on_progress is not None:
            on_progress(progress)
        if progress.done:
            break
        await trio.sleep(poll)
    try:
        await store.delete(cookie_node(store.ledgers_root, bookie_id))
    except NoNodeError:
        return False
    return True
