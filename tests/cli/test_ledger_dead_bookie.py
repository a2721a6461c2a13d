"""``bookiesim ledger ...`` right after ``kill -9`` of a bookie, and Ctrl-C (issue 32).

Why these tests: a bookie dies, its registration lingers until its session expires, and the
commands a user types next must still work, as upstream's client does: a new ``write``
process finds the ledger's end by ack-quorum coverage (the dead bookie is unknown, the
others' "no such entry" settle it) and replaces the dead bookie by an ensemble change;
``close`` and ``recover`` likewise. A read whose LAC cannot be learnt is an error, not an
empty ledger, and Ctrl-C says how far the command got in one line. One cluster of four
bookie processes (auto-recovery off, so that nothing but these commands touches the
ledgers) serves every case.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from bookiesim.cli.main import main
from tests.cli.test_ledger_command import Writer, json_lines, one_line, run

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow

SHAPES = [(2, 2, 2), (3, 2, 2), (3, 3, 2)]
OLD_ENTRIES = 100
NEW_ENTRIES = 50


def _quiet(root: Path, *args: str) -> str:
    """``bookiesim ARGS`` (``ledger`` ones with ``--cluster ROOT``) for the module fixture,
    which cannot use the per-test ``capsys`` of :func:`run`: stdout returned, exit 0
    required."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main([*args, "--cluster", str(root)] if args[0] == "ledger" else list(args)) == 0
    return out.getvalue()


def _create_on(root: Path, shape: tuple[int, int, int], bookie: str) -> int:
    """A new ledger of ``shape`` whose ensemble holds ``bookie`` (the choice is random:
    create until it does)."""
    e, w, a = (str(n) for n in shape)
    for _ in range(50):
        created = json.loads(_quiet(root, "ledger", "create", "-e", e, "-w", w, "-a", a, "--json"))
        if bookie in created["ensemble"]:
            ledger_id: int = created["ledgerId"]
            return ledger_id
    raise AssertionError(f"no ensemble of {shape} with {bookie} in 50 tries")


def _metadata(capsys: pytest.CaptureFixture[str], root: Path, ledger_id: int) -> dict[str, Any]:
    out, _ = run(capsys, root, "metadata", str(ledger_id), "--json")
    meta: dict[str, Any] = json.loads(out)
    return meta


def _read_ids(capsys: pytest.CaptureFixture[str], root: Path, ledger_id: int) -> list[int]:
    out, _ = run(capsys, root, "read", str(ledger_id), "--json")
    entries = json_lines(out)
    for e in entries:  # generated payloads name their ledger and entry
        text = e["payload"]
        data = base64.b64decode(text) if e["encoding"] == "base64" else text.encode()
        assert data.startswith(f"ledger {ledger_id} entry {e['entryId']} ".encode()), e
    return [e["entryId"] for e in entries]


class Dead:
    """The cluster after ``kill -9`` of ``victim``; ``ledgers[shape]`` are the ledgers
    made before the kill with ``victim`` in their ensemble: ``old`` (100 entries, written
    by an earlier ``write``), ``empty`` (just created) and ``recover`` (100 entries); for
    2/2/2 also ``unreadable`` (10 entries), whose other bookie the last test kills too."""

    def __init__(
        self, root: Path, victim: str, ledgers: dict[tuple[int, int, int], dict[str, int]]
    ):
        self.root = root
        self.victim = victim
        self.ledgers = ledgers


@pytest.fixture(scope="module")
def dead(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dead]:
    root = tmp_path_factory.mktemp("dead-bookie") / "cluster"
    _quiet(root, "cluster", "up", "--dir", str(root), "--bookies", "4", "--no-autorecovery")
    try:
        status = json.loads(_quiet(root, "cluster", "status", "--dir", str(root), "--json"))
        victim, pid = status["bookies"][0]["bookieId"], status["bookies"][0]["pid"]
        ledgers: dict[tuple[int, int, int], dict[str, int]] = {}
        for shape in SHAPES:
            made = {kind: _create_on(root, shape, victim) for kind in ("old", "empty", "recover")}
            for kind in ("old", "recover"):
                count = str(OLD_ENTRIES)
                _quiet(root, "ledger", "write", str(made[kind]), "--count", count, "--size", "64")
            ledgers[shape] = made
        unreadable = _create_on(root, SHAPES[0], victim)
        _quiet(root, "ledger", "write", str(unreadable), "--count", "10", "--size", "64")
        ledgers[SHAPES[0]]["unreadable"] = unreadable
        os.kill(pid, signal.SIGKILL)
        yield Dead(root, victim, ledgers)
    finally:
        main(["cluster", "down", "--dir", str(root)])


@pytest.mark.parametrize("shape", SHAPES, ids=["2-2-2", "3-2-2", "3-3-2"])
def test_commands_right_after_a_kill_9_succeed_and_replace_the_dead_bookie(
    dead: Dead, shape: tuple[int, int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    root, victim = dead.root, dead.victim
    old, empty, recover = (dead.ledgers[shape][k] for k in ("old", "empty", "recover"))
    e, w, a = (str(n) for n in shape)
    # A ledger created now may get the dead bookie too (still registered): creating only
    # writes metadata, and the write below replaces it if so.
    out, _ = run(capsys, root, "create", "-e", e, "-w", w, "-a", a, "--json")
    new = json.loads(out)["ledgerId"]
    count = str(NEW_ENTRIES)
    for ledger_id in (old, empty, new):
        out, _ = run(capsys, root, "write", str(ledger_id), "--count", count, "--json")
        assert json.loads(out)["entries"] == NEW_ENTRIES
    out, _ = run(capsys, root, "recover", str(recover), "--json")
    assert json.loads(out)["lastEntryId"] == OLD_ENTRIES - 1
    for ledger_id in (old, empty):
        out, _ = run(capsys, root, "close", str(ledger_id), "--json")
        assert json.loads(out)["state"] == "CLOSED"
    # Every acknowledged entry reads back, and the dead bookie is out of the last ensemble
    # of every ledger written after the kill.
    assert _read_ids(capsys, root, old) == list(range(OLD_ENTRIES + NEW_ENTRIES))
    assert _read_ids(capsys, root, empty) == list(range(NEW_ENTRIES))
    assert _read_ids(capsys, root, new) == list(range(NEW_ENTRIES))
    assert _read_ids(capsys, root, recover) == list(range(OLD_ENTRIES))
    ensembles = _metadata(capsys, root, old)["ensembles"]
    assert victim in ensembles["0"]
    assert list(ensembles) == ["0", str(OLD_ENTRIES)]
    assert victim not in ensembles[str(OLD_ENTRIES)]
    # A change at the first entry replaces the first segment (upstream's too).
    (only,) = _metadata(capsys, root, empty)["ensembles"].values()
    assert victim not in only
    ensembles = _metadata(capsys, root, new)["ensembles"]
    assert victim not in ensembles[max(ensembles, key=int)]


def test_ctrl_c_during_write_says_what_was_acknowledged(
    dead: Dead, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = run(capsys, dead.root, "create", "--json")
    lid = json.loads(out)["ledgerId"]
    writer = Writer(dead.root, lid)
    try:
        writer.send(b"first\nsecond\n")
        assert [writer.next_line(), writer.next_line()] == ["0", "1"]
        writer.proc.send_signal(signal.SIGINT)
        writer.proc.wait(timeout=30)  # before stdin closes: an end of input is no Ctrl-C
    finally:
        code, _, err = writer.finish()
    assert code == 130
    assert one_line(err) == (
        f"ledger write: ledger {lid}: interrupted; 2 entries acknowledged, ids 0..1 "
        "(the last acknowledged: 1)"
    )
    # The LAC went out before the end: a reader in another process sees both.
    out, _ = run(capsys, dead.root, "read", str(lid), "--json")
    assert [e["payload"] for e in json_lines(out)] == ["first", "second"]


def test_ctrl_c_during_read_says_what_was_read(
    dead: Dead, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = run(capsys, dead.root, "create", "--json")
    lid = json.loads(out)["ledgerId"]
    run(capsys, dead.root, "write", str(lid), "--count", "3000", "--size", "100")
    command = ["ledger", "read", str(lid), "--json", "--cluster", str(dead.root)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "bookiesim", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,  # nothing read ahead into a buffer that communicate() would not see
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # reading has begun; the full pipe holds it there
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    line = one_line(err.decode())
    pattern = rf"ledger read: ledger {lid}: interrupted; (\d+) entries read, ids 0\.\.(\d+)"
    found = re.fullmatch(pattern, line)
    assert found, line
    shown = int(found[1])
    assert int(found[2]) == shown - 1
    assert shown < 3000
    assert len((first + rest).splitlines()) == shown


def test_bad_arguments_exit_2_in_one_line(dead: Dead, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        (["read", "-1"], "a ledger id must be 0 or more, got -1"),
        (["write", "-5", "--count", "1"], "a ledger id must be 0 or more, got -5"),
        (["read", "0", "--from", "-3"], "--from must be 0 or more, got -3"),
        (["read", "0", "--from", "5", "--to", "2"], "--to 2 is before --from 5"),
        (["create", "-e", "2", "-w", "3"], "need -e >= -w >= -a >= 1, got -e 2 -w 3 -a 2"),
    ]
    for args, message in cases:
        _, err = run(capsys, dead.root, *args, code=2)
        assert one_line(err) == f"ledger {args[0]}: {message}"


def test_a_read_with_every_bookie_of_the_ensemble_dead_fails_in_one_line(
    dead: Dead, capsys: pytest.CaptureFixture[str]
) -> None:
    """Last of the module: it kills a second bookie."""
    lid = dead.ledgers[SHAPES[0]]["unreadable"]
    (ensemble,) = _metadata(capsys, dead.root, lid)["ensembles"].values()
    (other,) = [b for b in ensemble if b != dead.victim]
    status = json.loads(_quiet(dead.root, "cluster", "status", "--dir", str(dead.root), "--json"))
    os.kill(next(b["pid"] for b in status["bookies"] if b["bookieId"] == other), signal.SIGKILL)
    _, err = run(capsys, dead.root, "read", str(lid), code=1)
    line = one_line(err)
    assert line.startswith(f"ledger read: ledger {lid}: cannot learn the last add confirmed: ")
    assert dead.victim in line
    assert other in line
