"""A run's history: every operation the workloads attempted and every fault the nemesis made.

One JSON object a line, appended as it happens (a harness killed half-way leaves every line it
wrote; a torn last line is dropped on reading, since nothing after it can exist). The first
line is the header: the format's name and version, the one command that replays the schedule
(the harness fills it) and free-form facts about the run (target, seed, ...).

Then, in time order (``t``: monotonic seconds from the run's start):

* ``{"type": "invoke", "op": 7, "t": 1.25, "kind": "add", "process": "writer-1",
  "node": "n1", "ledger": 3, "entry": 17, "digest": "<sha256>", "size": 100, "args": {}}``:
  an operation begins. ``entry`` (and ``last`` for a range) when known at the start;
  ``digest``/``size`` describe an add's payload (the bytes are never stored).
* ``{"type": "ok" | "fail" | "unknown", "op": 7, "t": 1.31, "result": {...}, "error": ...}``:
  its completion. ``unknown`` is Jepsen's "info": the outcome is indeterminate (a timeout, a
  lost connection); an operation with no completion line is unknown too.
* ``{"type": "fault_start", "fault": 2, "t": 3.0, "kind": "partition", "targets": [...],
  "params": {...}, "down": [...]}`` and ``{"type": "fault_end", "fault": 2, "t": 9.5}``:
  a fault's window. ``down`` names the nodes the fault leaves unable to serve clients (the
  availability check uses it); when absent every target counts as down.

The result fields each operation kind carries are listed in :data:`RESULT_FIELDS`;
docs/chaos.md ("Histories and the checker") is the reader's version.

:class:`Recorder` is sans-IO: it builds the records and hands each to a sink (any callable);
:class:`JsonLinesSink` is the sink that appends them to a file. :func:`read_history` reads a
file back into a :class:`History`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from pathlib import Path

__all__ = [
    "FORMAT",
    "RESULT_FIELDS",
    "VERSION",
    "Fault",
    "FaultHandle",
    "History",
    "HistoryError",
    "JsonLinesSink",
    "Op",
    "OpHandle",
    "OpKind",
    "Outcome",
    "Recorder",
    "digest",
    "parse_history",
    "read_history",
]

FORMAT = "bookiesim-chaos-history"
VERSION = 1

Outcome = Literal["ok", "fail", "unknown"]
_OUTCOMES: tuple[Outcome, ...] = ("ok", "fail", "unknown")


class OpKind:
    """The operation kinds the checker understands (a workload may record others: they are
    counted in the reports and otherwise ignored)."""

    CREATE = "create"
    ADD = "add"
    READ = "read"
    READ_LAC = "read_lac"  # readLastAddConfirmed
    OPEN = "open"
    CLOSE = "close"
    RECOVER = "recover"
    JOURNEY = "journey"  # one step of a command-line journey (args: step, ensemble, quorums)
    REPLICATION_CHECK = "replication_check"  # the harness counts under-replicated fragments
    PROBE_WRITE = "probe_write"  # the harness tries a fresh ledger: does the cluster take writes?


# What an ``ok`` completion's ``result`` holds, by kind (the checker reads these keys).
RESULT_FIELDS: dict[str, str] = {
    OpKind.CREATE: "ledger: the new ledger's id",
    OpKind.ADD: "entry: the id the add was given (when the invoke did not know it)",
    OpKind.READ: "entries: [[entry id, sha256], ...] returned; absent: [entry ids] the read "
    "established do not exist (NoSuchEntry from enough bookies, or past a closed ledger's end)",
    OpKind.READ_LAC: "lac: the last add confirmed read",
    OpKind.OPEN: "closed: bool; last_entry and length when closed",
    OpKind.CLOSE: "last_entry, length: what the close wrote into the metadata",
    OpKind.RECOVER: "last_entry, length: what the recovery closed the ledger at",
    OpKind.JOURNEY: "free: the command's output worth keeping",
    OpKind.REPLICATION_CHECK: "under_replicated: fragments still missing a replica (ledger: "
    "the invoke's ledger, or every ledger when null)",
    OpKind.PROBE_WRITE: "ledger, entry: where the probe landed",
}


class HistoryError(Exception):
    """The history cannot be read; the message is one line naming the file, line and fault."""


def digest(payload: bytes) -> str:
    """The sha256 (hex) under which a payload is recorded."""
    return hashlib.sha256(payload).hexdigest()


@dataclass
class Op:
    """One operation: its invoke and (when it came) its completion."""

    id: int
    kind: str
    process: str
    node: str
    start: float
    ledger: int | None = None
    entry: int | None = None
    last: int | None = None
    digest: str | None = None
    size: int | None = None
    args: dict[str, Any] = field(default_factory=dict)
    outcome: Outcome = "unknown"
    end: float | None = None  # None: no completion was recorded
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    _entries: dict[int, str] | None = field(default=None, repr=False, compare=False)
    _absent: set[int] | None = field(default=None, repr=False, compare=False)

    @property
    def entry_id(self) -> int | None:
        """The entry an add wrote: the invoke's, else the one the ok result reports."""
        if self.entry is not None:
            return self.entry
        value = self.result.get("entry")
        return value if isinstance(value, int) else None

    @property
    def workload(self) -> str:
        """The series this op belongs to in the reports (``args.workload``, else the process)."""
        value = self.args.get("workload")
        return value if isinstance(value, str) else self.process

    def read_entries(self) -> dict[int, str]:
        """An ok read's entries, id to digest (decoded once: the checks ask per entry)."""
        if self._entries is None:
            pairs = self.result.get("entries") or []
            self._entries = {int(e): str(d) for e, d in pairs}
        return self._entries

    def absent_entries(self) -> set[int]:
        """The entries an ok read established do not exist: named in ``absent``, or inside
        the range it asked for (``entry``..``last``) without being returned."""
        if self._absent is None:
            absent = {int(e) for e in self.result.get("absent") or []}
            if self.entry is not None:
                returned = self.read_entries()
                last = self.entry if self.last is None else self.last
                absent.update(e for e in range(self.entry, last + 1) if e not in returned)
            self._absent = absent
        return self._absent

    def closed_at(self) -> tuple[int, int | None] | None:
        """(last entry, length) when this ok op reports its ledger closed, else None."""
        if self.outcome != "ok" or self.ledger is None:
            return None
        if self.kind in (OpKind.CLOSE, OpKind.RECOVER) or (
            self.kind == OpKind.OPEN and self.result.get("closed") is True
        ):
            last = self.result.get("last_entry")
            if isinstance(last, int):
                length = self.result.get("length")
                return last, length if isinstance(length, int) else None
        return None

    def describe(self) -> str:
        """One line: id, kind, where it ran, what it touched, when, how it ended."""
        what = [self.kind]
        if self.ledger is not None:
            what.append(f"ledger {self.ledger}")
        entry = self.entry_id
        if entry is not None:
            what.append(f"entry {entry}" if self.last is None else f"entries {entry}..{self.last}")
        end = "never completed" if self.end is None else f"{self.outcome} {self.end:.3f}"
        line = f"op {self.id} {' '.join(what)} on {self.node} ({self.process}): "
        line += f"invoked {self.start:.3f}, {end}"
        if self.error:
            line += f" [{self.error}]"
        return line


@dataclass
class Fault:
    """One fault's window (``end`` None: it never ended within the history)."""

    id: int
    kind: str
    targets: list[str]
    start: float
    params: dict[str, Any] = field(default_factory=dict)
    down: list[str] | None = None
    end: float | None = None
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def down_nodes(self) -> list[str]:
        return list(self.targets) if self.down is None else list(self.down)

    def until(self, history_end: float) -> float:
        return history_end if self.end is None else self.end

    def describe(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        end = "never healed" if self.end is None else f"{self.end:.3f}"
        return (
            f"fault {self.id} {self.kind} on {', '.join(self.targets) or '-'}"
            f"{f' ({params})' if params else ''}: {self.start:.3f} to {end}"
        )


@dataclass
class History:
    """A history read back: ops in invoke order, faults in start order."""

    replay: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    end: float = 0.0  # the last time any record carries
    torn_tail: bool = False  # the last line was cut short (a crash while appending)

    def heal_time(self) -> float:
        """When the last fault ended (the history's end for one that never did; 0 without
        faults)."""
        return max((f.until(self.end) for f in self.faults), default=0.0)


@dataclass(frozen=True)
class OpHandle:
    id: int
    kind: str


@dataclass(frozen=True)
class FaultHandle:
    id: int
    kind: str


Record = dict[str, Any]


class Recorder:
    """Builds history records and hands each to ``sink`` as it happens.

    ``clock`` gives the time stamps; by default monotonic seconds since the recorder was made.
    Safe to call from several threads (a lock orders the ids and the sink's calls).
    """

    def __init__(
        self,
        sink: Callable[[Record], None],
        *,
        replay: str = "",
        meta: Mapping[str, Any] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._sink = sink
        self._origin = time.monotonic()
        self._clock = self._since_origin if clock is None else clock
        self._ops = itertools.count(1)
        self._faults = itertools.count(1)
        self._lock = threading.Lock()
        header = {"type": "header", "format": FORMAT, "version": VERSION, "replay": replay}
        header["meta"] = dict(meta or {})
        self._emit(header)

    def _since_origin(self) -> float:
        return time.monotonic() - self._origin

    def _emit(self, record: Record) -> None:
        with self._lock:
            if record["type"] != "header":
                record["t"] = round(self._clock(), 6)
            self._sink(record)

    def invoke(
        self,
        kind: str,
        *,
        process: str,
        node: str,
        ledger: int | None = None,
        entry: int | None = None,
        last: int | None = None,
        payload: bytes | None = None,
        args: Mapping[str, Any] | None = None,
    ) -> OpHandle:
        with self._lock:
            op = next(self._ops)
        record: Record = {"type": "invoke", "op": op, "kind": kind, "process": process}
        record["node"] = node
        for key, value in (("ledger", ledger), ("entry", entry), ("last", last)):
            if value is not None:
                record[key] = value
        if payload is not None:
            record["digest"] = digest(payload)
            record["size"] = len(payload)
        if args:
            record["args"] = dict(args)
        self._emit(record)
        return OpHandle(op, kind)

    def _complete(
        self, outcome: Outcome, handle: OpHandle, error: str | None, result: Mapping[str, Any]
    ) -> None:
        record: Record = {"type": outcome, "op": handle.id}
        if result:
            record["result"] = dict(result)
        if error is not None:
            record["error"] = error
        self._emit(record)

    def ok(self, handle: OpHandle, **result: Any) -> None:
        self._complete("ok", handle, None, result)

    def ok_read(
        self, handle: OpHandle, entries: Mapping[int, bytes], absent: Iterable[int] = ()
    ) -> None:
        """An ok read: the entries it returned (digested here) and those it found absent."""
        pairs = [[e, digest(entries[e])] for e in sorted(entries)]
        self._complete("ok", handle, None, {"entries": pairs, "absent": sorted(absent)})

    def fail(self, handle: OpHandle, error: str, **result: Any) -> None:
        self._complete("fail", handle, error, result)

    def unknown(self, handle: OpHandle, error: str, **result: Any) -> None:
        self._complete("unknown", handle, error, result)

    def fault_start(
        self,
        kind: str,
        targets: Iterable[str],
        params: Mapping[str, Any] | None = None,
        *,
        down: Iterable[str] | None = None,
    ) -> FaultHandle:
        with self._lock:
            fault = next(self._faults)
        record: Record = {"type": "fault_start", "fault": fault, "kind": kind}
        record["targets"] = list(targets)
        if params:
            record["params"] = dict(params)
        if down is not None:
            record["down"] = list(down)
        self._emit(record)
        return FaultHandle(fault, kind)

    def fault_end(self, handle: FaultHandle, **result: Any) -> None:
        record: Record = {"type": "fault_end", "fault": handle.id}
        if result:
            record["result"] = dict(result)
        self._emit(record)


class JsonLinesSink:
    """Writes each record as one line into a new file (refused if it exists).

    ``fsync`` makes every line durable before returning (slower; without it a crash of the
    machine, not of the harness, may lose the tail)."""

    def __init__(self, path: Path, *, fsync: bool = False) -> None:
        self.path = path
        self._fsync = fsync
        try:
            # "x": a second run into the same file would append a second header, and the
            # history would no longer read back.
            self._file = path.open("x", encoding="utf-8")
        except OSError as e:
            raise HistoryError(f"{path}: cannot create the history: {e.strerror}") from None

    def __call__(self, record: Record) -> None:
        # One write per line: a crash leaves at most the last line torn, never two mixed.
        self._file.write(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonLinesSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_history(path: Path) -> History:
    """Reads a history file; :class:`HistoryError` (one line) on anything it cannot use."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise HistoryError(f"{path}: cannot read the history: {e}") from None
    return parse_history(text, str(path))


def parse_history(text: str, name: str = "<history>") -> History:
    lines = text.split("\n")
    # A text ending in "\n" splits into a last empty string; anything else there is a line
    # the writer did not finish.
    last = lines.pop()
    history = History()
    if not lines and not last:
        raise HistoryError(f"{name}: empty, no header line")
    if last:
        try:
            json.loads(last)
        except ValueError:
            history.torn_tail = True
        else:
            lines.append(last)
    if not lines:
        raise HistoryError(f"{name}: line 1 is cut short: no complete header line")
    ops: dict[int, Op] = {}
    faults: dict[int, Fault] = {}
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise _Bad("not a JSON object")
            if number == 1:
                _header(record, history)
            else:
                _apply(record, history, ops, faults)
        except (ValueError, _Bad, KeyError, TypeError) as e:
            detail = f"missing field {e}" if isinstance(e, KeyError) else str(e)
            raise HistoryError(f"{name} line {number}: {detail}") from None
    history.ops = sorted(ops.values(), key=lambda o: (o.start, o.id))
    history.faults = sorted(faults.values(), key=lambda f: (f.start, f.id))
    return history


class _Bad(ValueError):
    pass


def _header(record: Record, history: History) -> None:
    if record.get("type") != "header" or record.get("format") != FORMAT:
        raise _Bad(f"not a {FORMAT} header (the first line must be one)")
    if record.get("version") != VERSION:
        raise _Bad(f"version {record.get('version')!r}; this reader knows version {VERSION}")
    history.replay = _typed(record, "replay", str, "")
    history.meta = _typed(record, "meta", dict, {})


def _typed(record: Record, key: str, kind: type[Any], default: Any) -> Any:
    value = record.get(key, default)
    # bool is an int to isinstance; no field of this format means one by the other.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _Bad(f"field {key!r} is {value!r}, expected {kind.__name__}")
    return value


def _optional_int(record: Record, key: str) -> int | None:
    if record.get(key) is None:
        return None
    value: int = _typed(record, key, int, None)
    return value


def _time(record: Record) -> float:
    t = record["t"]
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0:
        raise _Bad(f"time {t!r} is not a non-negative number of seconds")
    return float(t)


def _apply(record: Record, history: History, ops: dict[int, Op], faults: dict[int, Fault]) -> None:
    kind = record.get("type")
    t = _time(record)
    history.end = max(history.end, t)
    if kind == "invoke":
        op_id = _typed(record, "op", int, None)
        if op_id in ops:
            raise _Bad(f"op {op_id} invoked twice")
        ops[op_id] = Op(
            id=op_id,
            kind=_typed(record, "kind", str, None),
            process=_typed(record, "process", str, None),
            node=_typed(record, "node", str, None),
            start=t,
            ledger=_optional_int(record, "ledger"),
            entry=_optional_int(record, "entry"),
            last=_optional_int(record, "last"),
            digest=record.get("digest") and _typed(record, "digest", str, None),
            size=_optional_int(record, "size"),
            args=_typed(record, "args", dict, {}),
        )
    elif kind in _OUTCOMES:
        op_id = _typed(record, "op", int, None)
        op = ops.get(op_id)
        if op is None:
            raise _Bad(f"{kind} of op {op_id}, which was never invoked")
        if op.end is not None:
            raise _Bad(f"op {op_id} completed twice")
        op.outcome = kind
        op.end = t
        op.result = _typed(record, "result", dict, {})
        error = record.get("error")
        op.error = None if error is None else str(error)
    elif kind == "fault_start":
        fault_id = _typed(record, "fault", int, None)
        if fault_id in faults:
            raise _Bad(f"fault {fault_id} started twice")
        down = record.get("down")
        faults[fault_id] = Fault(
            id=fault_id,
            kind=_typed(record, "kind", str, None),
            targets=[str(x) for x in _typed(record, "targets", list, [])],
            start=t,
            params=_typed(record, "params", dict, {}),
            down=None if down is None else [str(x) for x in _typed(record, "down", list, [])],
        )
    elif kind == "fault_end":
        fault_id = _typed(record, "fault", int, None)
        fault = faults.get(fault_id)
        if fault is None:
            raise _Bad(f"end of fault {fault_id}, which never started")
        if fault.end is not None:
            raise _Bad(f"fault {fault_id} ended twice")
        fault.end = t
        fault.result = _typed(record, "result", dict, {})
    else:
        raise _Bad(f"unknown record type {kind!r}")
