"""Upstream Apache BookKeeper, run from an installation: found, configured, started, stopped.

An installation is a directory with ``lib/*.jar`` (the binary distribution, or a build's
``lib``), named by ``--bookkeeper-home`` or ``BOOKKEEPER_HOME``, run with the ``java`` on
``PATH`` (17 or later). Nothing of upstream's is kept in this repository. :func:`installation`
returns either the directory or one sentence saying why there is none and how to give one;
callers print that sentence (``bench compare`` refusing its ratios) or skip with it (the live
conformance tests in ``tests/interop``, which build their clusters on :func:`java_command`).

For a benchmark, :func:`upstream_bookie` runs one bookie (``org.apache.bookkeeper.server.Main``)
the way an operator would: its own ZooKeeper (upstream's bookie cannot start without a
metadata service; the server is the ZooKeeper jar upstream ships in ``lib/``, run by
:mod:`bookiesim.metadata.testing`), a root formatted by upstream's own ``initnewcluster``, and
a ``bk_server.conf`` of upstream keys. It is ready once its port accepts connections.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bookiesim.metadata.testing import find_zookeeper, free_port, running_zookeeper

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

__all__ = [
    "BOOKIE_JAVA_OPTS",
    "LOG_CONFIG",
    "UpstreamBookie",
    "installation",
    "java_command",
    "tail",
    "upstream_bookie",
    "write_conf",
]

HOST = "127.0.0.1"
START_TIMEOUT = 120.0
"""Seconds an upstream bookie has to accept connections (a cold JVM on a busy machine)."""

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


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log, for an error message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} unreadable)"


@contextmanager
def _zookeeper_for(home: Path, work: Path) -> Iterator[str]:
    """A ZooKeeper for upstream's bookie: the one this machine has, else the jar upstream
    ships; yields its ``host:port``."""
    saved = os.environ.get("ZOOKEEPER_CLASSPATH")
    if isinstance(find_zookeeper(), str):
        os.environ["ZOOKEEPER_CLASSPATH"] = str(home / "lib" / "*")
    try:
        with running_zookeeper(work / "zookeeper") as zk:
            yield zk.hosts
    finally:
        if saved is None:
            os.environ.pop("ZOOKEEPER_CLASSPATH", None)
        else:
            os.environ["ZOOKEEPER_CLASSPATH"] = saved


@dataclass
class UpstreamBookie:
    """One running ``server.Main``; its output in ``log``."""

    port: int
    proc: subprocess.Popen[bytes]
    root: Path
    log: Path

    @property
    def ledgers_dir(self) -> Path:
        return self.root / "ledgers"

    def stop(self, timeout: float) -> int:
        """SIGTERM, as a service manager stops it; SIGKILL after ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@contextmanager
def upstream_bookie(
    home: Path, root: Path, settings: Mapping[str, object], *, prefix: Sequence[str] = ()
) -> Iterator[UpstreamBookie]:
    """Upstream's bookie with its journal and ledger dirs under ``root`` (same disk),
    ``settings`` (upstream keys) over the local ones, its own ZooKeeper and a root formatted
    by ``initnewcluster``; ready when the block starts, killed on leaving if still running.
    ``prefix`` goes before the java command (one that execs it, so the pid is the JVM's)."""
    root.mkdir(parents=True, exist_ok=True)
    with _zookeeper_for(home, root) as hosts:
        port = free_port(HOST)
        conf = write_conf(
            root / "bk_server.conf",
            {
                "bookiePort": port,
                "advertisedAddress": HOST,
                "allowLoopback": "true",
                "useHostNameAsBookieID": "false",
                "metadataServiceUri": f"zk://{hosts}/ledgers",
                "journalDirectories": root / "journal",
                "ledgerDirectories": root / "ledgers",
                "httpServerEnabled": "false",
                "autoRecoveryDaemonEnabled": "false",
                **settings,
            },
        )
        shell = java_command(
            home, root, ("-Xmx256m",), "org.apache.bookkeeper.bookie.BookieShell",
            "-conf", str(conf), "initnewcluster",
        )  # fmt: skip
        done = subprocess.run(shell, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(
                f"upstream initnewcluster failed ({done.returncode}):\n"
                f"{(done.stdout + done.stderr)[-3000:]}"
            )
        command = [
            *prefix,
            *java_command(
                home,
                root,
                BOOKIE_JAVA_OPTS,
                "org.apache.bookkeeper.server.Main",
                "--conf",
                str(conf),
            ),
        ]
        log = root / "bookie.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        bookie = UpstreamBookie(port, proc, root, log)
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while not _accepts(port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"upstream bookie did not accept connections on {HOST}:{port} "
                        f"(exit code {proc.poll()}); log {log}:\n{tail(log)}"
                    )
                time.sleep(0.2)
            yield bookie
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
