"""What happened in a run: the trace a person reads, and the facts the invariants need.

The trace is one line per event that matters to a reader (faults, ledgers created, closed,
recovered, deleted, violations), each stamped with virtual time: two runs of one seed must
produce the same trace, line for line. The :class:`History` keeps what no snapshot of the
cluster can show afterwards (invariants §8): every ledger metadata write and who made it,
the adds and fences each bookie acknowledged, the ensemble changes clients proposed, and the
violations found the moment they happened (by the recording store and the bookie hooks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from bookiesim.metadata.ledgers import ALLOWED_TRANSITIONS, LedgerMetadata, LedgerState
from bookiesim.proto import BookkeeperProtocol_pb2 as pb

if TYPE_CHECKING:
    from bookiesim.client.bookkeeper import EnsembleProposal
    from bookiesim.client.ledger_handle import LedgerHandle
    from bookiesim.sim.network import Frame

__all__ = ["History", "Swap", "Trace", "Violation", "check_transition", "segment_swaps"]

_FENCE_ANSWERED = (pb.EOK, pb.ENOENTRY, pb.ENOLEDGER)


@dataclass(frozen=True)
class Violation:
    """An invariant that did not hold."""

    invariant: str
    message: str
    time: float

    def __str__(self) -> str:
        return f"{self.invariant}: {self.message} (t={self.time:.3f})"


class Trace:
    """Lines of ``"<virtual time> <event>"``."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, event: str) -> None:
        try:
            now = trio.current_time()
        except RuntimeError:
            now = 0.0
        self.lines.append(f"{now:9.3f}  {event}")

    def tail(self, n: int) -> list[str]:
        return self.lines[-n:]


@dataclass(frozen=True)
class Swap:
    """A metadata write that replaced a bookie in a settled segment (a replication's swap):
    at ``position`` of the segment starting at ``first``, ``old`` became ``new``, which must
    then store ``entries`` (invariants RS)."""

    time: float
    client: str
    ledger_id: int
    first: int
    position: int
    old: str
    new: str
    entries: frozenset[int]

    def __str__(self) -> str:
        return (
            f"{self.client} replaced {self.old} by {self.new} in ledger {self.ledger_id}'s "
            f"segment at {self.first}"
        )


SwapCheck = Callable[[Swap], str | None]
"""Told of each swap the moment it takes effect; returns why it is unsafe, or None."""


@dataclass
class WriterRecord:
    """The writer of a ledger: who, and its handle (its LAC is what it acknowledged)."""

    client: str
    handle: LedgerHandle


@dataclass
class History:
    """Facts recorded while the run goes (see the module docstring)."""

    trace: Trace = field(default_factory=Trace)
    metadata: dict[int, LedgerMetadata] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)
    ever_in_recovery: set[int] = field(default_factory=set)
    closed_by: dict[int, str] = field(default_factory=dict)
    writers: dict[int, WriterRecord] = field(default_factory=dict)
    bookie_acks: dict[str, dict[int, set[int]]] = field(default_factory=dict)
    """bookie → ledger → entry ids it answered EOK to an add for (durable by then)."""
    fence_acks: dict[str, set[int]] = field(default_factory=dict)
    """bookie → ledgers whose fencing read it answered (the fence is durable by then)."""
    violations: list[Violation] = field(default_factory=list)
    metadata_writes: int = 0
    closed_at: dict[int, float] = field(default_factory=dict)
    lost: dict[str, float] = field(default_factory=dict)
    """bookie → when it was lost for good (its data gone, never to come back)."""
    data_lost: dict[int, str] = field(default_factory=dict)
    """ledger → why it lost acknowledged data with a lost bookie (the bookie held the only
    copy of an entry: the fault's doing, not replication's)."""
    swaps: list[Swap] = field(default_factory=list)
    swap_checks: list[SwapCheck] = field(default_factory=list)

    def violation(self, invariant: str, message: str) -> None:
        v = Violation(invariant, message, _now())
        self.violations.append(v)
        self.trace(f"VIOLATION {v.invariant}: {v.message}")

    # -- metadata ------------------------------------------------------------------------------

    def metadata_written(self, client: str, ledger_id: int, new: LedgerMetadata | None) -> None:
        """A metadata write by ``client`` took effect (``new`` None: deleted)."""
        self.metadata_writes += 1
        old = self.metadata.get(ledger_id)
        if new is None:
            self.metadata.pop(ledger_id, None)
            self.deleted.add(ledger_id)
            self.trace(f"{client}: deleted ledger {ledger_id}")
            return
        problem = check_transition(old, new)
        if old is None and ledger_id in self.deleted:
            problem = "a deleted ledger id was created again"
        if problem is not None:
            self.violation("A12", f"ledger {ledger_id} by {client}: {problem}")
        if old is not None and problem is None:
            self._swapped(client, ledger_id, old, new)
        self.metadata[ledger_id] = new
        if new.state is LedgerState.IN_RECOVERY:
            self.ever_in_recovery.add(ledger_id)
        if new.is_closed and (old is None or not old.is_closed):
            self.closed_by[ledger_id] = client
            self.closed_at[ledger_id] = _now()
            self.trace(
                f"{client}: closed ledger {ledger_id} at entry {new.last_entry_id}"
                f" ({len(new.ensembles)} segments)"
            )

    def _swapped(
        self, client: str, ledger_id: int, old: LedgerMetadata, new: LedgerMetadata
    ) -> None:
        for first, position, was, now in segment_swaps(old, new):
            swap = Swap(
                _now(), client, ledger_id, first, position, was, now, _held(new, first, position)
            )
            self.swaps.append(swap)
            self.trace(f"{swap} (entries {_span(swap.entries)})")
            for check in self.swap_checks:
                problem = check(swap)
                if problem is not None:
                    self.violation("RS", f"{swap}: {problem}")

    def lose(self, bookie: str) -> None:
        """``bookie`` is lost for good from now on."""
        self.lost.setdefault(bookie, _now())

    def proposed(self, client: str, proposal: EnsembleProposal) -> None:
        """A client proposed an ensemble change (S5 is checked against the metadata now)."""
        current = self.metadata.get(proposal.ledger_id)
        if current is None or current.is_closed:
            return  # no compare-and-set can take it any more
        if not proposal.by_recovery and current.state is not LedgerState.OPEN:
            return  # the writer's view is stale and its compare-and-set will fail
        # Otherwise the store's segments are the proposer's own: a writer's while OPEN, and
        # while IN_RECOVERY nobody adds segments but at the close.
        last_first = max(current.ensembles)
        if proposal.first_entry_id < last_first:
            self.violation(
                "S5",
                f"{client} proposed a segment at entry {proposal.first_entry_id} of ledger "
                f"{proposal.ledger_id}, below the existing one at {last_first}"
                + (" (recovery)" if proposal.by_recovery else ""),
            )

    # -- bookies -------------------------------------------------------------------------------

    def observe_frame(self, frame: Frame) -> None:
        """Network observer: acks and answered fences, as the bookie sent them."""
        if frame.to_bookie:
            return
        message = frame.message
        assert isinstance(message, pb.Response)
        if message.HasField("addResponse") and message.status == pb.EOK:
            add = message.addResponse
            if add.status == pb.EOK:
                acks = self.bookie_acks.setdefault(frame.bookie, {})
                acks.setdefault(add.ledgerId, set()).add(add.entryId)
        if frame.answers_fence is not None and message.status in _FENCE_ANSWERED:
            self.fence_acks.setdefault(frame.bookie, set()).add(frame.answers_fence)

    def writer_lac(self, ledger_id: int) -> int:
        record = self.writers.get(ledger_id)
        return -1 if record is None else record.handle.last_add_confirmed


def _settled(old: LedgerMetadata, first: int) -> bool:
    """Whether the segment at ``first`` can no longer grow: any but an unclosed ledger's last
    (which its writer, or a recovery closing it, may still change)."""
    return old.is_closed or first != max(old.ensembles)


def segment_swaps(old: LedgerMetadata, new: LedgerMetadata) -> list[tuple[int, int, str, str]]:
    """(segment first entry, position, old bookie, new bookie) for each bookie of a settled
    segment of ``old`` that ``new`` names another bookie in place of."""
    out: list[tuple[int, int, str, str]] = []
    for first, members in old.ensembles.items():
        now = new.ensembles.get(first)
        if now is None or not _settled(old, first) or tuple(now) == tuple(members):
            continue
        out.extend(
            (first, i, was, bookie)
            for i, (was, bookie) in enumerate(zip(members, now, strict=True))
            if was != bookie
        )
    return out


def _held(md: LedgerMetadata, first: int, position: int) -> frozenset[int]:
    """The entries the bookie at ``position`` of the segment at ``first`` must store, worked
    out here from the striping rule (not with the code under test): ``e`` is on positions
    ``(e + k) % E`` for ``k < Qw``; the segment ends before the next one, and a closed ledger
    at its last entry."""
    firsts = sorted(md.ensembles)
    later = [f for f in firsts if f > first]
    end = later[0] - 1 if later else md.last_entry_id
    if md.is_closed:
        end = min(end, md.last_entry_id)
    e, qw = md.ensemble_size, md.write_quorum_size
    return frozenset(x for x in range(first, end + 1) if (position - x) % e < qw)


def _span(entries: frozenset[int]) -> str:
    return f"{min(entries)}..{max(entries)}, {len(entries)}" if entries else "none"


def check_transition(old: LedgerMetadata | None, new: LedgerMetadata) -> str | None:
    """Why ``old → new`` is not a legal metadata change (invariants A12), or None. A settled
    segment may change only by replacing bookies (a replication's swap: same size, no bookie
    twice); whether the swap was safe is RS's business."""
    if old is None:
        return None if new.state is LedgerState.OPEN else f"created {new.state.name}"
    if new.state not in ALLOWED_TRANSITIONS[old.state]:  # the one table, in metadata/
        return f"{old.state.name} → {new.state.name}"
    quorums = (old.ensemble_size, old.write_quorum_size, old.ack_quorum_size)
    if quorums != (new.ensemble_size, new.write_quorum_size, new.ack_quorum_size):
        return "quorum sizes changed"
    if old.is_closed and (old.last_entry_id, old.length) != (new.last_entry_id, new.length):
        return f"closed ledger's end changed from {old.last_entry_id} to {new.last_entry_id}"
    old_last = max(old.ensembles)
    for first, members in old.ensembles.items():
        if first not in new.ensembles:
            return f"segment at {first} removed"
        now = tuple(new.ensembles[first])
        swapped = len(now) == len(members) and len(set(now)) == len(now)
        if _settled(old, first) and now != tuple(members) and not swapped:
            return f"segment at {first} changed other than by replacing bookies"
    if any(first < old_last for first in new.ensembles if first not in old.ensembles):
        return f"new segment below the last one at {old_last}"
    return None


def _now() -> float:
    try:
        return trio.current_time()
    except RuntimeError:
        return 0.0
