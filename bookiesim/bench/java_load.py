"""``bench compare``'s second load: upstream's own Java client (``CompareLoad.java``, beside
this module), compiled at run time against an installation
(:mod:`bookiesim.upstream.java_program`).

It does what :mod:`bookiesim.bench.load_client` does (1 KiB entries with CRC32C digests, N
ledgers round robin, a bounded window of adds in flight, peak or paced) through upstream's
public client API: ``createLedger`` (E=Qw=Qa=1) and ``asyncAddEntry``. Upstream's client
finds bookies and keeps ledger metadata through a metadata service, so it is given the
``metadataServiceUri`` the bookie under test registered with. ``numChannelsPerBookie`` is
``bench compare --channels``. It gets ready (ledgers created, channels connected, 10,000
warm-up adds so that its JIT has compiled the add path) and waits for a go on stdin:
:func:`java_load` starts it, the caller starts measuring the bookie, then says go. Its
latencies become the same percentiles as the Python client's (:meth:`LoadResult.summary`):
one rule for both loads.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bookiesim.bench.load_client import LoadResult
from bookiesim.upstream.installation import BOOKIE_JAVA_OPTS
from bookiesim.upstream.java_program import compile_program, program_command

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

__all__ = ["SOURCE", "compile_load", "java_load", "load_argv", "outcome", "parse_output"]

SOURCE = Path(__file__).with_name("CompareLoad.java")
MAIN = "CompareLoad"
READY = '{"t":"ready"'
WINDOW = 2000
"""Adds in flight at most, as the Python load client's window."""
READY_TIMEOUT = 900.0
"""Seconds the Java load may take to be ready: 10,000 ledgers created on a busy machine, and
its warm-up."""
TIMEOUT = 3600.0
"""Seconds the Java load may take in all (its adds time out after upstream's 5 s each, so a
bookie that stops answering ends the run with errors long before)."""
CLIENT_JAVA_OPTS = (
    "-Xms512m",
    "-Xmx512m",
    "-XX:+UseG1GC",
    *(opt for opt in BOOKIE_JAVA_OPTS if opt.startswith(("-D", "--add-opens"))),
)
"""A client JVM as an application runs one: a fixed heap (the latencies of 3M adds are 48 MB
of it) and the netty options and module openings of upstream's own scripts."""


def compile_load(home: Path, work: Path) -> Path:
    """``CompareLoad`` compiled against ``home/lib/*`` into ``work/classes``; ``RuntimeError``
    (one line) when it cannot be."""
    return compile_program(home, SOURCE, work)


def load_argv(
    home: Path, classes: Path, work: Path, uri: str, *, ledgers: int, adds: int, size: int,
    rate: float | None, channels: int,
) -> list[str]:  # fmt: skip
    """The Java load's command line against the bookie registered under ``uri``."""
    command = program_command(home, classes, work, CLIENT_JAVA_OPTS, MAIN)
    pace = 0.0 if rate is None else rate
    return [*command, uri, str(ledgers), str(adds), str(size), str(WINDOW), f"{pace:.3f}",
            str(channels)]  # fmt: skip


def parse_output(stdout: str, size: int) -> dict[str, Any]:
    """The Java load's summary from its stdout, in the Python client's figures (plus
    ``setup_seconds``, the ledgers' creation, and ``first_error``); ``ValueError`` (one
    line) when it never reported its adds."""
    lines: dict[str, dict[str, Any]] = {}
    for text in stdout.splitlines():
        if text.startswith('{"t":'):
            record = json.loads(text)
            lines[record.pop("t")] = record
    done = lines.get("done")
    if done is None:
        stage = "after creating its ledgers" if "ready" in lines else "before its ledgers existed"
        raise ValueError(f"the Java load ended {stage}, without reporting its adds")
    latencies = [us / 1e6 for us in done["latency_us"]]
    result: dict[str, Any] = LoadResult(
        done["adds"], done["errors"], done["seconds"], size, latencies
    ).summary()
    result["setup_seconds"] = lines.get("ready", {}).get("setup_seconds")
    if done.get("first_error"):
        result["first_error"] = done["first_error"]
    return result


def _why(stderr: str, code: int) -> str:
    """The line of a failed JVM's stderr that says why (its exception), else its last."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    causes = [line for line in lines if line.startswith(("Exception in thread", "Caused by:"))]
    return (causes or lines or [f"the Java load exited with {code}"])[-1][:300]


def outcome(stdout: str, stderr: str, code: int, size: int) -> dict[str, Any]:
    """What an ended Java load did, from its output and exit code: its summary, with
    ``failed`` saying how when it did not complete every add."""
    try:
        result = parse_output(stdout, size)
    except ValueError as exc:
        return {"failed": f"{exc}: {_why(stderr, code)}"}
    if result["errors"]:
        result["failed"] = f"{result['errors']} adds failed ({result.get('first_error')})"
    elif code != 0:
        result["failed"] = _why(stderr, code)
    return result


@contextmanager
def java_load(argv: Sequence[str], size: int) -> Iterator[Callable[[], dict[str, Any]]]:
    """Start the Java load and wait until it is ready (ledgers created, channels connected,
    its JIT warmed), so that the caller can start measuring the bookie; yield the function
    that says go, waits for the timed adds and returns :func:`outcome`. Killed on leaving
    the block if it still runs."""
    with tempfile.TemporaryFile() as log:  # its log: read only to say why it failed
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        try:
            before = ""  # a library may print to stdout first; EOF: it ended
            # A load stuck before it is ready (a metadata service that never answers) is
            # killed, which ends the wait below with the end of its output.
            stuck = threading.Timer(READY_TIMEOUT, proc.kill)
            stuck.start()
            try:
                for line in iter(proc.stdout.readline, ""):
                    before += line
                    if line.startswith(READY):
                        break
            finally:
                stuck.cancel()

            def go() -> dict[str, Any]:
                try:  # the go, then everything it prints until it ends
                    rest, _ = proc.communicate(input="go\n", timeout=TIMEOUT)
                except subprocess.TimeoutExpired:
                    return {"failed": f"the Java load had not finished after {TIMEOUT:.0f} s"}
                log.seek(0)
                stderr = log.read().decode(errors="replace")
                return outcome(before + rest, stderr, proc.returncode, size)

            yield go
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
