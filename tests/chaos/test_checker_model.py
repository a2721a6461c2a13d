"""The checker against a correct model of one ledger (hypothesis): what the model produces is
never a violation, and one mutation of it is always the matching one.

The model follows BookKeeper: the writer's adds are acknowledged in order, so the
acknowledged ids are a prefix; the bookies may hold more than that (adds that failed or timed
out may still be stored); a recovery after the faults closes the ledger at the end of what is
stored, and reads of the closed prefix return it.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from bookiesim.chaos.checker import check_history
from bookiesim.chaos.history import OpKind
from tests.chaos.histories import Builder


@dataclass
class Ledger:
    payloads: list[bytes]
    acked: int  # ids 0..acked-1 acknowledged
    stored: int  # ids 0..stored-1 on the bookies (acked <= stored)
    tail_outcomes: list[str]  # the outcome of each add past the acknowledged prefix
    faults: list[tuple[float, float]]
    early_read: bool  # a read of the acknowledged prefix while the faults last


@st.composite
def ledgers(draw: st.DrawFn) -> Ledger:
    n = draw(st.integers(0, 12))
    payloads = draw(st.lists(st.binary(max_size=20), min_size=n, max_size=n))
    acked = draw(st.integers(0, n))
    stored = draw(st.integers(acked, n))
    tail = draw(
        st.lists(
            st.sampled_from(["fail", "unknown", "none"]), min_size=n - acked, max_size=n - acked
        )
    )
    faults = draw(
        st.lists(
            st.tuples(st.floats(0, 50), st.floats(0.1, 40)).map(lambda f: (f[0], f[0] + f[1])),
            max_size=3,
        )
    )
    return Ledger(payloads, acked, stored, tail, faults, draw(st.booleans()))


def record(ledger: Ledger) -> tuple[Builder, dict[str, int]]:
    """The model's history; the ids of the ops the mutations aim at."""
    b = Builder()
    for i, span in enumerate(ledger.faults):
        b.fault("partition", [f"b{i}"], span)
    heal = max((end for _, end in ledger.faults), default=0.0)
    # The recovery and the reads come after the faults and after the writer's last add.
    after = max(heal, len(ledger.payloads) * 0.5)
    for entry, payload in enumerate(ledger.payloads):
        t = entry * 0.5
        outcome = "ok" if entry < ledger.acked else ledger.tail_outcomes[entry - ledger.acked]
        b.add(7, entry, payload, (t, t + 0.2), outcome=outcome)
    ops = {}
    if ledger.early_read and ledger.acked:
        prefix = dict(enumerate(ledger.payloads[: ledger.acked]))
        ops["early"] = b.read(7, prefix, (1.0, 1.1)).id
    last = ledger.stored - 1
    length = sum(len(p) for p in ledger.payloads[: ledger.stored])
    ops["recover"] = b.closing(OpKind.RECOVER, 7, last, length, (after + 1, after + 2)).id
    closed = dict(enumerate(ledger.payloads[: ledger.stored]))
    ops["read"] = b.read(7, closed, (after + 3, after + 4), absent=(ledger.stored,)).id
    opened = b.at(after + 5).invoke(OpKind.OPEN, process="tail", node="n4", ledger=7)
    b.at(after + 6).ok(opened, closed=True, last_entry=last, length=length)
    ops["open"] = opened.id
    return b, ops


@given(ledgers())
def test_a_correct_ledger_never_violates(ledger: Ledger) -> None:
    b, _ = record(ledger)
    result = check_history(b.history())
    assert result.valid, result.render()
    assert result.acknowledged_adds == ledger.acked


def mutate(b: Builder, op: int, kind: str, change: dict[str, object]) -> None:
    """Rewrites the ``result`` of ``op``'s completion."""
    for r in b.records:
        if r.get("op") == op and r["type"] == kind:
            r["result"].update(change)
            return
    raise AssertionError(f"no {kind} of op {op}")


@given(ledgers().filter(lambda m: m.acked > 0), st.data())
def test_dropping_an_acked_entry_from_the_final_read_loses_it(
    ledger: Ledger, data: st.DataObject
) -> None:
    b, ops = record(ledger)
    gone = data.draw(st.integers(0, ledger.acked - 1))
    read = next(r for r in b.records if r.get("op") == ops["read"] and r["type"] == "ok")
    entries = [pair for pair in read["result"]["entries"] if pair[0] != gone]
    mutate(b, ops["read"], "ok", {"entries": entries, "absent": [gone, ledger.stored]})
    result = check_history(b.history())
    assert [(v.kind, v.entry) for v in result.violations] == [("acked-add-lost", gone)]
    assert {op.id for op in result.violations[0].ops} == {gone + 1, ops["read"]}


@given(ledgers().filter(lambda m: m.stored > 0), st.data())
def test_changing_the_bytes_of_one_read_is_caught(ledger: Ledger, data: st.DataObject) -> None:
    b, ops = record(ledger)
    entry = data.draw(st.integers(0, ledger.stored - 1))
    read = next(r for r in b.records if r.get("op") == ops["read"] and r["type"] == "ok")
    for pair in read["result"]["entries"]:
        if pair[0] == entry:
            pair[1] = "0" * 64
    # A second, faithful read of the same entry: the two must disagree.
    b.read(7, {entry: ledger.payloads[entry]}, (500.0, 500.1))
    kinds = sorted(v.kind for v in check_history(b.history()).violations)
    expected = ["reads-disagree"]
    if entry < ledger.acked:
        expected = ["acked-add-changed", "reads-disagree"]
    assert kinds == expected


@given(ledgers(), st.sampled_from(["last_entry", "length"]))
def test_a_later_open_reporting_another_end_is_caught(ledger: Ledger, field: str) -> None:
    b, ops = record(ledger)
    opened = next(r for r in b.records if r.get("op") == ops["open"] and r["type"] == "ok")
    moved = opened["result"][field] + 1
    mutate(b, ops["open"], "ok", {field: moved})
    result = check_history(b.history())
    # Ending the ledger one entry later than the recovery also covers no acknowledged add
    # more: only the report changed.
    assert [v.kind for v in result.violations] == ["closed-changed"]
    assert [op.id for op in result.violations[0].ops] == [ops["recover"], ops["open"]]


@given(ledgers().filter(lambda m: m.acked > 0))
def test_a_recovery_closing_below_an_acked_add_is_caught(ledger: Ledger) -> None:
    b, ops = record(ledger)
    mutate(b, ops["recover"], "ok", {"last_entry": ledger.acked - 2})
    kinds = {v.kind for v in check_history(b.history()).violations}
    assert "acked-add-lost-by-recovery" in kinds
