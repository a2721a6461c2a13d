"""``bench compare``'s second load: upstream's own Java client (``CompareLoad.java``, beside
this module), compiled at run time against an installation
(:mod:`bookiesim.upstream.java_program`).

It does what :mod:`bookiesim.bench.load_client` does (1 KiB entries with CRC32C digests, N
ledgers round robin, a bounded window of adds in flight, peak or paced) through upstream's
public client API: ``createLedger`` (E=Qw=Qa=1) and ``asyncAddEntry``. Upstream's client
finds bookies and keeps ledger metadata through a metadata service, so it is given the
``metadataServiceUri`` the bookie under test registered with. ``numChannelsPerBookie`` is
``bench compare --channels``. Its latencies become the same percentiles as the Python
client's (:meth:`LoadResult.summary`): one rule for both loads.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bookiesim.bench.load_client import LoadResult
from bookiesim.upstream.installation import BOOKIE_JAVA_OPTS
from bookiesim.upstream.java_program import compile_program, program_command

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["SOURCE", "compile_load", "load_argv", "parse_output", "run_java_load"]

SOURCE = Path(__file__).with_name("CompareLoad.java")
MAIN = "CompareLoad"
WINDOW = 2000
"""Adds in flight at most, as the Python load client's window."""
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


def run_java_load(argv: Sequence[str], size: int) -> dict[str, Any]:
    """Run the Java load to its end: its summary, with ``failed`` saying how when it did
    not complete every add."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        return {"failed": f"the Java load had not finished after {TIMEOUT:.0f} s"}
    try:
        result = parse_output(done.stdout, size)
    except ValueError as exc:
        return {"failed": f"{exc}: {_why(done.stderr, done.returncode)}"}
    if result["errors"]:
        result["failed"] = f"{result['errors']} adds failed ({result.get('first_error')})"
    elif done.returncode != 0:
        result["failed"] = _why(done.stderr, done.returncode)
    return result
