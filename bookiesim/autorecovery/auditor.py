"""The auditor: one elected at a time, it marks the ledgers that lost replicas.

Theory of operation
-------------------
Every auto-recovery service is a candidate in the auditor election (:mod:`.election`,
upstream's ``AuditorElector``); while elected, :meth:`Auditor.run` does what upstream's
``Auditor`` does:

* **Bookie losses.** It watches the registrations (``available/`` and ``available/readonly``
  both count as present). A bookie that vanishes is *pending*; after ``lostBookieRecoveryDelay``
  the bookie check runs. The delay is the store's ``underreplication/lostBookieRecoveryDelay``
  (written from the configuration when the auditor starts, unless it exists: the cluster's
  value wins), read at each loss. Upstream's rules hold: delay 0 → audit at once; two or more
  bookies pending → at once (a second failure is no time to wait); every pending bookie back
  before the delay → the delayed audit is cancelled. Any write of the delay node — even of the
  same value, which is how upstream's ``triggeraudit`` works — cancels a delayed audit; if the
  value is 0 or unchanged the audit runs now, else the delayed audit starts over with the new
  delay.
* **The bookie check** (after a loss, every ``auditorPeriodicBookieCheckInterval``, once at
  start even if that is 0): every bookie named in some ledger's ensemble that is not
  registered is lost; every ledger with a fragment on lost bookies is marked, naming them as
  its missing replicas. The periodic run is skipped while a delayed audit is pending.
* **The check of all ledgers** (every ``auditorPeriodicCheckInterval``; 0 = off; the first
  one when that much time has passed since ``checkallledgersctime``): :mod:`.checker` reads
  each ledger's entries on their bookies and marks the ledgers with bookies missing some;
  then ``checkallledgersctime`` records when it ended.
* **The disable flag.** While ``underreplication/disable`` exists nothing is marked: an audit
  waits until re-replication is enabled, and one that finds it disabled after reading the
  ledgers starts over once it is.
* **Healing.** The auditor notes when it saw each bookie go. Once an audit has covered the
  bookie, the first time no mark in the store names it any more is when the cluster healed
  from its loss (``autorecovery_loss_heal_duration_seconds``). It also keeps
  ``autorecovery_under_replicated_ledgers`` equal to the number of marks.

All of it runs one event at a time (a lock around every handler), as upstream runs it on one
executor thread. Errors of the store or of the bookies in one event are logged and the event
dropped; the next event, or the next period, tries again.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING

import trio

from bookiesim.autorecovery.checker import check_ledger
from bookiesim.autorecovery.election import AuditorElector
from bookiesim.client.errors import BKError
from bookiesim.metadata.errors import MetadataError, NoSuchLedgerError
from bookiesim.metadata.registration import (
    available_path,
    readonly_path,
    registered_bookies,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from bookiesim.autorecovery.config import AutoRecoveryConfig
    from bookiesim.autorecovery.metrics import AutoRecoveryMetrics
    from bookiesim.client.bookkeeper import BookKeeper
    from bookiesim.metadata.ledgers import LedgerMetadata
    from bookiesim.metadata.underreplication import UnderReplicationManager

__all__ = ["Auditor"]

log = logging.getLogger(__name__)

_RETRY: float = 1.0
"""Pause before a handler that failed on the store is tried again."""


_MIN_RESCAN: float = 0.05
"""Shortest pause between two counts of the marks (see ``_watch_marks``)."""


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Auditor:
    """Volunteers ``bookie_id`` in the auditor election and audits while elected.

    ``now_ms`` (wall-clock milliseconds by default) dates ``checkallledgersctime`` and
    schedules the first check of all ledgers from it; the checker samples entries with the
    client's ``rng``. Both are there for deterministic runs.
    """

    def __init__(
        self,
        client: BookKeeper,
        urm: UnderReplicationManager,
        config: AutoRecoveryConfig,
        metrics: AutoRecoveryMetrics,
        *,
        bookie_id: str,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self._client = client
        self._store = client.store
        self._root = client.ledgers_root
        self._urm = urm
        self._config = config
        self._metrics = metrics
        self.bookie_id = bookie_id
        self._now_ms = now_ms or _wall_clock_ms
        self._lock = trio.Lock()
        self._elected = False
        self._known: set[str] = set()
        self._pending: set[str] = set()
        self._delayed: trio.CancelScope | None = None
        self._previous_delay: int | None = None
        self._lost_at: dict[str, float] = {}
        self._audited: set[str] = set()
        self._nursery: trio.Nursery | None = None

    @property
    def is_auditor(self) -> bool:
        """Whether this service is the elected auditor now."""
        return self._elected

    # --- the term -------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Volunteer (then ``started``), and audit whenever elected, until cancelled (the vote
        is withdrawn); :mod:`.election`."""
        elector = AuditorElector(self._store, self._urm, self.bookie_id)
        await elector.run(self._term, task_status=task_status)

    async def _term(self) -> None:
        try:
            log.info("%s is the auditor", self.bookie_id)
            self._elected = True
            self._metrics.is_auditor(True)
            await self._serve()
        finally:
            self._elected = False
            self._metrics.is_auditor(False)
            self._pending.clear()
            self._delayed = None
            self._nursery = None

    async def _serve(self) -> None:
        while True:
            try:
                seconds = math.ceil(self._config.lost_bookie_recovery_delay)
                await self._urm.initialize_lost_bookie_recovery_delay(seconds)
                self._previous_delay = await self._urm.get_lost_bookie_recovery_delay()
                self._known = await self._present()
                break
            except MetadataError as exc:
                log.warning("auditor start: %s; retrying", exc)
                await trio.sleep(_RETRY)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for task in (
                self._watch_bookies,
                self._watch_delay,
                self._periodic_bookie_check,
                self._periodic_check_all_ledgers,
                self._watch_marks,
            ):
                nursery.start_soon(self._resilient, task)

    @staticmethod
    async def _resilient(task: Callable[[], Awaitable[None]]) -> None:
        """Run ``task`` again after a store failure that escaped it (a watch's re-read)."""
        while True:
            try:
                await task()
            except* MetadataError as group:
                log.warning("auditor: %s: %s; restarting it", task.__name__, group.exceptions[0])
            else:
                return
            await trio.sleep(_RETRY)

    # --- events, one at a time ----------------------------------------------------------

    async def _handle(self, what: str, handler: Callable[[], Awaitable[None]]) -> None:
        async with self._lock:
            try:
                await handler()
            except* (MetadataError, BKError) as group:
                log.warning("auditor: %s failed: %s", what, group.exceptions[0])

    async def _present(self) -> set[str]:
        """Registered bookies, writable or read-only."""
        return await registered_bookies(self._store, self._root)

    async def _watch_bookies(self) -> None:
        changed = trio.Event()

        async def watch(path: str) -> None:
            nonlocal changed
            async with self._store.watch(path) as changes:
                async for _ in changes:
                    changed.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, available_path(self._root))
            nursery.start_soon(watch, readonly_path(self._root))
            while True:
                await changed.wait()
                changed = trio.Event()
                await self._handle("bookie change", self._bookies_changed)

    async def _bookies_changed(self) -> None:
        await self._urm.wait_until_enabled()
        delay = await self._effective_delay()
        present = await self._present()
        now = trio.current_time()
        for back in present & set(self._lost_at):
            if back not in self._audited:  # came back before anything was marked for it
                del self._lost_at[back]
        self._known |= present
        if self._pending and self._pending <= self._known:
            log.info("lost bookies %s are back; no audit", sorted(self._pending))
            self._cancel_delayed()
            self._pending.clear()
        gone = self._known - present
        for bookie in gone:
            self._lost_at.setdefault(bookie, now)
        self._pending |= gone
        if not self._pending:
            return
        self._known -= self._pending
        if delay == 0 or len(self._pending) > 1:
            self._cancel_delayed()
            await self._bookie_check()
        elif self._delayed is None:
            log.info("bookie %s lost: audit in %d s", sorted(self._pending), delay)
            self._schedule_delayed(delay)

    async def _effective_delay(self) -> int:
        stored = await self._urm.get_lost_bookie_recovery_delay()
        if stored is None:
            return math.ceil(self._config.lost_bookie_recovery_delay)
        return stored

    def _schedule_delayed(self, delay: float) -> None:
        assert self._nursery is not None
        scope = self._delayed = trio.CancelScope()
        self._metrics.bookie_audit_delayed()

        async def later() -> None:
            with scope:
                await trio.sleep(delay)
                await self._handle("delayed audit", self._delayed_audit)

        self._nursery.start_soon(later)

    async def _delayed_audit(self) -> None:
        self._delayed = None
        await self._bookie_check()

    def _cancel_delayed(self) -> None:
        if self._delayed is not None:
            self._delayed.cancel()
            self._delayed = None
            self._metrics.delayed_audit_cancelled()

    async def _watch_delay(self) -> None:
        async with self._urm.watch_lost_bookie_recovery_delay() as values:
            await anext(values)  # the value now, not a change
            async for _ in values:
                await self._handle("lostBookieRecoveryDelay change", self._delay_changed)

    async def _delay_changed(self) -> None:
        await self._urm.wait_until_enabled()
        delay = await self._effective_delay()
        had_delayed = self._delayed is not None
        self._cancel_delayed()
        try:
            if delay == 0 or delay == self._previous_delay:
                log.info("lostBookieRecoveryDelay written (%d s): auditing now", delay)
                await self._bookie_check()
            elif had_delayed:
                self._schedule_delayed(delay)
        finally:
            self._previous_delay = delay

    # --- the audits -------------------------------------------------------------------------

    async def audit_now(self) -> None:
        """Run the bookie check now, whether elected or not (marks merge, so a second
        auditor's marks are harmless); pending bookies are audited without their delay."""
        async with self._lock:
            self._cancel_delayed()
            await self._bookie_check()

    async def _bookie_check(self) -> None:
        started = trio.current_time()
        while True:
            await self._urm.wait_until_enabled()
            ledgers = await self._all_metadata()
            if await self._urm.is_enabled():
                break
        present = await self._present()
        lost = {b for md in ledgers.values() for b in md.bookies()} - present
        now = trio.current_time()
        for bookie in lost:
            self._lost_at.setdefault(bookie, now)
        for ledger_id, md in sorted(ledgers.items()):
            missing = sorted(md.bookies() & lost)
            if missing:
                await self._urm.mark_under_replicated(ledger_id, missing)
                self._metrics.ledger_marked("lost_bookie")
        if lost:
            log.info("bookie check: lost %s", sorted(lost))
        # Every bookie lost by now has been covered: its ledgers are marked (or it had none).
        self._audited |= set(self._lost_at) - present
        self._pending.clear()
        self._metrics.audit("bookie_check", trio.current_time() - started)
        await self._update_marks()

    async def _all_metadata(self) -> dict[int, LedgerMetadata]:
        out: dict[int, LedgerMetadata] = {}
        for ledger_id in await self._client.ledger_manager.list_ledgers():
            try:
                out[ledger_id], _ = await self._client.ledger_manager.read(ledger_id)
            except NoSuchLedgerError:
                continue  # deleted since listed
        return out

    async def check_all_ledgers(self) -> None:
        """Read every ledger's entries on its bookies (:mod:`.checker`) and mark those with
        bookies missing some; then record ``checkallledgersctime``. Stops early, without
        recording, if re-replication is disabled meanwhile."""
        started = trio.current_time()
        await self._urm.wait_until_enabled()
        present = await self._present()
        pct = self._config.auditor_ledger_verification_percentage
        checked = 0
        for ledger_id in await self._client.ledger_manager.list_ledgers():
            if not await self._urm.is_enabled():
                log.info("re-replication disabled: check of all ledgers stopped")
                return
            try:
                md, _ = await self._client.ledger_manager.read(ledger_id)
            except NoSuchLedgerError:
                continue
            bad = await check_ledger(
                self._client.pool, ledger_id, md, present, percentage=pct, rng=self._client.rng
            )
            checked += 1
            if bad:
                log.info("ledger %d: %s miss entries", ledger_id, sorted(bad))
                await self._urm.mark_under_replicated(ledger_id, sorted(bad))
                self._metrics.ledger_marked("missing_entries")
        self._metrics.ledgers_checked(checked)
        await self._urm.set_check_all_ledgers_ctime(self._now_ms())
        self._metrics.audit("check_all_ledgers", trio.current_time() - started)
        await self._update_marks()

    async def _periodic_bookie_check(self) -> None:
        interval = self._config.auditor_periodic_bookie_check_interval
        while True:
            if self._delayed is None:  # a loss is being waited for: its audit will come
                await self._handle("bookie check", self._bookie_check)
            if interval <= 0:
                return
            await trio.sleep(interval)

    async def _periodic_check_all_ledgers(self) -> None:
        interval = self._config.auditor_periodic_check_interval
        if interval <= 0:
            return
        while True:
            try:
                last = await self._urm.get_check_all_ledgers_ctime()
                break
            except MetadataError as exc:
                log.warning("checkallledgersctime: %s", exc)
                await trio.sleep(_RETRY)
        if last is not None:
            since = max(0.0, (self._now_ms() - last) / 1000)
            await trio.sleep(max(0.0, interval - since))
        while True:
            await self._handle("check of all ledgers", self.check_all_ledgers)
            await trio.sleep(interval)

    # --- marks and healing ------------------------------------------------------------------

    async def _watch_marks(self) -> None:
        while True:
            await self._urm.wait_for_marks()
            started = trio.current_time()
            await self._handle("marks", self._update_marks)
            # A scan reads every mark, and while workers run every lock they take is a change:
            # rescan at most at twice the pace a scan takes, so the auditor never spends more
            # than a third of its time counting (the gauge and heal times lag by that much).
            await trio.sleep(max(_MIN_RESCAN, 2 * (trio.current_time() - started)))

    async def _update_marks(self) -> None:
        marks = await self._urm.under_replicated()
        self._metrics.under_replicated(len(marks))
        named = {replica for mark in marks for replica in mark.replicas}
        now = trio.current_time()
        for bookie in sorted(self._audited - named):
            lost_at = self._lost_at.pop(bookie, None)
            self._audited.discard(bookie)
            if lost_at is not None:
                log.info("no ledger waits for bookie %s any more", bookie)
                self._metrics.loss_healed(now - lost_at)
