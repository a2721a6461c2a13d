"""The demo's last act: a bookie dies, the cluster heals (auto-recovery).

Every bookie of the demo runs auto-recovery (``cluster up``'s default): one of them is the
elected auditor, each runs a replication worker. The act:

1. a spare bookie joins (with E=3 on three bookies, a lost one has nobody to be replaced by);
2. one bookie that is not the auditor is killed with SIGKILL, as a crash would: no final
   checkpoint, and its registration stays until its metadata session expires;
3. a timeline, read from the metadata store as it happens: the registration vanishing, the
   auditor marking every ledger with a fragment on the dead bookie under-replicated
   (``lostBookieRecoveryDelay`` is 0), the workers locking them, copying the dead bookie's
   share of each fragment from the survivors to the spare, swapping it into the metadata,
   and removing the marks;
4. the ensembles before and after, and on the bookie that received the copies what BP-32's
   third case did: the replication worker's WriteClose (reason ``replication``) rotated each
   copied ledger's log there, and the next checkpoint sealed them — read from its admin API
   and ``/metrics``.

The caller then reads every entry back with the dead bookie still dead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio
from rich.markup import escape
from rich.table import Table

from bookiesim.cluster.control import add_bookie
from bookiesim.cluster.probe import (
    Samples,
    bookie_info,
    bookie_metrics,
    metric_by_label,
    reasons,
    snapshot,
    wait_for_fresh_checkpoint,
)
from bookiesim.cluster.processes import HOST, ClusterError
from bookiesim.metadata import open_store
from bookiesim.metadata.ledgers import LedgerManager
from bookiesim.metadata.registration import registered_bookies
from bookiesim.metadata.underreplication import UnderReplicationManager

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path
    from typing import Any

    from rich.console import Console

    from bookiesim.cluster.processes import LocalBookie

__all__ = ["HEAL_TIMEOUT", "Healing", "heal_act"]

HEAL_TIMEOUT = 60.0
"""Seconds from the kill to no ledger naming the dead bookie (its session expires in 4)."""
POLL = 0.05


def _id(bookie: LocalBookie) -> str:
    return f"{HOST}:{bookie.bookie_port}"


@dataclass
class Healing:
    """What the act saw; ``victim`` is dead, ``spare`` joined."""

    victim: LocalBookie
    spare: LocalBookie
    before: dict[int, list[tuple[str, ...]]]
    after: dict[int, list[tuple[str, ...]]] = field(default_factory=dict)
    seconds: float = 0.0


async def _ensembles(uri: str, ledger_ids: Sequence[int]) -> dict[int, list[tuple[str, ...]]]:
    async with open_store(uri) as store:
        ledgers = LedgerManager(store)
        return {
            lid: [tuple(e) for e in (await ledgers.read(lid))[0].ensembles.values()]
            for lid in ledger_ids
        }


async def _auditor(uri: str) -> str | None:
    async with open_store(uri) as store:
        return await UnderReplicationManager(store).auditor()


class _Timeline:
    """Polls the store and says what changed, once each."""

    def __init__(
        self, victim: str, ledger_ids: Sequence[int], name: Callable[[str], str], say: Any
    ) -> None:
        self.victim = victim
        self.ledger_ids = list(ledger_ids)
        self.name = name
        self.say = say
        self.registered = True
        self.marks: dict[int, tuple[str, ...]] = {}
        self.locks: dict[int, str] = {}
        self.naming = set(ledger_ids)

    async def run(self, uri: str, started: float) -> None:
        async with open_store(uri) as store:
            urm = UnderReplicationManager(store)
            ledgers = LedgerManager(store)
            while True:
                await self._look(store, urm, ledgers, time.monotonic() - started)
                if not (self.registered or self.marks or self.naming):
                    return
                await trio.sleep(POLL)

    async def _look(
        self, store: Any, urm: UnderReplicationManager, ledgers: LedgerManager, t: float
    ) -> None:
        if self.registered:
            present = await registered_bookies(store)
            if self.victim not in present:
                self.registered = False
                self.say(t, f"{self.name(self.victim)}'s registration is gone (session expired)")
        marks = {m.ledger_id: m.replicas for m in await urm.under_replicated()}
        new = sorted(set(marks) - set(self.marks))
        if new:
            auditor = await urm.auditor()
            missing = ", ".join(sorted({self.name(r) for lid in new for r in marks[lid]}))
            by = f" by the auditor {self.name(auditor)}" if auditor else ""
            listed = ", ".join(map(str, new))
            self.say(t, f"ledgers {listed} marked under-replicated{by} (missing: {missing})")
        for lid in sorted(marks):
            owner = await urm.lock_owner(lid)
            if owner and self.locks.get(lid) != owner:
                self.locks[lid] = owner
                # Workers lock with their host's name, as upstream's do (not a bookie id).
                self.say(t, f"ledger {lid} locked by a replication worker (on {owner})")
        for lid in sorted(self.naming):
            metadata, _ = await ledgers.read(lid)
            if self.victim not in metadata.bookies():
                self.naming.discard(lid)
                now = ", ".join(self.name(b) for b in metadata.last_ensemble[1])
                self.say(t, f"ledger {lid}: copied and swapped in the metadata, ensemble {now}")
        for lid in sorted(set(self.marks) - set(marks)):
            self.say(t, f"ledger {lid}: mark removed, fully replicated again")
        self.marks = marks


def heal_act(
    console: Console,
    root: Path,
    state: dict[str, Any],
    bookies: list[LocalBookie],
    ledger_ids: Sequence[int],
    flush_interval_ms: int,
) -> Healing:
    """Run the act (see the module docstring) on the running ``bookies``; the spare is
    appended to ``bookies`` as soon as it runs (so the caller stops it too)."""
    uri = state["metadata"]
    with console.status("A spare bookie joins…"):
        spare = add_bookie(root, state)
        bookies.append(spare)
    names = {_id(b): b.name for b in bookies}

    def name(bookie_id: str | None) -> str:
        return names.get(bookie_id or "", bookie_id or "?")

    auditor = trio.run(_auditor, uri)
    victim = [b for b in bookies if b is not spare and _id(b) != auditor][-1]
    before = trio.run(_ensembles, uri, ledger_ids)
    spare_before = snapshot(spare)
    console.print()
    console.print(
        f"[bold]4. {victim.name} is killed (SIGKILL); the cluster heals[/] — auditor "
        f"{escape(name(auditor))}, spare {spare.name} ({_id(spare)}), lostBookieRecoveryDelay 0",
        soft_wrap=True,
    )

    def say(t: float, text: str) -> None:
        console.print(f"  [dim]+{t:5.1f} s[/]  {escape(text)}", soft_wrap=True)

    victim.kill9()
    started = time.monotonic()
    if victim.proc.stdout is not None:
        victim.proc.stdout.close()  # nothing more to read: stop_bookies will not see it
    say(0.0, f"{victim.name} ({_id(victim)}) killed")
    timeline = _Timeline(_id(victim), ledger_ids, name, say)
    try:
        with console.status("Watching the metadata store…"):
            trio.run(_bounded, timeline, uri, started)
    except trio.TooSlowError:
        raise ClusterError(
            f"the cluster did not heal within {HEAL_TIMEOUT:.0f} s of {victim.name}'s death: "
            f"marks {sorted(timeline.marks)}, ledgers still naming it {sorted(timeline.naming)}; "
            "see DIR/bookie-N/bookie.log"
        ) from None
    healing = Healing(victim, spare, before, seconds=time.monotonic() - started)
    healing.after = trio.run(_ensembles, uri, ledger_ids)
    # Counted once healed: every copy and its WriteClose are done (a worker removes a mark
    # only after both), and the sorted storage rotates a copy's log in the flush of the
    # next checkpoint that begins after that, which seals it too (one under way may have
    # taken its table before the copies arrived).
    with console.status("Waiting for the spare's checkpoint…"):
        wait_for_fresh_checkpoint([spare], flush_interval_ms)
    _print_tables(console, healing, bookies, name, spare_before.info)
    return healing


async def _bounded(timeline: _Timeline, uri: str, started: float) -> None:
    with trio.fail_after(HEAL_TIMEOUT):
        await timeline.run(uri, started)


def _by_label(metrics: Sequence[Samples], name: str, label: str) -> dict[str, int]:
    """``metric_by_label`` summed over several bookies."""
    out: dict[str, int] = {}
    for samples in metrics:
        for key, value in metric_by_label(samples, name, label).items():
            out[key] = out.get(key, 0) + value
    return out


def _print_tables(
    console: Console,
    healing: Healing,
    bookies: Sequence[LocalBookie],
    name: Callable[[str], str],
    spare_before: dict[str, Any],
) -> None:
    dead = _id(healing.victim)
    table = Table(title=f"healed in {healing.seconds:.1f} s: the ledgers' ensembles")
    table.add_column("ledger", justify="right")
    table.add_column("before")
    table.add_column("after")
    for lid, ensembles in healing.before.items():
        shown = [
            " ".join(f"[strike]{name(b)}[/]" if b == dead else name(b) for b in e)
            for e in ensembles
        ]
        after = [" ".join(name(b) for b in e) for e in healing.after[lid]]
        table.add_row(str(lid), " | ".join(shown), " | ".join(after))
    console.print(table)

    spare = healing.spare
    info = bookie_info(spare)
    live = [b for b in bookies if b is not healing.victim]
    metrics = [bookie_metrics(b) for b in live]

    fragments = _by_label(metrics, "autorecovery_fragments_replicated_total", "outcome")
    closes = _by_label(metrics, "autorecovery_write_close_after_replication_total", "outcome")
    copied = sum(m.get(("autorecovery_replicated_bytes_total", ()), 0) for m in metrics)
    table = Table(title=f"what the copies did to {spare.name}, which received them (BP-32)")
    table.add_column("")
    table.add_column("")
    table.add_row("rotations by reason", reasons(info.get("rotations", {})))
    table.add_row(
        "leastUnflushedLogId",
        f"{spare_before['leastUnflushedLogId']} → {info['leastUnflushedLogId']}",
    )
    table.add_row("fragments re-replicated", reasons(fragments))
    table.add_row("bytes re-replicated", f"{copied:.0f}")
    table.add_row("WriteClose after replication", reasons(closes))
    table.caption = (
        "A worker copied each ledger's share of the dead bookie to the spare (RECOVERY_ADD), "
        "swapped it into the metadata, then sent it WriteClose with reason replication: the "
        "copied ledgers' logs rotated (reason replication) and the next checkpoint sealed "
        "them, so leastUnflushedLogId moved past them. Counts: the spare's admin API and the "
        "live bookies' autorecovery_* metrics."
    )
    console.print(table)
    if info.get("rotations", {}).get("replication", 0) < len(healing.before):
        raise ClusterError(
            f"{spare.name}: {info.get('rotations')} — expected a replication rotation per "
            f"copied ledger ({len(healing.before)})"
        )
