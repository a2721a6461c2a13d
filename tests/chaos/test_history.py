"""The history file: what the recorder writes is what the reader reads back (hypothesis), a
harness killed mid-line loses only that line, and bad input is refused in one line naming the
file and line."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.chaos.history import (
    HistoryError,
    JsonLinesSink,
    OpKind,
    Recorder,
    digest,
    parse_history,
    read_history,
)
from tests.chaos.histories import REPLAY, Builder

if TYPE_CHECKING:
    from pathlib import Path

names = st.text("abcdefghij-0123456789", min_size=1, max_size=8)
ids = st.integers(0, 2**63 - 1)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), names)
jsonable = st.dictionaries(names, st.one_of(scalars, st.lists(scalars, max_size=3)), max_size=3)

# One step of a workload or the nemesis: (what, arguments).
steps = st.one_of(
    st.tuples(
        st.just("invoke"),
        st.fixed_dictionaries(
            {
                "kind": st.sampled_from([OpKind.ADD, OpKind.READ, OpKind.CLOSE, "custom"]),
                "process": names,
                "node": names,
                "ledger": st.none() | ids,
                "entry": st.none() | ids,
                "last": st.none() | ids,
                "payload": st.none() | st.binary(max_size=30),
                "args": jsonable,
            }
        ),
    ),
    st.tuples(st.sampled_from(["ok", "fail", "unknown"]), jsonable),
    st.tuples(st.just("fault_start"), st.fixed_dictionaries({"kind": names, "params": jsonable})),
    st.tuples(st.just("fault_end"), jsonable),
)


@given(st.lists(st.tuples(steps, st.floats(0, 1e6)), max_size=25), jsonable)
def test_what_the_recorder_writes_reads_back(
    script: list[tuple[tuple[str, dict[str, Any]], float]], meta: dict[str, Any]
) -> None:
    b = Builder(meta=meta)
    open_ops: list[Any] = []
    open_faults: list[Any] = []
    expected_ops: dict[int, dict[str, Any]] = {}
    expected_faults: dict[int, dict[str, Any]] = {}
    for (what, arguments), at in script:
        rec = b.at(at)
        t = round(at, 6)  # times are kept to the microsecond
        if what == "invoke":
            h = rec.invoke(**arguments)
            open_ops.append(h)
            expected_ops[h.id] = dict(arguments, start=t, outcome="unknown", end=None, result={})
        elif what in ("ok", "fail", "unknown") and open_ops:
            h = open_ops.pop(0)
            if what == "ok":
                rec.ok(h, **arguments)
            else:
                getattr(rec, what)(h, "error text", **arguments)
            expected_ops[h.id].update(outcome=what, end=t, result=arguments)
        elif what == "fault_start":
            f = rec.fault_start(arguments["kind"], ["b1"], arguments["params"])
            open_faults.append(f)
            expected_faults[f.id] = dict(arguments, start=t, end=None)
        elif what == "fault_end" and open_faults:
            f = open_faults.pop()
            rec.fault_end(f, **arguments)
            expected_faults[f.id].update(end=t, result=arguments)
    history = b.history()
    assert history.meta == meta
    assert history.replay == REPLAY
    assert sorted(op.id for op in history.ops) == sorted(expected_ops)
    for op in history.ops:
        want = expected_ops[op.id]
        payload = want["payload"]
        assert (op.kind, op.process, op.node) == (want["kind"], want["process"], want["node"])
        assert (op.ledger, op.entry, op.last) == (want["ledger"], want["entry"], want["last"])
        assert op.digest == (None if payload is None else digest(payload))
        assert op.size == (None if payload is None else len(payload))
        assert op.args == want["args"]
        assert (op.start, op.outcome, op.end, op.result) == (
            want["start"],
            want["outcome"],
            want["end"],
            want["result"],
        )
    for fault in history.faults:
        want = expected_faults[fault.id]
        assert (fault.kind, fault.params, fault.start, fault.end) == (
            want["kind"],
            want["params"],
            want["start"],
            want["end"],
        )
    assert history.end == max((r["t"] for r in b.records if "t" in r), default=0.0)
    assert not history.torn_tail


def test_the_file_sink_appends_lines_a_killed_harness_leaves_readable(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with JsonLinesSink(path, fsync=True) as sink:
        rec = Recorder(sink, replay="bookiesim chaos replay --seed 1", meta={"seed": 1})
        add = rec.invoke(OpKind.ADD, process="w", node="n1", ledger=1, entry=0, payload=b"x")
        rec.ok(add)
        read = rec.invoke(OpKind.READ, process="r", node="n2", ledger=1, entry=0)
        rec.ok_read(read, {0: b"x"})
    # Lines are whole as soon as they are written: a harness killed now, mid-line, leaves a
    # torn last line, which the reader drops (nothing can come after it).
    with path.open("a") as f:
        f.write('{"type":"invoke","op":3,"t":9.0,"ki')
    history = read_history(path)
    assert history.torn_tail
    assert history.replay == "bookiesim chaos replay --seed 1"
    assert [(op.kind, op.outcome) for op in history.ops] == [("add", "ok"), ("read", "ok")]
    assert history.ops[1].read_entries() == {0: digest(b"x")}
    assert len(path.read_text().splitlines()) == 6


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "h.jsonl: empty, no header line"),
        ('{"type": "header"', "h.jsonl: line 1 is cut short: no complete header line"),
        ('{"type": "invoke"}\n', "h.jsonl line 1: not a bookiesim-chaos-history header"),
        (
            '{"type":"header","format":"bookiesim-chaos-history","version":9}\n',
            "h.jsonl line 1: version 9; this reader knows version 1",
        ),
        ("HEADER\n[]\n", "h.jsonl line 2: not a JSON object"),
        ("HEADER\nnot json\n", "h.jsonl line 2: Expecting value: line 1 column 1 (char 0)"),
        ('HEADER\n{"type":"ok","op":4,"t":1}\n', "h.jsonl line 2: ok of op 4, which was never"),
        ('HEADER\n{"type":"invoke","op":1}\n', "h.jsonl line 2: missing field 't'"),
        ('HEADER\n{"type":"ok","op":1,"t":-1}\n', "h.jsonl line 2: time -1 is not a non-negative"),
        ('HEADER\n{"type":"nap","t":1}\n', "h.jsonl line 2: unknown record type 'nap'"),
        (
            'HEADER\n{"type":"invoke","op":1,"t":1,"kind":"add","process":"w","node":7}\n',
            "h.jsonl line 2: field 'node' is 7, expected str",
        ),
        (
            'HEADER\n{"type":"invoke","op":true,"t":1}\n',
            "h.jsonl line 2: field 'op' is True, expected int",
        ),
        (
            'HEADER\n{"type":"fault_end","fault":3,"t":1}\n',
            "h.jsonl line 2: end of fault 3, which never started",
        ),
    ],
)
def test_bad_input_is_refused_in_one_line(text: str, message: str) -> None:
    header = json.dumps({"type": "header", "format": "bookiesim-chaos-history", "version": 1})
    with pytest.raises(HistoryError) as caught:
        parse_history(text.replace("HEADER", header), "h.jsonl")
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_an_op_completed_twice_is_refused() -> None:
    b = Builder()
    h = b.at(1).invoke(OpKind.CLOSE, process="w", node="n1", ledger=1)
    b.at(2).ok(h, last_entry=0)
    b.at(3).fail(h, "again")
    with pytest.raises(HistoryError, match=r"line 4: op 1 completed twice"):
        b.history()


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match=r"missing.jsonl: cannot read the history: "):
        read_history(tmp_path / "missing.jsonl")


def test_a_history_file_is_written_once(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    JsonLinesSink(path).close()
    with pytest.raises(HistoryError, match=r"history.jsonl: cannot create the history: File e"):
        JsonLinesSink(path)
