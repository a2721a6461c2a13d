"""The checker over a recorded history (issue 33, deliverable 4).

:func:`check_history` runs every check (each one function, in ``checker_safety`` and
``checker_liveness``) and gathers their violations; :data:`KINDS` names every violation kind a
check can report. A violation names the operations involved (ids, times, nodes), the faults
overlapping or just preceding them, and the history's replay command.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bookiesim.chaos.checker_liveness import Bounds, check_available_journeys, check_convergence
from bookiesim.chaos.checker_safety import (
    acknowledged_adds,
    check_acked_adds_read_back,
    check_closed_ledger_stable,
    check_fencing,
    check_reads_agree,
)

if TYPE_CHECKING:
    from bookiesim.chaos.checker_violation import Violation
    from bookiesim.chaos.history import History

__all__ = ["KINDS", "LOST_KINDS", "Bounds", "CheckResult", "check_history"]

# Every violation kind, with the property it breaks.
KINDS: dict[str, str] = {
    "acked-add-changed": "an acknowledged add read back with other bytes",
    "acked-add-lost": "an acknowledged add found absent after the faults healed",
    "acked-add-unread": "an acknowledged add no read returned after the faults healed",
    "reads-disagree": "two reads of one entry returned different bytes",
    "closed-changed": "a closed ledger later reported with another last entry or length",
    "fencing": "an add past a closed ledger's end acknowledged after the close",
    "acked-add-lost-by-recovery": "an add acknowledged before a recovery (or close) that "
    "ended the ledger below it",
    "not-replicated": "a closed ledger not fully replicated within the bound after the faults",
    "no-writes-after-heal": "the cluster took no write within the bound after the faults",
    "journey-unavailable": "a command-line step failed while its ensemble kept a write quorum",
}

# The kinds that mean an acknowledged add is gone (the reports' "adds lost").
LOST_KINDS = frozenset({"acked-add-lost", "acked-add-lost-by-recovery", "acked-add-changed"})


@dataclass
class CheckResult:
    """What the checker found in one history."""

    violations: list[Violation] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # checks without observations to judge
    acknowledged_adds: int = 0

    @property
    def valid(self) -> bool:
        return not self.violations

    def lost_adds(self) -> set[tuple[int, int]]:
        """(ledger, entry) of each acknowledged add a violation says is gone (or changed)."""
        return {
            (v.ledger, v.entry)
            for v in self.violations
            if v.kind in LOST_KINDS and v.ledger is not None and v.entry is not None
        }

    def by_kind(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for v in self.violations:
            counts[v.kind] = counts.get(v.kind, 0) + 1
        return counts

    def render(self) -> str:
        """Every violation in full, or one line saying there were none."""
        if not self.violations:
            return f"no violation in {self.acknowledged_adds} acknowledged adds"
        return "\n".join(v.render() for v in self.violations)


def check_history(history: History, bounds: Bounds | None = None) -> CheckResult:
    """Every check over ``history``; ``bounds`` default to those its header states."""
    if bounds is None:
        bounds = Bounds.from_meta(history.meta)
    result = CheckResult(acknowledged_adds=len(acknowledged_adds(history)))
    for check in (
        check_acked_adds_read_back,
        check_reads_agree,
        check_closed_ledger_stable,
        check_fencing,
    ):
        result.violations += check(history)
    for liveness in (check_convergence, check_available_journeys):
        found, skipped = liveness(history, bounds)
        result.violations += found
        result.skipped += skipped
    return result
