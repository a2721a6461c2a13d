"""``bookiesim shell`` when things go wrong: a bad or missing file is one stderr line naming
the file and the byte offset with exit code 2, never a traceback; every JSON key is in the
help; a reader that closes the pipe ends the command quietly."""

from __future__ import annotations

import struct
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from bookiesim.bookie.journal import (
    HEADER_SIZE as JOURNAL_HEADER_SIZE,
)
from bookiesim.bookie.journal import (
    DataRecord,
    encode_header,
    encode_record,
)
from bookiesim.cli.main import main
from bookiesim.entrylog.writer import EntryLogWriter

from .shell_files import (
    json_lines,
    run,
    write_index,
    write_journal,
    write_log,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

# ---------------------------------------------------------------------------- errors


def _bad_files(tmp_path: Path) -> dict[str, tuple[list[str], Path, int | None]]:
    """name -> (shell arguments, the file the error must name, the offset it must name)."""
    wrong_magic = tmp_path / "a.log"
    wrong_magic.write_bytes(b"BKLX" + bytes(2000))
    torn_header = tmp_path / "b.log"
    torn_header.write_bytes(encode_log_header_prefix())
    junk = tmp_path / "junk.txn"
    junk.write_bytes(b"Junk data, not a journal" * 10)
    junk_after_records = tmp_path / "later.txn"
    first = encode_record(DataRecord.from_body(struct.pack(">qq", 1, 0) + b"ok"))
    junk_after_records.write_bytes(encode_header() + first + b"\x80\x00\x00\x00" + bytes(8))
    bad_index = tmp_path / "5.idx"
    bad_index.write_bytes(b"BKLF" + bytes(1020))
    torn_index = tmp_path / "6.idx"
    torn_index.write_bytes(b"BKLE\x00\x00\x00\x01\x00\x00\x00\x14abc")
    short_mark = tmp_path / "ledgers" / "current" / "lastMark"
    short_mark.parent.mkdir(parents=True)
    short_mark.write_bytes(b"\x00" * 10)
    missing = tmp_path / "missing"
    return {
        "wrong magic": (["readlog", str(wrong_magic)], wrong_magic, 0),
        "torn log header": (["readlog", str(torn_header)], torn_header, 20),
        "torn log header, map": (["readlog", str(torn_header), "--ledgers-map"], torn_header, 20),
        "junk journal": (["readjournal", str(junk)], junk, 0),
        "junk after records": (
            ["readjournal", str(junk_after_records)],
            junk_after_records,
            JOURNAL_HEADER_SIZE + len(first),
        ),
        "bad index signature": (["readindex", str(bad_index)], bad_index, 0),
        "torn index header": (["readindex", str(torn_index)], torn_index, 8),
        "short lastMark": (["lastmark", str(tmp_path / "ledgers")], short_mark, 10),
        "missing log": (["readlog", str(missing / "1.log")], missing / "1.log", None),
        "missing journal": (["readjournal", str(missing)], missing, None),
        "missing index": (["readindex", str(missing)], missing, None),
        "missing dir": (["lastmark", str(missing)], missing, None),
        "no lastMark": (["lastmark", str(tmp_path)], tmp_path, None),
    }


def encode_log_header_prefix() -> bytes:
    """The first 20 bytes of a V1 entry log header: a crash cut the rest."""
    return b"BKLO" + struct.pack(">iqi", 1, 0, 0)


BAD_FILE_CASES = [
    "wrong magic",
    "torn log header",
    "torn log header, map",
    "junk journal",
    "junk after records",
    "bad index signature",
    "torn index header",
    "short lastMark",
    "missing log",
    "missing journal",
    "missing index",
    "missing dir",
    "no lastMark",
]


@pytest.mark.parametrize("case", BAD_FILE_CASES)
@pytest.mark.parametrize("as_json", [False, True])
def test_a_bad_file_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str, as_json: bool
) -> None:
    argv, named, offset = _bad_files(tmp_path)[case]
    code, out, err = run(capsys, *argv, *(["--json"] if as_json else []))
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    (line,) = lines
    assert line.startswith(f"bookiesim shell {argv[0]}: {named}")
    assert "Traceback" not in line
    if offset is not None:
        assert f": offset {offset}: " in line
    if case == "junk after records":
        assert len(out.splitlines()) == (1 if as_json else 3)  # the good record came first
    else:
        assert out == ""


def test_bad_file_helper_is_stable(tmp_path: Path) -> None:
    # The parametrization above lists the cases without files; keep both in step.
    assert list(_bad_files(tmp_path)) == BAD_FILE_CASES


# ---------------------------------------------------------------------------- help, pipes


@pytest.mark.parametrize(
    ("command", "make"),
    [
        ("readlog", lambda p: write_log(p, 0x1F, seal=True)[0]),
        ("readjournal", write_journal),
        ("readindex", lambda p: write_index(p)[0]),
    ],
)
def test_every_json_key_is_documented_in_help(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    command: str,
    make: Callable[[Path], Path],
) -> None:
    path = make(tmp_path)
    extra = ["--print-body"] if command == "readlog" else []
    code, out, _ = run(capsys, command, path, "--json", *extra)
    assert code == 0
    keys = {k for obj in json_lines(out) for k in obj}
    if command == "readlog":
        code, out, _ = run(capsys, command, path, "--json", "--ledgers-map")
        keys |= {k for obj in json_lines(out) for k in obj}
    with pytest.raises(SystemExit):
        main(["shell", command, "--help"])
    help_text = capsys.readouterr().out
    assert {k for k in keys if k not in help_text} == set()


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    # Enough rows to fill the pipe, so the shell meets the closed pipe while writing.
    with EntryLogWriter(tmp_path, 1) as writer:
        for entry_id in range(20_000):
            writer.append(struct.pack(">qqq", 3, entry_id, entry_id - 1) + bytes(8))
    proc = subprocess.Popen(
        [sys.executable, "-m", "bookiesim", "shell", "readlog", str(writer.path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what `| head -1` does
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 0
    assert b"log 0x1 (1)" in first
    assert err == b""
