"""Striping and quorum arithmetic, with no I/O: which bookies store an entry, when enough of
them have answered.

Why a module of its own: the same few rules decide when an add completes, when a fencing
read may stop waiting, and when a recovery read may conclude that an entry does not exist.
Getting one of them wrong loses acknowledged data (reference invariants §4.2 A5, A6, §5.1),
so they live here as pure functions that hypothesis checks exhaustively against the four
equivalent definitions of quorum coverage of the TLA+ model (invariants §4.7).

Striping (upstream's round-robin distribution schedule): an ensemble of E bookies stores
entry ``e`` on the *write set* of ``Qw`` consecutive positions ``(e + i) mod E`` for
``i in 0..Qw-1``; an add is acknowledged once ``Qa`` of them have stored it. So every bookie
holds ``Qw/E`` of the entries, and any ``Qw`` consecutive positions form some entry's write
set.

Quorum coverage: a set of answers *covers* a cohort for ack quorum Qa when no Qa members of
the cohort are all non-positive — equivalently, fewer than Qa members are not positive.
Then no write could have been acknowledged (Qa acks) without one of the positives seeing it.
For fencing the cohort is every write set of the last ensemble (positive = fenced, with or
without data); for a recovery read it is the entry's write set (positive = an explicit "no
such entry/ledger").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable

__all__ = [
    "FenceTracker",
    "ReadOutcome",
    "RecoveryReadTracker",
    "RoundRobinDistribution",
    "ensemble_covered",
    "write_set_covered",
]


@dataclass(frozen=True)
class RoundRobinDistribution:
    """Upstream's round-robin striping for one ensemble shape (E, Qw, Qa)."""

    ensemble_size: int
    write_quorum: int
    ack_quorum: int

    _write_sets: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1:
            raise ValueError(
                f"need E >= Qw >= Qa >= 1, got E={self.ensemble_size} "
                f"Qw={self.write_quorum} Qa={self.ack_quorum}"
            )
        # There are only E write sets; every add and read asks for one, so compute them once.
        e = self.ensemble_size
        sets = tuple(tuple((s + i) % e for i in range(self.write_quorum)) for s in range(e))
        object.__setattr__(self, "_write_sets", sets)

    def write_set(self, entry_id: int) -> tuple[int, ...]:
        """Ensemble positions storing ``entry_id``, in the order a reader tries them."""
        return self._write_sets[entry_id % self.ensemble_size]

    def stores(self, entry_id: int, position: int) -> bool:
        """Whether the bookie at ``position`` is in ``entry_id``'s write set."""
        return (position - entry_id) % self.ensemble_size < self.write_quorum

    def write_sets(self) -> Iterable[tuple[int, ...]]:
        """The E distinct write sets of this shape (entries 0..E-1 use them all)."""
        return (self.write_set(i) for i in range(self.ensemble_size))

    def is_acked(self, acked: Collection[int]) -> bool:
        """Whether acks from these positions complete an add (``Qa`` of them)."""
        return len(acked) >= self.ack_quorum


def write_set_covered(write_set: Iterable[int], positive: Collection[int], ack_quorum: int) -> bool:
    """Quorum coverage of one cohort: fewer than ``ack_quorum`` members are not positive.

    Pending members count as not positive. Equivalently: every ``ack_quorum``-subset of the
    cohort holds a positive.
    """
    not_positive = sum(1 for p in write_set if p not in positive)
    return not_positive < ack_quorum


def ensemble_covered(dist: RoundRobinDistribution, positive: Collection[int]) -> bool:
    """Coverage of every write set of the ensemble (fencing, invariants A5).

    With E = Qw this is "at least Qw - Qa + 1 positives"; with striping (E > Qw) each of the
    E write sets must be covered on its own, because an add only needs Qa acks *from its own
    write set*.
    """
    return all(write_set_covered(ws, positive, dist.ack_quorum) for ws in dist.write_sets())


class ReadOutcome(enum.Enum):
    """What recovery concludes about one entry (invariants A6)."""

    PENDING = "pending"
    """Not enough answers yet."""
    FOUND = "found"
    """Some replica returned it (digest checked): it must be recovered."""
    MISSING = "missing"
    """Enough replicas explicitly lack it that it cannot have been acknowledged: the end."""
    UNKNOWN = "unknown"
    """Everyone answered, nobody has it, but too few said so explicitly (errors, timeouts):
    recovery must not guess; it aborts."""


@dataclass
class RecoveryReadTracker:
    """Answers of a recovery read of one entry from its write set.

    Only *explicit* "no such entry/ledger" answers count towards :attr:`ReadOutcome.MISSING`
    — ``Qw - Qa + 1`` of them, i.e. coverage of the write set; an error or a timeout never
    does, since that bookie may hold the entry.
    """

    write_quorum: int
    ack_quorum: int
    found: int = 0
    missing: int = 0
    failed: int = 0

    def record_found(self) -> ReadOutcome:
        self.found += 1
        return self.outcome()

    def record_missing(self) -> ReadOutcome:
        self.missing += 1
        return self.outcome()

    def record_failed(self) -> ReadOutcome:
        self.failed += 1
        return self.outcome()

    def outcome(self) -> ReadOutcome:
        if self.found:
            return ReadOutcome.FOUND
        if self.missing >= self.write_quorum - self.ack_quorum + 1:
            return ReadOutcome.MISSING
        if self.missing + self.failed >= self.write_quorum:
            return ReadOutcome.UNKNOWN
        return ReadOutcome.PENDING


@dataclass
class FenceTracker:
    """Answers to the fencing reads of recovery's first step, one per ensemble position.

    A fenced answer — with the bookie's last entry, or an explicit "no such entry/ledger" —
    is positive; :meth:`covered` says when the positives leave no write set in which an add
    could still reach Qa unfenced bookies. ``lac`` is the highest LAC seen in returned
    entries' headers (-1 if none).
    """

    dist: RoundRobinDistribution
    positive: set[int] = field(default_factory=set)
    failed: set[int] = field(default_factory=set)
    lac: int = -1

    def record_fenced(self, position: int, lac: int = -1) -> None:
        self.positive.add(position)
        self.lac = max(self.lac, lac)

    def record_failed(self, position: int) -> None:
        self.failed.add(position)

    def covered(self) -> bool:
        return ensemble_covered(self.dist, self.positive)

    def all_answered(self) -> bool:
        return len(self.positive) + len(self.failed) >= self.dist.ensemble_size
