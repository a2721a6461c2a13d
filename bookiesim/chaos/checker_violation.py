"""What the checker reports: a violation, the operations it involves and the faults around
them, printed with the one command that replays the schedule."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bookiesim.chaos.history import Fault, History, Op

__all__ = ["PRECEDING_FAULTS", "Violation", "faults_around"]

# How many faults that ended before the operations a violation is shown with: the most recent
# ones are the likely causes; older ones are in the history for whoever wants them.
PRECEDING_FAULTS = 3


@dataclass(frozen=True)
class Violation:
    """One property that did not hold.

    ``kind`` is the property's short name (see :data:`bookiesim.chaos.checker.KINDS`), ``ops``
    the operations that show it (the first is the one the message is about), ``faults`` those
    overlapping the operations' span and the few that ended just before it.
    """

    kind: str
    message: str
    ops: tuple[Op, ...]
    faults: tuple[Fault, ...] = ()
    replay: str = ""
    ledger: int | None = None
    entry: int | None = None
    extra: dict[str, object] = field(default_factory=dict, compare=False)

    def render(self) -> str:
        lines = [f"{self.kind}: {self.message}"]
        lines += [f"  {op.describe()}" for op in self.ops]
        if self.faults:
            lines += [f"  {fault.describe()}" for fault in self.faults]
        else:
            lines.append("  no fault overlapped or preceded these operations")
        lines.append(f"  replay: {self.replay or '(the history names no replay command)'}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "message": self.message,
            "ledger": self.ledger,
            "entry": self.entry,
            "ops": [op.id for op in self.ops],
            "faults": [fault.id for fault in self.faults],
            "replay": self.replay,
            "text": self.render(),
        }


def faults_around(history: History, ops: tuple[Op, ...] | list[Op]) -> tuple[Fault, ...]:
    """The faults overlapping the span from the first invoke to the last completion of
    ``ops``, and the :data:`PRECEDING_FAULTS` that ended last before it, in start order."""
    if not ops:
        return ()
    first = min(op.start for op in ops)
    last = max(history.end if op.end is None else op.end for op in ops)
    overlapping = [f for f in history.faults if f.start <= last and f.until(history.end) >= first]
    before = [f for f in history.faults if f.until(history.end) < first]
    before.sort(key=lambda f: f.until(history.end))
    chosen = {f.id: f for f in overlapping + before[-PRECEDING_FAULTS:]}
    return tuple(sorted(chosen.values(), key=lambda f: (f.start, f.id)))


def make(
    history: History,
    kind: str,
    message: str,
    ops: list[Op],
    *,
    ledger: int | None = None,
    entry: int | None = None,
) -> Violation:
    """A violation with its faults and the history's replay command filled in."""
    return Violation(
        kind=kind,
        message=message,
        ops=tuple(ops),
        faults=faults_around(history, ops),
        replay=history.replay,
        ledger=ledger,
        entry=entry,
    )
