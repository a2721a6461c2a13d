"""What a person sees when the machine, not the code, is wrong: one line, a documented code.

Why: a taken port, an unreachable ZooKeeper, a file where a directory belongs, an empty log or
a mistyped store path each used to end in a traceback or a misleading code (the cookie's 4
for a file given as a directory; "corrupt" for a log the bookie made ahead of need; an empty
SQLite file left behind by a read). Each case runs the real command in its own process, as
an operator would, and checks its whole stderr.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from bookiesim.bookie import exit_codes

if TYPE_CHECKING:
    from pathlib import Path


def bookiesim(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bookiesim", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def bookie(tmp_path: Path, *settings: str) -> subprocess.CompletedProcess[str]:
    defaults = {
        "bookiePort": "0",
        "httpServerPort": "0",
        "journalDirectory": str(tmp_path / "journal"),
        "ledgerDirectories": str(tmp_path / "ledgers"),
    }
    for setting in settings:
        key, _, value = setting.partition("=")
        defaults[key] = value
    args = [a for key, value in defaults.items() for a in ("--set", f"{key}={value}")]
    return bookiesim("bookie", *args)


def errors(stderr: str) -> list[str]:
    """The log's ERROR lines, and any line that is not a log line (a traceback's)."""
    return [
        line
        for line in stderr.splitlines()
        if " ERROR " in line or not line[:4].isdigit() or "Traceback" in line
    ]


def test_a_taken_port_is_named_with_its_key(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = bookie(tmp_path, f"bookiePort={port}")
        admin = bookie(tmp_path / "b", f"httpServerPort={port}")
    assert done.returncode == exit_codes.UNAVAILABLE == 7
    assert done.stdout == ""  # never announced itself ready
    (line,) = errors(done.stderr)
    assert line.endswith(
        f"cannot run: cannot listen on 127.0.0.1:{port} (bookiePort): Address already in use"
    )
    # Sizing the default caches to the open-file limit is no news: no WARNING at start.
    assert " WARNING " not in done.stderr
    assert "(default 20000, sized to the limit)" in done.stderr or "openFileLimit=20000" in (
        done.stderr
    )
    assert admin.returncode == exit_codes.UNAVAILABLE
    (line,) = errors(admin.stderr)
    assert f":{port} (httpServerPort): Address already in use" in line


def test_an_unreachable_zookeeper_is_named_after_a_bounded_wait(tmp_path: Path) -> None:
    uri = "zk://127.0.0.1:1/ledgers"  # nothing listens on port 1
    done = bookie(tmp_path, f"metadataServiceUri={uri}")
    assert done.returncode == exit_codes.UNAVAILABLE
    (line,) = errors(done.stderr)
    assert line.endswith(f"cannot run: {uri}: no ZooKeeper server answered within 10 s")


def test_a_file_given_as_a_directory_is_a_configuration_error(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    done = bookie(tmp_path, f"ledgerDirectories={afile}")
    assert done.returncode == exit_codes.BAD_CONFIGURATION == 2
    assert (
        done.stderr == f"bookiesim bookie: ledgerDirectories: {afile} is a file, not a directory\n"
    )
    under = bookie(tmp_path, f"journalDirectory={afile}/journal")
    assert under.returncode == exit_codes.BAD_CONFIGURATION
    assert under.stderr == (
        f"bookiesim bookie: journalDirectory: {afile}/journal lies under {afile}, which is a "
        "file, not a directory\n"
    )
    assert afile.read_text() == "not a directory"


def test_an_empty_preallocated_log_is_empty_not_corrupt(tmp_path: Path) -> None:
    log = tmp_path / "3f.log"
    log.touch()  # what the preallocation pool leaves: created, never written
    done = bookiesim("shell", "readlog", str(log))
    assert done.returncode == 0
    assert "log 0x3f (63) is empty (0 bytes)" in done.stdout
    assert done.stderr == ""
    torn = tmp_path / "40.log"
    torn.write_bytes(b"BKLO")  # 4 bytes: a header cut short is still an error
    assert bookiesim("shell", "readlog", str(torn)).returncode == 2


def test_reading_a_missing_sqlite_store_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    done = bookiesim("ledger", "list", "--metadata", f"sqlite:///{db}")
    assert done.returncode == 1
    assert done.stderr == (
        f"ledger list: no BookKeeper cluster at sqlite:///{db}: no such file (start a bookie "
        "there first, or check the path)\n"
    )
    assert list(tmp_path.iterdir()) == []


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_in_the_experiment_says_how_far_it_got(tmp_path: Path) -> None:
    # Real time, a minute of workload: still in its first run when the signal comes.
    args = ["sim", "elpl", "--time-scale", "1", "--duration", "60", "--ledgers", "2"]
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bookiesim", *args, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as a terminal's foreground job gets it: a shell starts background jobs with
        # SIGINT ignored, which a child inherits, and Python then never raises it.
        preexec_fn=_default_sigint,
    )
    # The output directory appears once the command has parsed its arguments, just before
    # the experiment starts; a fixed wait was too short on a loaded machine (the imports
    # alone took 7 s), and a Ctrl-C during the imports is Python's, not the command's.
    # Then a moment more, inside the run.
    deadline = time.monotonic() + 60
    while not out.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    assert stdout == ""
    (line,) = stderr.splitlines()
    assert line.startswith("bookiesim sim elpl: interrupted: 0 of ")
    assert "runs finished, run 'interleaved' stopped at " in line
    assert line.endswith("nothing written (an interrupted experiment has no summary)")


def test_a_pipeline_over_logs_with_no_entries_says_where_the_entries_are(tmp_path: Path) -> None:
    """A user's journey: Spark pointed at a running cluster seconds after a write, its
    entries still in the bookies' journals; one line, before Spark starts."""
    current = tmp_path / "bookie-1" / "ledgers" / "current"
    current.mkdir(parents=True)
    (current / "0.log").touch()
    done = bookiesim(
        "pipeline", "inventory", "--input", str(tmp_path), "--output", str(tmp_path / "out")
    )
    assert done.returncode == 1
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert "no entries in entry logs under" in lines[0]
    assert "(1 never written)" in lines[0]
    assert "in its journal until its next checkpoint" in lines[0]
