"""The invariants, as pure functions of a :class:`ClusterView`.

Names follow ``reference/invariants.md`` (S1 to S7, A2) plus ours (D1, RD1, LU, FD, CHK,
RC, and for auto-recovery RL and RR). Each checker takes what was observed — a view of the
metadata, every bookie and the history — and returns the violations it finds, so a test can
hand one a made-up view that breaks it.
Observation (reading the real bookies) is :mod:`.observe`'s job; violations that can only
be seen the moment they happen (A1, A12, S5, S7b, and RS: a replication's swap named a
bookie that did not yet store the entries) are recorded by the history as they occur.

"Stored on a bookie" means: in its index, if it is up; if it is down, acknowledged by it
(an add answered EOK was in its journal, fsynced, so it survives the crash — D1 checks that
it really does once the bookie is back). A bookie *lost* for good stores nothing from its
loss on, for RL and RR; S2 and S3, the protocol's own invariants, still count what it
acknowledged, since a permanent loss is outside the model they come from.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bookiesim.client.distribution import RoundRobinDistribution
from bookiesim.metadata.ledgers import LedgerMetadata, LedgerState

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from bookiesim.sim.history import Swap

__all__ = [
    "CHECKERS",
    "BookieView",
    "CheckerMemory",
    "ClusterView",
    "check_all",
    "check_rl",
    "check_rr",
]


@dataclass(frozen=True)
class BookieView:
    """One bookie as observed at a step."""

    bookie_id: str
    up: bool
    incarnation: int = 0
    entries: Mapping[int, frozenset[int]] = field(default_factory=dict)
    """ledger → entry ids in its index (empty while down)."""
    fenced: frozenset[int] = frozenset()
    lacs: Mapping[int, int] = field(default_factory=dict)
    least_unflushed: int | None = None
    open_files: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """what → (open now, cap)."""
    structure_errors: tuple[str, ...] = ()
    bad_payloads: tuple[str, ...] = ()
    unreadable: tuple[str, ...] = ()
    awaiting_reclaim: tuple[tuple[int, float], ...] = ()
    """(ledger, since when) for deleted ledgers whose bytes may still be on disk: when the
    bookie's GC deleted the ledger, or the bookie last could not write, if later."""


@dataclass(frozen=True)
class ClusterView:
    """Everything the checkers look at, at one step."""

    time: float
    metadata: Mapping[int, LedgerMetadata]
    writer_lac: Mapping[int, int]
    ever_in_recovery: frozenset[int]
    bookies: Mapping[str, BookieView]
    acked: Mapping[str, Mapping[int, frozenset[int]]]
    """bookie → ledger → entries it acknowledged."""
    fence_acked: Mapping[str, frozenset[int]]
    reclaim_bound: float = math.inf
    """Seconds within which GC must reclaim a deleted ledger's bytes (RC)."""
    lost: Mapping[str, float] = field(default_factory=dict)
    """bookie → when it was lost for good."""
    data_lost: frozenset[int] = frozenset()
    """Ledgers that lost acknowledged data with a lost bookie (it had the only copy)."""
    swaps: tuple[Swap, ...] = ()
    closed_at: Mapping[int, float] = field(default_factory=dict)
    quiet_since: float = 0.0
    """Since when no fault but the losses has been seen (RR's clock starts there)."""
    replication_bound: float = math.inf
    """Seconds of quiet within which a lost bookie's closed ledgers must be replicated (RR)."""

    def stored(self, bookie: str, ledger_id: int) -> frozenset[int]:
        view = self.bookies.get(bookie)
        if view is not None and view.up:
            return view.entries.get(ledger_id, frozenset())
        return self.acked.get(bookie, {}).get(ledger_id, frozenset())

    def stored_live(self, bookie: str, ledger_id: int) -> frozenset[int]:
        """As :meth:`stored`, but nothing on a lost bookie."""
        return frozenset() if bookie in self.lost else self.stored(bookie, ledger_id)


@dataclass
class CheckerMemory:
    """What stateful checks remember between steps."""

    least_unflushed: dict[tuple[str, int], int] = field(default_factory=dict)
    """(bookie, incarnation) → the highest leastUnflushedLogId seen."""
    fenced_seen: dict[tuple[str, int], set[int]] = field(default_factory=dict)
    """(bookie, incarnation) → ledgers seen fenced in that incarnation."""


Finding = tuple[str, str]
"""(invariant, message)."""


@functools.cache
def _distribution(e: int, qw: int, qa: int) -> RoundRobinDistribution:
    return RoundRobinDistribution(e, qw, qa)


def _write_set(md: LedgerMetadata, entry_id: int) -> list[str]:
    dist = _distribution(md.ensemble_size, md.write_quorum_size, md.ack_quorum_size)
    ensemble = md.ensemble_at(entry_id)
    return [ensemble[p] for p in dist.write_set(entry_id)]


def check_s1(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    """S1: no writer acknowledged an id above a closed ledger's last entry (unless the
    entries went with a bookie lost for good that held their only copy: ``data_lost``)."""
    out = []
    for lid, md in view.metadata.items():
        if lid in view.data_lost:
            continue
        lac = view.writer_lac.get(lid, -1)
        if md.is_closed and lac > md.last_entry_id:
            out.append(
                ("S1", f"ledger {lid} closed at {md.last_entry_id}, its writer acknowledged {lac}")
            )
    return out


def _acked_bound(view: ClusterView, lid: int, md: LedgerMetadata) -> int:
    return md.last_entry_id if md.is_closed else view.writer_lac.get(lid, -1)


def check_s2(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    """S2: every acknowledged entry is stored on some bookie of its ensemble."""
    out = []
    for lid, md in view.metadata.items():
        if md.state is LedgerState.IN_RECOVERY:
            continue  # neither the writer's (fenced out) nor a closer's range yet
        stored = {b: view.stored(b, lid) for b in md.bookies()}
        for e in range(_acked_bound(view, lid, md) + 1):
            if not any(e in stored[b] for b in md.ensemble_at(e)):
                out.append(("S2", f"ledger {lid} entry {e} is on no bookie of its ensemble"))
                break
    return out


def check_s3(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    """S3: every entry of a closed ledger is on at least Qa bookies of its write set."""
    out = []
    for lid, md in view.metadata.items():
        if not md.is_closed:
            continue
        stored = {b: view.stored(b, lid) for b in md.bookies()}
        for e in range(md.last_entry_id + 1):
            holders = [b for b in _write_set(md, e) if e in stored[b]]
            if len(holders) < md.ack_quorum_size:
                out.append(
                    (
                        "S3",
                        f"ledger {lid} entry {e} is on {len(holders)} of its write set "
                        f"{_write_set(md, e)}, Qa={md.ack_quorum_size}",
                    )
                )
                break
    return out


def check_s4(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    """S4: what a bookie stores at id i is the payload the writer sent as id i."""
    return [("S4", bad) for b in view.bookies.values() for bad in b.bad_payloads]


def check_s6(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    """S6 (TypeOK): metadata within its types; LACs and entry ids in range."""
    out = []
    for lid, md in view.metadata.items():
        try:
            md._check()
        except Exception as exc:  # InvalidMetadataError, but anything is a failure here
            out.append(("S6", f"ledger {lid}: {exc}"))
        if md.last_entry_id < -1:
            out.append(("S6", f"ledger {lid}: last entry {md.last_entry_id}"))
    for b in view.bookies.values():
        for lid, lac in b.lacs.items():
            if lac < -1:
                out.append(("S6", f"{b.bookie_id} ledger {lid}: LAC {lac}"))
        for lid, ids in b.entries.items():
            if ids and min(ids) < 0:
                out.append(("S6", f"{b.bookie_id} ledger {lid}: entry id {min(ids)}"))
    return out


def check_s7a(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    """S7a: before any recovery, no bookie's LAC is above the writer's."""
    out: list[Finding] = []
    for lid, md in view.metadata.items():
        if md.state is not LedgerState.OPEN or lid in view.ever_in_recovery:
            continue
        if lid not in view.writer_lac:
            continue
        lac = view.writer_lac[lid]
        out.extend(
            ("S7a", f"{b.bookie_id} has LAC {b.lacs[lid]} for ledger {lid}, writer {lac}")
            for b in view.bookies.values()
            if b.up and b.lacs.get(lid, -1) > lac
        )
    return out


def check_a2(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    """A2: a fenced ledger stays fenced — in the same incarnation once seen, and across
    restarts once the fence was acknowledged (durable)."""
    out: list[Finding] = []
    for b in view.bookies.values():
        if not b.up:
            continue
        seen = memory.fenced_seen.setdefault((b.bookie_id, b.incarnation), set())
        must = seen | set(view.fence_acked.get(b.bookie_id, frozenset()))
        out.extend(
            ("A2", f"ledger {lid} was fenced on {b.bookie_id} and is not now")
            for lid in sorted(must)
            if lid in b.entries and lid in view.metadata and lid not in b.fenced
        )
        seen |= b.fenced
    return out


def check_d1(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    """D1 (ours): an add a bookie acknowledged stays in its index — crashes included —
    while the ledger exists."""
    out = []
    for b in view.bookies.values():
        if not b.up:
            continue
        for lid, acked in view.acked.get(b.bookie_id, {}).items():
            if lid not in view.metadata:
                continue
            missing = acked - b.entries.get(lid, frozenset())
            if missing:
                out.append(
                    (
                        "D1",
                        f"{b.bookie_id} acknowledged entries {sorted(missing)[:5]} of ledger "
                        f"{lid} and no longer has them",
                    )
                )
    return out


def check_rd1(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    """RD1 (ours): every entry a bookie's index holds for a ledger still in the metadata
    reads back. GC deleting or compacting away a live entry breaks it; so does an index made
    durable ahead of the entry log it points into."""
    return [("RD1", bad) for b in view.bookies.values() for bad in b.unreadable]


def check_lu(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    """LU (ours): leastUnflushedLogId never goes back while a bookie runs.

    Not across a crash: ``lastId`` is written without fsync, so a crash that loses the page
    cache can hand out again the ids of logs GC deleted before it (docs/simulation.md)."""
    out = []
    for b in view.bookies.values():
        if b.least_unflushed is None:
            continue
        key = (b.bookie_id, b.incarnation)
        before = memory.least_unflushed.get(key)
        if before is not None and b.least_unflushed < before:
            out.append(
                (
                    "LU",
                    f"{b.bookie_id} leastUnflushedLogId went from {before} to {b.least_unflushed}",
                )
            )
        memory.least_unflushed[key] = max(before or 0, b.least_unflushed)
    return out


def check_rc(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    """RC (ours, liveness): a bookie's GC reclaims a deleted ledger's bytes within
    ``reclaim_bound`` seconds of deleting the ledger (of writable time: the observer starts
    the clock again after a full disk or a failed journal) — also while some other ledger is
    being written slowly for a long time (upstream #2728: GC blocked behind that ledger's
    log)."""
    out = []
    for b in view.bookies.values():
        for lid, at in b.awaiting_reclaim:
            if view.time - at > view.reclaim_bound:
                out.append(
                    (
                        "RC",
                        f"{b.bookie_id}: ledger {lid} deleted (or the disk writable again) "
                        f"at {at:.1f} s, its bytes not reclaimed after {view.reclaim_bound:g} s",
                    )
                )
                break
    return out


def check_fd(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    """FD (ours): open files within their caps."""
    return [
        ("FD", f"{b.bookie_id}: {what} {n} > cap {cap}")
        for b in view.bookies.values()
        for what, (n, cap) in b.open_files.items()
        if n > cap
    ]


def check_rl(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    """RL (ours): no acknowledged entry is lost with a bookie lost for good — each stays on
    some bookie of its ensemble that is not lost — unless the lost bookie held its only copy
    when it went (``data_lost``: the fault's doing). Re-replication must keep it so: a swap
    that names a bookie without the entries, or replaces the wrong bookie, breaks it."""
    if not view.lost:
        return []
    out = []
    for lid, md in view.metadata.items():
        if md.state is LedgerState.IN_RECOVERY or lid in view.data_lost:
            continue
        stored = {b: view.stored_live(b, lid) for b in md.bookies()}
        for e in range(_acked_bound(view, lid, md) + 1):
            if not any(e in stored[b] for b in md.ensemble_at(e)):
                out.append(
                    ("RL", f"ledger {lid} entry {e} is on no bookie of its ensemble but lost ones")
                )
                break
    return out


def check_rr(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    """RR (ours, liveness): once a bookie is lost for good and at least E bookies remain,
    within ``replication_bound`` seconds of quiet (no other fault; counted from the loss,
    or the ledger's close if later) every closed ledger's metadata stops naming it, and
    every bookie that took its place in a segment stores all that segment's entries of its
    position. Ledgers that lost data with it are left out: nothing can replicate them."""
    if not view.lost:
        return []
    live = sum(1 for b, v in view.bookies.items() if v.up and b not in view.lost)
    start = max(view.quiet_since, *view.lost.values())
    swaps: dict[int, list[Swap]] = {}
    for swap in view.swaps:
        if swap.old in view.lost:
            swaps.setdefault(swap.ledger_id, []).append(swap)
    out = []
    for lid, md in view.metadata.items():
        if not md.is_closed or lid in view.data_lost or md.ensemble_size > live:
            continue
        since = max(start, view.closed_at.get(lid, 0.0))
        if view.time - since <= view.replication_bound:
            continue
        named = sorted(b for b in md.bookies() if b in view.lost)
        if named:
            out.append(
                (
                    "RR",
                    f"ledger {lid} still names lost {', '.join(named)} "
                    f"{view.time - since:.1f} s after the loss (bound "
                    f"{view.replication_bound:g} s of quiet)",
                )
            )
            continue
        for swap in swaps.get(lid, ()):
            current = md.ensembles.get(swap.first, ())
            if swap.position >= len(current) or current[swap.position] != swap.new:
                continue  # replaced again since; that swap is checked instead
            missing = swap.entries - view.stored_live(swap.new, lid)
            if missing:
                out.append(
                    (
                        "RR",
                        f"ledger {lid}: {swap.new}, which took {swap.old}'s place at entry "
                        f"{swap.first}, lacks entries {sorted(missing)[:5]}",
                    )
                )
                break
    return out


def check_structures(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    """CHK: every structure's ``_check()`` held."""
    return [("CHK", err) for b in view.bookies.values() for err in b.structure_errors]


CHECKERS: tuple[Callable[[ClusterView, CheckerMemory], list[Finding]], ...] = (
    check_s1,
    check_s2,
    check_s3,
    check_s4,
    check_s6,
    check_s7a,
    check_a2,
    check_d1,
    check_rd1,
    check_lu,
    check_fd,
    check_structures,
    check_rc,
    check_rl,
    check_rr,
)


def check_all(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
    out: list[Finding] = []
    for checker in CHECKERS:
        out.extend(checker(view, memory))
    return out
