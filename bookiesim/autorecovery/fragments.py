"""A ledger's fragments, and which of their entries each bookie stores (no I/O).

Theory of operation
-------------------
A ledger's metadata is a list of *segments*: from entry ``first`` on, entries go to this
ensemble of E bookies. The entries of one segment form a *fragment* (upstream's
``LedgerFragment``): ``first`` up to the next segment's first entry - 1, or, for the last
segment, up to the ledger's last entry once it is CLOSED. The last fragment of a ledger that
is not closed (OPEN or IN_RECOVERY) is *open-ended*: its writer may still add to it, so nobody
knows yet where it ends, and a replication worker must not copy it (upstream calls a fragment
*closed* when it can no longer change). The fragments before it are settled: a writer starts a
new segment at its LAC + 1, so every entry below a segment boundary was acknowledged before it.

Within a fragment, the bookie at ensemble position ``i`` stores the entries whose write set
holds ``i`` (round-robin striping, :class:`~bookiesim.client.distribution.RoundRobinDistribution`):
entry ``e`` is on positions ``(e + k) % E`` for ``k < Qw``, so position ``i`` holds the entries
``e`` with ``(i - e) % E < Qw`` — Qw of every E consecutive ids. A fragment may hold no entry
at all for a position (an empty last segment, or a segment shorter than E - Qw + 1 entries);
replacing such a bookie needs no copy, only the metadata swap.

A closed ledger's last entry also bounds the segments before the last (a recovery may close a
ledger below a segment boundary it had proposed in memory but never written to): entries
past it are not part of the ledger, so no fragment extends past it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bookiesim.client.distribution import RoundRobinDistribution

if TYPE_CHECKING:
    from collections.abc import Collection, Iterator

    from bookiesim.metadata.ledgers import LedgerMetadata

__all__ = [
    "Fragment",
    "distribution",
    "fragments_on",
    "ledger_fragments",
    "stored_entries",
]


@dataclass(frozen=True)
class Fragment:
    """One segment's entries: ``first_entry_id`` .. ``last_entry_id`` on ``ensemble``.

    ``last_entry_id`` is ``None`` for an open-ended fragment (the last one of a ledger not yet
    closed); it is ``first_entry_id - 1`` or lower for a fragment with no entry.
    """

    segment: int
    """Index of the segment in the ledger's metadata (0 = the first)."""
    first_entry_id: int
    last_entry_id: int | None
    ensemble: tuple[str, ...]

    @property
    def is_closed(self) -> bool:
        """Whether the fragment can no longer grow (upstream's ``LedgerFragment.isClosed``)."""
        return self.last_entry_id is not None

    @property
    def is_empty(self) -> bool:
        """A closed fragment with no entry."""
        return self.last_entry_id is not None and self.last_entry_id < self.first_entry_id

    def positions_of(self, bookies: Collection[str]) -> tuple[int, ...]:
        """Ensemble positions held by any of ``bookies``, ascending."""
        return tuple(i for i, b in enumerate(self.ensemble) if b in bookies)

    def __str__(self) -> str:
        last = "…" if self.last_entry_id is None else str(self.last_entry_id)
        return f"[{self.first_entry_id}..{last}] on {list(self.ensemble)}"


def distribution(metadata: LedgerMetadata) -> RoundRobinDistribution:
    """The ledger's striping (E, Qw, Qa)."""
    return RoundRobinDistribution(
        metadata.ensemble_size, metadata.write_quorum_size, metadata.ack_quorum_size
    )


def ledger_fragments(metadata: LedgerMetadata) -> list[Fragment]:
    """Every fragment of the ledger, in entry order (one per segment)."""
    firsts = list(metadata.ensembles)
    out: list[Fragment] = []
    for index, first in enumerate(firsts):
        last: int | None
        if index + 1 < len(firsts):
            last = firsts[index + 1] - 1
            if metadata.is_closed:
                last = min(last, metadata.last_entry_id)
        elif metadata.is_closed:
            last = metadata.last_entry_id
        else:
            last = None
        out.append(Fragment(index, first, last, tuple(metadata.ensembles[first])))
    return out


def fragments_on(metadata: LedgerMetadata, bookies: Collection[str]) -> list[Fragment]:
    """The fragments whose ensemble holds any of ``bookies`` (empty ones included: the
    bookie is still named there, and a reader or the auditor would still look for it)."""
    return [f for f in ledger_fragments(metadata) if f.positions_of(bookies)]


def stored_entries(
    fragment: Fragment,
    dist: RoundRobinDistribution,
    position: int,
    *,
    upto: int | None = None,
) -> Iterator[int]:
    """The entry ids of ``fragment`` that the bookie at ``position`` stores, ascending.

    ``upto`` bounds an open-ended fragment (required for one) and may lower a closed one's end.
    """
    if not 0 <= position < dist.ensemble_size:
        raise ValueError(f"position {position} outside an ensemble of {dist.ensemble_size}")
    last = fragment.last_entry_id
    if upto is not None:
        last = upto if last is None else min(last, upto)
    if last is None:
        raise ValueError(f"fragment {fragment} is open-ended: give the last entry (upto)")
    first = fragment.first_entry_id
    e = dist.ensemble_size
    # Entry x is stored at position i when (i - x) % E < Qw, i.e. x % E is one of these Qw
    # residues; walk the ids E at a time instead of testing each one.
    residues = sorted((position - k) % e for k in range(dist.write_quorum))
    base = first - first % e
    while base <= last:
        for r in residues:
            entry = base + r
            if first <= entry <= last:
                yield entry
        base += e
