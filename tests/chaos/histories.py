"""Hand-made histories for the checker's tests: a :class:`Recorder` on a clock the test sets,
its records kept in memory and read back through the same parser as a file."""

from __future__ import annotations

import json
from typing import Any

from bookiesim.chaos.history import (
    FaultHandle,
    History,
    OpHandle,
    OpKind,
    Recorder,
    digest,
    parse_history,
)

REPLAY = "bookiesim chaos replay --seed 7 --schedule run-7.json"


class Builder:
    """Records at the times the test gives (``at``), then :meth:`history` parses them."""

    def __init__(self, *, replay: str = REPLAY, meta: dict[str, Any] | None = None) -> None:
        self.now = 0.0
        self.records: list[dict[str, Any]] = []
        self.rec = Recorder(self.records.append, replay=replay, meta=meta, clock=lambda: self.now)

    def at(self, t: float) -> Recorder:
        self.now = t
        return self.rec

    def lines(self) -> str:
        return "".join(json.dumps(r) + "\n" for r in self.records)

    def history(self) -> History:
        return parse_history(self.lines())

    # Shorthands for the operations most tests need: (invoke time, completion time).

    def add(
        self,
        ledger: int,
        entry: int,
        payload: bytes,
        span: tuple[float, float],
        outcome: str = "ok",
        node: str = "n1",
    ) -> OpHandle:
        h = self.at(span[0]).invoke(
            OpKind.ADD, process="writer", node=node, ledger=ledger, entry=entry, payload=payload
        )
        self._complete(h, outcome, span[1])
        return h

    def read(
        self,
        ledger: int,
        entries: dict[int, bytes],
        span: tuple[float, float],
        absent: tuple[int, ...] = (),
        node: str = "n2",
    ) -> OpHandle:
        first = min([*entries, *absent])
        last = max([*entries, *absent])
        h = self.at(span[0]).invoke(
            OpKind.READ, process="reader", node=node, ledger=ledger, entry=first, last=last
        )
        self.at(span[1]).ok_read(h, entries, absent)
        return h

    def closing(
        self,
        kind: str,
        ledger: int,
        last_entry: int,
        length: int,
        span: tuple[float, float],
        node: str = "n3",
        **extra: Any,
    ) -> OpHandle:
        h = self.at(span[0]).invoke(kind, process="recoverer", node=node, ledger=ledger)
        self.at(span[1]).ok(h, last_entry=last_entry, length=length, **extra)
        return h

    def fault(
        self, kind: str, targets: list[str], span: tuple[float, float], **down: Any
    ) -> FaultHandle:
        h = self.at(span[0]).fault_start(kind, targets, {"seed": 1}, **down)
        self.at(span[1]).fault_end(h)
        return h

    def _complete(self, h: OpHandle, outcome: str, t: float) -> None:
        rec = self.at(t)
        if outcome == "ok":
            rec.ok(h)
        elif outcome == "fail":
            rec.fail(h, "NotEnoughBookies")
        elif outcome == "unknown":
            rec.unknown(h, "timed out")
        # "none": the op never completed (the harness stopped first)


def sha(payload: bytes) -> str:
    return digest(payload)
