"""An installation of upstream Apache BookKeeper on this machine: found, and its ``java``
command lines (nothing of upstream's is kept in this repository).

An installation is a directory with ``lib/*.jar`` (the binary distribution, or a build's
``lib``), named by ``--bookkeeper-home`` or ``BOOKKEEPER_HOME``, run with the ``java`` on
``PATH`` (17 or later). :func:`installation` returns either the directory or one sentence
saying why there is none and how to give one; callers print that sentence (``bench compare``
refusing its ratios, ``chaos run --cluster upstream`` refusing to start) or skip with it (the
live conformance tests in ``tests/interop``). Its users: :mod:`bookiesim.bench.upstream`
(a bookie to measure), :mod:`bookiesim.chaos.upstream` (bookies and a Java client to hurt).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["BOOKIE_JAVA_OPTS", "LOG_CONFIG", "installation", "java_command", "tail", "write_conf"]

BOOKIE_JAVA_OPTS = (
    "-Xms1g",
    "-Xmx1g",
    "-XX:MaxDirectMemorySize=2g",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=10",
    "-XX:+ParallelRefProcEnabled",
    "-XX:+DisableExplicitGC",
    "-Djava.net.preferIPv4Stack=true",
    "-Dio.netty.leakDetectionLevel=disabled",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.util.zip=ALL-UNNAMED",
)
"""Upstream's bookie defaults from ``bin/common.sh`` on Java 17: a 1 GiB heap, 2 GiB of direct
memory, G1 with short pauses (the thread-count options, sized for large machines, left out),
and its netty and bookie options: leak detection off, and the module openings that let netty
use direct buffers without copies, the journal call ``posix_fadvise`` and the CRC32 digest
work on direct memory. Without them upstream runs slower than it does for its users."""

LOG_CONFIG = """\
status = error
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %p %c{1} - %m%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = OUT
"""
"""Our own log4j2 settings: upstream's shell reports entries and ledger ids at INFO, which the
library default (ERROR) would hide."""


def installation(home: str | os.PathLike[str] | None = None) -> Path | str:
    """``home`` (else ``BOOKKEEPER_HOME``) as a usable installation, or one sentence saying
    why not and how to give one."""
    given = os.fspath(home) if home is not None else os.environ.get("BOOKKEEPER_HOME")
    if not given:
        return (
            "no upstream BookKeeper installation: BOOKKEEPER_HOME is not set (give one with "
            "--bookkeeper-home DIR or BOOKKEEPER_HOME=DIR: a directory with lib/*.jar, "
            "and Java 17 on PATH)"
        )
    lib = Path(given) / "lib"
    if not any(lib.glob("*.jar")):
        return f"no upstream BookKeeper installation: {given} has no lib/*.jar"
    if shutil.which("java") is None:
        return "no java on PATH (Java 17 runs upstream's jars)"
    return Path(given)


def java_command(
    home: Path, work: Path, java_opts: Sequence[str], main: str, *args: str
) -> list[str]:
    """``java`` running ``main`` from the installation's ``lib/``, logging per
    :data:`LOG_CONFIG` (written into ``work`` once)."""
    log_config = work / "log4j2.properties"
    if not log_config.exists():
        log_config.write_text(LOG_CONFIG)
    return [
        "java",
        *java_opts,
        f"-Dlog4j.configurationFile={log_config}",
        "-cp",
        str(home / "lib" / "*"),
        main,
        *args,
    ]


def write_conf(path: Path, settings: Mapping[str, object]) -> Path:
    """A ``bk_server.conf`` of upstream keys."""
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log, for an error message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} unreadable)"
