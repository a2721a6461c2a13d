"""What happened in a run: the trace a person reads, and the facts the invariants need.

The trace is one line per event that matters to a reader (faults, ledgers created, closed,
recovered, deleted, violations), each stamped with virtual time: two runs of one seed must
produce the same trace, line for line. The :class:`History` keeps what no snapshot of the
cluster can show afterwards (invariants §8): every ledger metadata write and who made it,
the adds and fences each bookie acknowledged, the ensemble changes clients proposed, and the
violations found the moment they happened (by the recording store and the bookie hooks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from bookiesim.metadata.ledgers import ALLOWED_TRANSITIONS, LedgerMetadata, LedgerState
from bookiesim.proto import BookkeeperProtocol_pb2 as pb

if TYPE_CHECKING:
    from bookiesim.client.bookkeeper import EnsembleProposal
    from bookiesim.client.ledger_handle import LedgerHandle
    from bookiesim.sim.network import Frame

__all__ = ["History", "Trace", "Violation", "check_transition"]

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
        self.metadata[ledger_id] = new
        if new.state is LedgerState.IN_RECOVERY:
            self.ever_in_recovery.add(ledger_id)
        if new.is_closed and (old is None or not old.is_closed):
            self.closed_by[ledger_id] = client
            self.trace(
                f"{client}: closed ledger {ledger_id} at entry {new.last_entry_id}"
                f" ({len(new.ensembles)} segments)"
            )

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


def check_transition(old: LedgerMetadata | None, new: LedgerMetadata) -> str | None:
    """Why ``old → new`` is not a legal metadata change (invariants A12), or None."""
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
        if first != old_last and tuple(new.ensembles[first]) != tuple(members):
            return f"segment at {first} changed"
    if any(first < old_last for first in new.ensembles if first not in old.ensembles):
        return f"new segment below the last one at {old_last}"
    return None


def _now() -> float:
    try:
        return trio.current_time()
    except RuntimeError:
        return 0.0
