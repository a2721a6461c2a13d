"""A Java program of ours run against an installation's client API: compiled at run time
against ``lib/*.jar`` (nothing of upstream's is kept in this repository), run with the
installation's class path behind our classes, logging on stderr so that stdout holds only the
program's JSON lines.

Users: the fault harness's writer (:mod:`bookiesim.chaos.upstream.java_writer`,
``ChaosWriter.java``) and ``bench compare``'s second load (:mod:`bookiesim.bench.java_load`,
``CompareLoad.java``).
"""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING

from bookiesim.upstream.installation import java_command

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

__all__ = ["STDERR_LOG_CONFIG", "compile_program", "program_command"]

STDERR_LOG_CONFIG = """\
status = error
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1} - %m%n
rootLogger.level = info
rootLogger.appenderRef.err.ref = ERR
"""
"""The client library's log on stderr (into the caller's log file): stdout holds only the
program's JSON lines."""


def compile_program(home: Path, source: Path, work: Path) -> Path:
    """``javac`` ``source`` against ``home/lib/*`` into ``work/classes``; ``RuntimeError``
    (one line) when there is no ``javac`` or the installation's API does not fit."""
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError(f"no javac on PATH: {source.name} is compiled at run time (JDK 17)")
    classes = work / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    argv = [javac, "-cp", str(home / "lib" / "*"), "-d", str(classes), str(source)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["?"])[0]
        raise RuntimeError(f"{source.name} does not compile against {home}/lib: {first}")
    return classes


def program_command(
    home: Path, classes: Path, work: Path, java_opts: Sequence[str], main: str
) -> list[str]:
    """``java`` running our class ``main`` from ``classes`` with the installation's jars
    behind it, logging on stderr (:data:`STDERR_LOG_CONFIG`, written into ``work``); the
    program's own arguments go after it."""
    # Written before java_command, which keeps a log4j2.properties it finds.
    (work / "log4j2.properties").write_text(STDERR_LOG_CONFIG)
    command = java_command(home, work, java_opts, main)
    # java_command's class path is the installation's; our classes go first.
    where = command.index("-cp") + 1
    command[where] = f"{classes}:{command[where]}"
    return command
