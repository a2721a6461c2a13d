"""The safety checks: what a BookKeeper ledger promises whatever the faults.

Each check is one function from a :class:`History` to its violations. The rules for
indeterminate operations are Jepsen's, adapted to BookKeeper:

* an add is *acknowledged* when its completion is ``ok``; only those are owed back;
* an add that ended ``unknown`` (timeout, lost connection, never completed) may or may not be
  stored: never a violation either way;
* an add that ended ``fail`` is treated the same way: BookKeeper reports a failed add to its
  caller once the write quorum could not be reached, yet the bookies that did take it keep it,
  and a later recovery may legitimately close the ledger past it;
* reads count only when ``ok``; two of them must agree whatever the adds' outcomes.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from bookiesim.chaos.checker_violation import make
from bookiesim.chaos.history import OpKind

if TYPE_CHECKING:
    from bookiesim.chaos.checker_violation import Violation
    from bookiesim.chaos.history import History, Op

__all__ = [
    "acknowledged_adds",
    "check_acked_adds_read_back",
    "check_closed_ledger_stable",
    "check_fencing",
    "check_reads_agree",
    "closed_reports",
]


def acknowledged_adds(history: History) -> list[Op]:
    """The ok adds whose ledger and entry id are known (the ones the checks can hold to)."""
    return [
        op
        for op in history.ops
        if op.kind == OpKind.ADD
        and op.outcome == "ok"
        and op.ledger is not None
        and op.entry_id is not None
    ]


def _ok_reads(history: History) -> dict[int, list[Op]]:
    reads: dict[int, list[Op]] = defaultdict(list)
    for op in history.ops:
        if op.kind == OpKind.READ and op.outcome == "ok" and op.ledger is not None:
            reads[op.ledger].append(op)
    return reads


def check_acked_adds_read_back(history: History) -> list[Violation]:
    """Every acknowledged add is read back with identical bytes once the faults heal.

    * ``acked-add-changed``: an ok read (at any time) returned other bytes for the entry;
    * ``acked-add-lost``: an ok read invoked after the last fault ended established that the
      entry does not exist (named it absent, or asked for a range holding it and did not
      return it), even if another read after the heal had returned it: the entry was there,
      then gone;
    * ``acked-add-unread``: no ok read invoked after the last fault ended returned it (the
      property asks for the read; a harness that could not read is a finding too).
    """
    heal = history.heal_time()
    # Indexes built once: a run holds tens of thousands of adds and as many tailing reads.
    returned: dict[tuple[int, int], list[Op]] = defaultdict(list)
    read_after: set[tuple[int, int]] = set()
    absent_after: dict[tuple[int, int], Op] = {}
    reads_after: dict[int, list[Op]] = defaultdict(list)
    for ledger, ledger_reads in _ok_reads(history).items():
        for read in ledger_reads:
            after = read.start >= heal
            if after:
                reads_after[ledger].append(read)
                for gone in read.absent_entries():
                    absent_after.setdefault((ledger, gone), read)
            for got in read.read_entries():
                returned[ledger, got].append(read)
                if after:
                    read_after.add((ledger, got))
    found: list[Violation] = []
    for add in acknowledged_adds(history):
        assert add.ledger is not None
        entry = add.entry_id
        assert entry is not None
        key = (add.ledger, entry)
        where = f"ledger {add.ledger} entry {entry}"
        changed = [r for r in returned.get(key, []) if r.read_entries()[entry] != add.digest]
        if add.digest is not None and changed:
            read = changed[0]
            found.append(
                make(
                    history,
                    "acked-add-changed",
                    f"{where} was acknowledged with sha256 {add.digest[:12]} but op "
                    f"{read.id} read sha256 {read.read_entries()[entry][:12]}",
                    [add, read],
                    ledger=add.ledger,
                    entry=entry,
                )
            )
            continue
        lost = absent_after.get(key)
        if lost is not None:
            found.append(
                make(
                    history,
                    "acked-add-lost",
                    f"{where} was acknowledged, and op {lost.id} found it absent after the "
                    f"faults healed (at {heal:.3f})",
                    [add, lost],
                    ledger=add.ledger,
                    entry=entry,
                )
            )
        elif key not in read_after:
            then = reads_after.get(add.ledger, [])
            found.append(
                make(
                    history,
                    "acked-add-unread",
                    f"{where} was acknowledged, and no read after the faults healed (at "
                    f"{heal:.3f}) returned it ({len(then)} ok reads of the ledger then)",
                    [add, *then[:1]],
                    ledger=add.ledger,
                    entry=entry,
                )
            )
    return found


def check_reads_agree(history: History) -> list[Violation]:
    """``reads-disagree``: two ok reads of one entry returned different bytes (whatever the
    add's outcome: an unknown add may be there or not, but not both ways)."""
    first_seen: dict[tuple[int, int], dict[str, Op]] = defaultdict(dict)
    for ledger, ledger_reads in _ok_reads(history).items():
        for read in ledger_reads:
            for entry, sha in read.read_entries().items():
                first_seen[ledger, entry].setdefault(sha, read)
    found = []
    for (ledger, entry), by_digest in sorted(first_seen.items()):
        if len(by_digest) > 1:
            shown = sorted(by_digest.values(), key=lambda r: (r.start, r.id))
            shas = ", ".join(f"op {r.id}: {sha[:12]}" for sha, r in by_digest.items())
            found.append(
                make(
                    history,
                    "reads-disagree",
                    f"ledger {ledger} entry {entry} was read with {len(by_digest)} different "
                    f"contents ({shas})",
                    shown,
                    ledger=ledger,
                    entry=entry,
                )
            )
    return found


def closed_reports(history: History) -> dict[int, list[tuple[Op, int, int | None]]]:
    """Per ledger, the ok operations reporting it closed, by completion time."""
    reports: dict[int, list[tuple[Op, int, int | None]]] = defaultdict(list)
    for op in history.ops:
        closed = op.closed_at()
        if closed is not None:
            assert op.ledger is not None
            reports[op.ledger].append((op, *closed))
    for ledger_reports in reports.values():
        ledger_reports.sort(key=lambda r: (r[0].end or 0.0, r[0].id))
    return reports


def check_closed_ledger_stable(history: History) -> list[Violation]:
    """``closed-changed``: a ledger closed at entry L (and length N) is later reported closed
    at another last entry or length, by a close, a recovery or an open. Every report is held
    to the first one: the close is one compare-and-set on the metadata, so two recoverers
    racing still report the same end."""
    found = []
    for ledger, reports in sorted(closed_reports(history).items()):
        first, last_entry, length = reports[0]
        for op, other_last, other_length in reports[1:]:
            if other_last != last_entry or (
                length is not None and other_length is not None and other_length != length
            ):
                found.append(
                    make(
                        history,
                        "closed-changed",
                        f"ledger {ledger} was closed at entry {last_entry} (length {length}) by "
                        f"op {first.id} ({first.kind}), then op {op.id} ({op.kind}) reported "
                        f"entry {other_last} (length {other_length})",
                        [first, op],
                        ledger=ledger,
                    )
                )
    return found


def check_fencing(history: History) -> list[Violation]:
    """An acknowledged add past the end a close or recovery gave the ledger.

    Recovery fences the ledger on its last ensemble before it reads: once a quorum of the
    ensemble has answered the fence, no add can reach its ack quorum, and every add that did
    reach it before is found by the recovery's reads (they go on until enough bookies say
    "no such entry"), so recovery closes at or past every acknowledged entry. Hence, for an ok
    add of entry ``e > L`` where L is the end the first closing report gave the ledger:

    * ``fencing``: the add's ok came after that close or recovery completed: a bookie took an
      add into a fenced ledger (or the client acknowledged without the ack quorum);
    * ``acked-add-lost-by-recovery``: the add's ok came before it completed, before or during
      the recovery (or close): an acknowledged entry that the closed ledger does not contain.

    Neither is ever legal; the two names say which half of the protocol gave way. Adds that
    ended unknown or failed are never held here (a recovery may close before or past them).
    """
    reports = closed_reports(history)
    found = []
    for add in acknowledged_adds(history):
        assert add.ledger is not None
        entry = add.entry_id
        assert entry is not None
        past = [r for r in reports.get(add.ledger, []) if r[1] < entry]
        if not past:
            continue
        closer, last_entry, _ = past[0]
        assert add.end is not None
        assert closer.end is not None
        what = f"ledger {add.ledger} entry {entry}"
        if add.end > closer.end:
            kind = "fencing"
            message = (
                f"{what} was acknowledged at {add.end:.3f}, after op {closer.id} "
                f"({closer.kind}) closed the ledger at entry {last_entry} ({closer.end:.3f})"
            )
        else:
            kind = "acked-add-lost-by-recovery"
            when = "before" if add.end < closer.start else "while"
            message = (
                f"{what} was acknowledged at {add.end:.3f}, {when} op {closer.id} "
                f"({closer.kind}, {closer.start:.3f} to {closer.end:.3f}) closed the ledger "
                f"at entry {last_entry}: an acknowledged entry the closed ledger does not hold"
            )
        found.append(make(history, kind, message, [add, closer], ledger=add.ledger, entry=entry))
    return found
