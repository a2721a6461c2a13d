"""``bookiesim ledger ...`` against a real local cluster (three bookie processes).

Why these tests: the command line is how people poke at a cluster by hand; each action must
do what it says across separate processes (a ledger created by one command is written by the
next and read by a third), print what scripts parse (``--json``), and fail with one clear
line and the right exit code.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import select
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest
import trio

from bookiesim.cli.client_actions import generated_payload, run_action
from bookiesim.cli.ledger_command import _stdin_payloads
from bookiesim.cli.main import main
from bookiesim.client.errors import LedgerFencedError
from bookiesim.metadata.errors import MetadataError, NoClusterError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("ledger-cli") / "cluster"
    assert main(["cluster", "up", "--dir", str(root), "--json"]) == 0
    try:
        yield root
    finally:
        main(["cluster", "down", "--dir", str(root)])


def run(
    capsys: pytest.CaptureFixture[str], cluster: Path, *args: str, code: int = 0
) -> tuple[str, str]:
    capsys.readouterr()  # drop what earlier steps printed
    assert main(["ledger", *args, "--cluster", str(cluster)]) == code
    out = capsys.readouterr()
    return out.out, out.err


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def create(capsys: pytest.CaptureFixture[str], cluster: Path, *extra: str) -> int:
    out, _ = run(capsys, cluster, "create", "-e", "3", "-w", "2", "-a", "2", "--json", *extra)
    ledger_id: int = json.loads(out)["ledgerId"]
    return ledger_id


def test_create_write_read_close_across_processes(
    cluster: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lid = create(capsys, cluster, "--meta", "owner=tests")
    out, _ = run(capsys, cluster, "write", str(lid), "--count", "20", "--size", "100", "--json")
    assert json.loads(out) == {
        "ledgerId": lid,
        "entries": 20,
        "bytes": 2000,
        "firstEntryId": 0,
        "lastEntryId": 19,
    }
    # A second writer (stdin lines) goes on after the first.
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"alpha\nbeta\n")))
    out, _ = run(capsys, cluster, "write", str(lid), "--json")
    assert json.loads(out)["firstEntryId"] == 20
    assert json.loads(out)["lastEntryId"] == 21

    out, _ = run(capsys, cluster, "read", str(lid), "--json")
    entries = json_lines(out)
    assert [e["entryId"] for e in entries] == list(range(22))
    for e in entries[:20]:
        data = (
            base64.b64decode(e["payload"]) if e["encoding"] == "base64" else e["payload"].encode()
        )
        assert data == generated_payload(lid, e["entryId"], 100)
    assert [e["payload"] for e in entries[20:]] == ["alpha", "beta"]
    assert entries[-1]["length"] == 2000 + 9

    out, err = run(capsys, cluster, "read", str(lid), "--from", "5", "--to", "6")
    assert "entryId" in err  # the header goes to stderr: stdout is rows only, for pipes
    rows = out.splitlines()
    assert [row.split()[:5] for row in rows] == [
        ["5", "100", "ledger", str(lid), "entry"],
        ["6", "100", "ledger", str(lid), "entry"],
    ]

    out, _ = run(capsys, cluster, "close", str(lid), "--json")
    closed = json.loads(out)
    assert closed["state"] == "CLOSED"
    assert closed["lastEntryId"] == 21
    assert closed["length"] == 2009
    assert closed["writeClose"] == {"sent": 3, "ok": 3, "failed": 0, "skipped": 0}

    out, _ = run(capsys, cluster, "metadata", str(lid), "--json")
    meta = json.loads(out)
    assert meta["state"] == "CLOSED"
    assert meta["lastEntryId"] == 21
    assert (meta["ensembleSize"], meta["writeQuorumSize"], meta["ackQuorumSize"]) == (3, 2, 2)
    assert meta["customMetadata"] == {"owner": "tests"}
    assert len(meta["ensembles"]["0"]) == 3

    out, _ = run(capsys, cluster, "list", "--json")
    assert lid in [doc["ledgerId"] for doc in json_lines(out)]

    _, err = run(capsys, cluster, "write", str(lid), "--count", "1", code=1)
    assert f"ledger {lid}" in err
    assert "closed" in err
    out, _ = run(capsys, cluster, "close", str(lid))
    assert "already closed at entry 21" in out


def test_the_v2_wire_protocol_as_pulsar_speaks_it(
    cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v2 = "--use-v2-wire-protocol"
    lid = create(capsys, cluster)
    run(capsys, cluster, "write", str(lid), "--count", "30", "--size", "100", v2)
    # v2 has no WriteLac and the 30 adds were pipelined, so every entry carries LAC -1 and a
    # reader sees nothing confirmed yet (as with upstream's v2 writer); closing finds the tail.
    out, _ = run(capsys, cluster, "close", str(lid), "--json", v2)
    closed = json.loads(out)
    assert closed["lastEntryId"] == 29
    # WriteClose is a v3 extension: a v2 client skips it, which shows v2 was spoken.
    assert closed["writeClose"] == {"sent": 0, "ok": 0, "failed": 0, "skipped": 3}
    out, _ = run(capsys, cluster, "read", str(lid), "--json", v2)
    assert [e["entryId"] for e in json_lines(out)] == list(range(30))


def test_recover_closes_at_the_last_written_entry(
    cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lid = create(capsys, cluster)
    run(capsys, cluster, "write", str(lid), "--count", "7", "--size", "10")
    out, _ = run(capsys, cluster, "recover", str(lid), "--json")
    doc = json.loads(out)
    assert doc["state"] == "CLOSED"
    assert doc["lastEntryId"] == 6
    assert doc["length"] == 70


def test_delete_then_everything_says_no_such_ledger(
    cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lid = create(capsys, cluster)
    out, _ = run(capsys, cluster, "delete", str(lid))
    assert f"ledger {lid} deleted" in out
    for action in ("metadata", "read", "close", "delete"):
        _, err = run(capsys, cluster, action, str(lid), code=1)
        assert f"ledger {lid}: no metadata" in err, action


def test_password_is_checked(cluster: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lid = create(capsys, cluster, "--password", "s3cret")
    _, err = run(capsys, cluster, "write", str(lid), "--count", "1", code=1)
    assert "wrong password" in err
    run(capsys, cluster, "write", str(lid), "--count", "1", "--password", "s3cret")


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "list"]) == 2
    assert "--cluster DIR or --metadata URI" in capsys.readouterr().err
    assert main(["ledger", "write", "1", "--size", "10", "--metadata", "sqlite:///x.db"]) == 2
    assert "--size needs --count" in capsys.readouterr().err
    assert main(["ledger", "write", "1", "--count", "0", "--metadata", "sqlite:///x.db"]) == 2
    assert "--count must be positive" in capsys.readouterr().err
    assert main(["ledger", "list", "--cluster", str(tmp_path)]) == 1
    assert "cluster up" in capsys.readouterr().err


# -- expected failures: one line, no traceback; and stdin written as it arrives ---------------


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


class Writer:
    """``bookiesim ledger write ID --print-ids`` in its own process, stdin a pipe."""

    def __init__(self, cluster: Path, ledger_id: int, *extra: str) -> None:
        command = ["ledger", "write", str(ledger_id), "--print-ids", "--cluster", str(cluster)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bookiesim", *command, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.held = b""

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line)
        self.proc.stdin.flush()

    def next_line(self, timeout: float = 30.0) -> str:
        """The next line on stdout, failing if none comes within ``timeout`` seconds.

        Read from the descriptor, not the buffered file: a line already in its buffer would
        not make ``select`` say the pipe is readable."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.held:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no output within {timeout} s"
            chunk = os.read(fd, 4096)
            assert chunk, "stdout closed"
            self.held += chunk
        line, _, self.held = self.held.partition(b"\n")
        return line.decode()

    def finish(self) -> tuple[int, str, str]:
        """Close stdin and wait for the end."""
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, (self.held + out).decode(), err.decode()


def test_stdin_lines_are_added_as_they_arrive(
    cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lid = create(capsys, cluster)
    writer = Writer(cluster, lid)
    try:
        # Each entry is acknowledged while the writer still waits for the next line: before
        # the fix, lines were held until stdin closed.
        writer.send(b"first\n")
        assert writer.next_line() == "0"
        writer.send(b"second\r\nthird\n")
        assert [writer.next_line(), writer.next_line()] == ["1", "2"]
        writer.send(b"no newline at the end")
    finally:
        code, out, err = writer.finish()
    assert code == 0, err
    assert out.splitlines() == ["3", f"ledger {lid}: wrote 4 entries (37 bytes), ids 0..3"]
    out, _ = run(capsys, cluster, "read", str(lid), "--json")
    assert [e["payload"] for e in json_lines(out)] == [
        "first",
        "second",
        "third",
        "no newline at the end",
    ]


def test_a_fenced_write_says_so_in_one_line(
    cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lid = create(capsys, cluster)
    writer = Writer(cluster, lid)
    try:
        writer.send(b"before\n")
        assert writer.next_line() == "0"
        # A new owner fences the ledger while the writer still has it open.
        out, _ = run(capsys, cluster, "recover", str(lid))
        assert f"ledger {lid} recovered: closed at entry 0" in out
        writer.send(b"after\n")
    finally:
        code, out, err = writer.finish()
    assert code == 1
    line = one_line(err)
    # What was acknowledged before the failure, for the user to look for, then why.
    assert line.startswith(f"ledger write: ledger {lid}: 1 entries acknowledged, ids 0..0, then: ")
    assert "fenced" in line


def test_missing_ledger_and_empty_root_are_one_line(
    cluster: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, err = run(capsys, cluster, "write", "987654", "--count", "1", code=1)
    assert "ledger 987654" in one_line(err)
    _, err = run(capsys, cluster, "read", "987654", code=1)
    assert "ledger 987654" in one_line(err)
    # A URI whose root holds no cluster at all.
    uri = f"sqlite:///{tmp_path / 'empty.db'}"
    capsys.readouterr()
    assert main(["ledger", "write", "1", "--count", "1", "--metadata", uri]) == 1
    line = one_line(capsys.readouterr().err)
    assert line.startswith("ledger write: no BookKeeper cluster at ")
    assert "empty.db" in line


def test_errors_wrapped_by_nurseries_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The client runs its work in trio nurseries, which wrap what they raise in exception
    groups; an expected error must still be one line, and a bug keep its traceback."""

    def raising(exc: Exception) -> Any:
        async def action(*_: object) -> None:
            async def fail() -> None:
                raise exc

            async with trio.open_nursery() as nursery:
                nursery.start_soon(fail)
                await trio.sleep_forever()

        return action

    args = argparse.Namespace()
    no_cluster = NoClusterError("zk://h:2181/ledgers", "/ledgers")
    assert run_action(raising(no_cluster), args, "ledger list") == 1
    assert one_line(capsys.readouterr().err).startswith(
        "ledger list: no BookKeeper cluster at zk://h:2181/ledgers"
    )
    assert run_action(raising(MetadataError("any\nother")), args, "ledger list") == 1
    assert one_line(capsys.readouterr().err) == "ledger list: any other"
    fenced = LedgerFencedError("fenced by a recovering client", ledger_id=7)
    assert run_action(raising(fenced), args, "ledger write") == 1
    assert "ledger 7" in one_line(capsys.readouterr().err)
    with pytest.raises(BaseExceptionGroup):
        run_action(raising(RuntimeError("a bug")), args, "ledger write")


@pytest.mark.parametrize(
    "data", [b"", b"a", b"a\n", b"a\r\nb\n\nc", b"x" * 200_000 + b"\ny", b"\n"]
)
def test_stdin_lines_split_as_lines(data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines spanning the reader's chunks, CRLF, a last line with no newline."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))

    async def lines() -> list[bytes]:
        return [line async for line in _stdin_payloads()]

    expected = [line.removesuffix(b"\r") for line in data.split(b"\n")]
    if expected[-1] == b"":
        expected.pop()
    assert trio.run(lines) == expected
