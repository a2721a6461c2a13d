"""Upstream's Java client as a writer workload (``bookiesim chaos run --java-writers``).

``ChaosWriter.java`` (beside this module) is compiled at run time against the installation's
``lib/*.jar`` (:mod:`bookiesim.upstream.java_program`) and runs in the client node; it prints
each operation as a JSON line (see its header). :class:`Relay` (sans-IO) turns those lines
into the run's history, through the same :class:`~bookiesim.chaos.history.Recorder`
bookiesim's own writers use, and tells the other workloads about its ledgers (the tailer reads
them, the recoverer fences them, the final phase recovers and reads each). :func:`java_writer`
(trio) runs one.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.upstream.java_program import compile_program, program_command

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from bookiesim.chaos.history import OpHandle, Recorder
    from bookiesim.chaos.workloads import Workloads, WriterSpec

__all__ = ["SOURCE", "Relay", "compile_writer", "java_writer", "parse_line", "writer_argv"]

SOURCE = Path(__file__).with_name("ChaosWriter.java")
MAIN = "ChaosWriter"
ENTRIES_PER_LEDGER = 200
GRACE = 40.0
"""Seconds past the run's end the writer has to finish its last operation and exit."""
LINE_START = b'{"t":'


def compile_writer(home: Path, work: Path) -> Path:
    """The writer compiled against ``home/lib/*`` into ``work/classes``
    (:func:`~bookiesim.upstream.java_program.compile_program`)."""
    return compile_program(home, SOURCE, work)


def writer_argv(
    home: Path, classes: Path, work: Path, uri: str, spec: WriterSpec, seconds: float,
    seed: int, name: str,
) -> list[str]:  # fmt: skip
    """The writer's command; ``uri`` as upstream writes it (``upstream_metadata_uri``)."""
    command = program_command(
        home, classes, work, ("-Xmx256m", "-Djava.net.preferIPv4Stack=true"), MAIN
    )
    return [
        *command,
        uri,
        str(spec.ensemble), str(spec.write_quorum), str(spec.ack_quorum),
        f"{seconds:.3f}", str(ENTRIES_PER_LEDGER), str(seed), name,
    ]  # fmt: skip


@dataclass(frozen=True)
class Line:
    """One line of the writer: ``t`` (invoke, ok, fail), the writer's op ``id``, the rest."""

    t: str
    id: int
    fields: dict[str, Any]


def parse_line(text: str) -> Line:
    """``ValueError`` (one line) for anything but the writer's JSON lines (its log goes to
    stderr, so stdout holds only these)."""
    try:
        record = json.loads(text)
        t, op = record.pop("t"), record.pop("id")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ValueError(f"not a line of the Java writer: {text[:120]!r}") from None
    if t not in ("invoke", "ok", "fail") or not isinstance(op, int):
        raise ValueError(f"not a line of the Java writer: {text[:120]!r}")
    return Line(t, op, record)


@dataclass
class Relay:
    """Records one Java writer's lines into the history (sans-IO)."""

    rec: Recorder
    process: str
    node: str
    workload: str
    on_ledger: Callable[[int], None]
    """Called with each ledger the writer created."""
    on_done: Callable[[int], None]
    """Called with a ledger the writer stopped writing (closed, or abandoned on a failure)."""
    open_ops: dict[int, tuple[OpHandle, str, int | None]] = field(default_factory=dict)

    def feed(self, line: Line) -> None:
        args = {"workload": self.workload}
        if line.t == "invoke":
            kind = str(line.fields["kind"])
            ledger = line.fields.get("ledger")
            payload = bytes.fromhex(line.fields["payload"]) if "payload" in line.fields else None
            handle = self.rec.invoke(
                kind, process=self.process, node=self.node, ledger=ledger, payload=payload,
                args=args,
            )  # fmt: skip
            self.open_ops[line.id] = (handle, kind, ledger)
            return
        handle, kind, ledger = self.open_ops.pop(line.id)
        if line.t == "ok":
            self.rec.ok(handle, **line.fields)
            if kind == "create":
                self.on_ledger(int(line.fields["ledger"]))
            elif kind == "close" and ledger is not None:
                self.on_done(ledger)
        else:
            self.rec.fail(handle, str(line.fields.get("error", "?"))[:300])
            if ledger is not None:
                self.on_done(ledger)

    def finish(self, why: str) -> None:
        """Every operation without an answer ends unknown (the writer exited or was killed)."""
        for handle, _kind, ledger in self.open_ops.values():
            self.rec.unknown(handle, why)
            if ledger is not None:
                self.on_done(ledger)
        self.open_ops.clear()


async def java_writer(
    work: Workloads, argv: Sequence[str], spec: WriterSpec, index: int, log: Path
) -> None:
    """Run one Java writer until it exits (or GRACE past the run's end, then kill it),
    relaying its lines into the history."""
    name = f"java-writer-{index}"

    def created(ledger: int) -> None:
        work.ledgers.add(ledger)
        work.writing[ledger] = name

    def done(ledger: int) -> None:
        work.writing.pop(ledger, None)

    relay = Relay(work.rec, name, work.node, f"java writer {spec.name}", created, done)
    with log.open("ab") as stderr:
        process = await trio.lowlevel.open_process(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr
        )
    assert process.stdout is not None
    pending = b""
    stray = log.with_suffix(".stdout").open("ab")
    try:
        with trio.move_on_at(work.end + GRACE):
            async for chunk in process.stdout:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for text in lines:
                    if text.startswith(LINE_START):
                        relay.feed(parse_line(text.decode(errors="replace")))
                    elif text.strip():  # a library printing to stdout: keep it with the log
                        stray.write(text + b"\n")
            await process.wait()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
                await process.wait()
            relay.finish(f"the Java writer ended (exit {process.returncode}) without an answer")
            stray.close()
