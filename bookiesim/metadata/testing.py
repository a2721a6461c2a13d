"""Run a real ZooKeeper server on loopback, for tests and experiments (like ``trio.testing``).

::

    with running_zookeeper(tmp_path / "zk") as zk:
        async with open_store(zk.uri("/my-test/ledgers")) as store:
            ...

No download at run time: the server is an installed jar, found in this order —

1. ``$ZOOKEEPER_CLASSPATH`` (a Java class path), if set;
2. Debian's ``zookeeper`` package (``/usr/share/java/zookeeper.jar``; its manifest pulls in the
   libraries it needs);
3. the ZooKeeper jar inside an installed ``pyspark`` wheel (``pyspark/jars/*``);

and run by the ``java`` on ``PATH`` (or ``$JAVA``). :func:`find_zookeeper` says why when one
is missing, so a test suite can skip — or, in CI, fail — with that reason.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = [
    "ZooKeeperInstall",
    "ZooKeeperServer",
    "find_zookeeper",
    "free_port",
    "running_zookeeper",
]

MAIN_CLASS: Final = "org.apache.zookeeper.server.ZooKeeperServerMain"
DEBIAN_JAR: Final = Path("/usr/share/java/zookeeper.jar")


@dataclass(frozen=True)
class ZooKeeperInstall:
    java: str
    classpath: str


@dataclass(frozen=True)
class ZooKeeperServer:
    host: str
    port: int
    pid: int
    tick_ms: int

    @property
    def hosts(self) -> str:
        return f"{self.host}:{self.port}"

    def uri(self, ledgers_root: str = "") -> str:
        """A ``zk://`` URI for this server naming the ledgers root (``/name``; without one,
        the ZooKeeper root itself, as upstream reads such a URI)."""
        return f"zk://{self.hosts}{ledgers_root}"


def find_zookeeper() -> ZooKeeperInstall | str:
    """The Java and class path to run ZooKeeper with, or a sentence saying what is missing."""
    java = os.environ.get("JAVA") or shutil.which("java")
    if not java:
        return "no java on PATH (Debian: apt-get install -y openjdk-17-jre-headless)"
    if not os.access(java, os.X_OK):
        return f"java {java!r} (from $JAVA) is not an executable"
    env_cp = os.environ.get("ZOOKEEPER_CLASSPATH")
    if env_cp:
        return ZooKeeperInstall(java, env_cp)
    if DEBIAN_JAR.is_file():
        return ZooKeeperInstall(java, str(DEBIAN_JAR))
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin is not None:
        jars = Path(spec.origin).parent / "jars"
        if any(jars.glob("zookeeper-*.jar")):
            return ZooKeeperInstall(java, f"{jars}/*")
    return (
        "no ZooKeeper jar found (Debian: apt-get install -y zookeeper; or pip install pyspark; "
        "or set ZOOKEEPER_CLASSPATH)"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the ZooKeeper, Prometheus and upstream bookies that
    tests and benchmarks start bind it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ruok(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0) as s:
            s.sendall(b"ruok")
            return s.recv(16) == b"imok"
    except OSError:
        return False


@contextlib.contextmanager
def running_zookeeper(
    data_dir: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    tick_ms: int = 250,
    startup_timeout: float = 60.0,
    prefix: Sequence[str] = (),
) -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper for the duration of the ``with``; stopped (and reaped) after.

    ``tick_ms`` is ZooKeeper's tickTime; sessions may last 2 to 20 ticks, so the default 250
    lets tests use session timeouts from 0.5 s to 5 s. The admin HTTP server is off; the
    ``ruok`` four-letter word is on (it is how readiness is detected); ``forceSync=no``, as
    the data is thrown away. Raises ``RuntimeError`` with the server's output if it does not
    come up. ``prefix`` goes before the java command (``ip netns exec NS``: a server in a
    network namespace of its own, whose address is ``host``).
    """
    install = find_zookeeper()
    if isinstance(install, str):
        raise RuntimeError(install)
    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port(host)
    log_path = data_dir / "zookeeper.log"
    # A config file rather than ``<port> <dataDir> <tickTime>`` arguments: only the file
    # can bind the client port to loopback and lift the 60-connections-per-address limit
    # (a test opens many stores from 127.0.0.1).
    config = data_dir / "zoo.cfg"
    config.write_text(
        f"tickTime={tick_ms}\n"
        f"dataDir={data_dir / 'data'}\n"
        f"clientPort={port}\n"
        f"clientPortAddress={host}\n"
        "maxClientCnxns=0\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,stat\n"
        "preAllocSize=1024\n"
        # No fsync per transaction: a test server's data is thrown away, and on a machine
        # shared with fsync-heavy benchmarks one slow fsync stalls every session create
        # past the client's connect timeout.
        "forceSync=no\n"
    )
    cmd = [
        install.java,
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",  # starts faster; plenty for a test server
        "-Dzookeeper.admin.enableServer=false",
        "-cp",
        install.classpath,
        MAIN_CLASS,
        str(config),
    ]
    with open(log_path, "wb") as log_file:
        try:
            proc = subprocess.Popen([*prefix, *cmd], stdout=log_file, stderr=subprocess.STDOUT)
        except OSError as exc:
            raise RuntimeError(f"cannot start ZooKeeper ({' '.join(cmd)}): {exc}") from exc
    try:
        deadline = time.monotonic() + startup_timeout
        while not _ruok(host, port):
            if proc.poll() is not None or time.monotonic() > deadline:
                output = log_path.read_text(errors="replace")[-4000:]
                raise RuntimeError(
                    f"ZooKeeper did not start on {host}:{port} "
                    f"(exit code {proc.poll()}): {' '.join(cmd)}\n{output}"
                )
            time.sleep(0.1)
        yield ZooKeeperServer(host, port, proc.pid, tick_ms)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
