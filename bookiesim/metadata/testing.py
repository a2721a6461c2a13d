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

:func:`running_ensemble` runs several servers as one replicated ensemble (``server.N`` lines,
a ``myid`` per data directory), each through its own command prefix (a network namespace),
and lets a test kill one (SIGKILL) and start it again on its data.
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
    "EnsembleMember",
    "ZooKeeperEnsemble",
    "ZooKeeperInstall",
    "ZooKeeperServer",
    "find_zookeeper",
    "free_port",
    "running_ensemble",
    "running_zookeeper",
]

MAIN_CLASS: Final = "org.apache.zookeeper.server.ZooKeeperServerMain"
QUORUM_MAIN_CLASS: Final = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
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


def _four_letters(host: str, port: int, word: bytes) -> bytes:
    """The server's whole answer to a four-letter word (empty when it cannot be reached)."""
    answer = b""
    try:
        with socket.create_connection((host, port), timeout=1.0) as s:
            s.sendall(word)
            while chunk := s.recv(4096):
                answer += chunk
    except OSError:
        pass
    return answer


def _ruok(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0) as s:
            s.sendall(b"ruok")
            return s.recv(16) == b"imok"
    except OSError:
        return False


def _java_command(install: ZooKeeperInstall, main_class: str, config: Path) -> list[str]:
    return [
        install.java,
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",  # starts faster; plenty for a test server
        "-Dzookeeper.admin.enableServer=false",
        "-cp",
        install.classpath,
        main_class,
        str(config),
    ]


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
    cmd = _java_command(install, MAIN_CLASS, config)
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


@dataclass
class EnsembleMember:
    """One server of a :class:`ZooKeeperEnsemble`: ``myid``, where it listens, its process."""

    myid: int
    host: str
    client_port: int
    quorum_port: int
    election_port: int
    data_dir: Path
    prefix: Sequence[str] = ()
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.client_port}"

    def mode(self) -> str | None:
        """``leader``, ``follower`` or ``standalone`` while it serves clients, else None
        (down, cut off, or still looking for a leader: ``srvr`` says it serves no requests)."""
        for line in (
            _four_letters(self.host, self.client_port, b"srvr")
            .decode(errors="replace")
            .splitlines()
        ):
            if line.startswith("Mode: "):
                return line.removeprefix("Mode: ").strip()
        return None

    def client_hosts(self) -> list[str]:
        """The addresses of the clients connected to it now (``stat``'s ``Clients:`` lines,
        ``/10.123.0.2:41234[1](queued=0,...)``), its own ``stat`` connection left out; empty
        when it cannot be reached."""
        text = _four_letters(self.host, self.client_port, b"stat").decode(errors="replace")
        clients = text.partition("Clients:")[2].partition("\n\n")[0]
        hosts = [
            line.strip().lstrip("/").rpartition(":")[0]
            for line in clients.splitlines()
            if line.strip().startswith("/")
        ]
        # One of them is this very `stat`, from the asking node.
        return sorted(hosts)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class ZooKeeperEnsemble:
    """Servers that form one ZooKeeper ensemble (one alone runs standalone); each can be
    killed and started again on its data directory."""

    install: ZooKeeperInstall
    members: list[EnsembleMember]
    tick_ms: int
    startup_timeout: float

    @property
    def hosts(self) -> str:
        return ",".join(m.address for m in self.members)

    def uri(self, ledgers_root: str = "") -> str:
        """A ``zk://`` URI naming every server (``host:port;host:port``, upstream's form)."""
        return f"zk://{self.hosts.replace(',', ';')}{ledgers_root}"

    def _config(self, member: EnsembleMember) -> Path:
        servers = (
            "".join(
                f"server.{m.myid}={m.host}:{m.quorum_port}:{m.election_port}\n"
                for m in self.members
            )
            if len(self.members) > 1
            else ""
        )
        member.data_dir.mkdir(parents=True, exist_ok=True)
        (member.data_dir / "data").mkdir(exist_ok=True)
        (member.data_dir / "data" / "myid").write_text(f"{member.myid}\n")
        config = member.data_dir / "zoo.cfg"
        config.write_text(
            f"tickTime={self.tick_ms}\n"
            # A follower has 10 s to load a snapshot from the leader, 2.5 s to answer it after.
            f"initLimit={max(1, 10_000 // self.tick_ms)}\n"
            f"syncLimit={max(1, 2_500 // self.tick_ms)}\n"
            f"dataDir={member.data_dir / 'data'}\n"
            f"clientPort={member.client_port}\n"
            f"clientPortAddress={member.host}\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat\n"
            "preAllocSize=1024\n"
            "forceSync=no\n" + servers
        )
        return config

    def start(self, myid: int) -> None:
        """Start server ``myid`` (again) on its data directory; it is not waited for."""
        member = self.member(myid)
        if member.running():
            raise RuntimeError(f"ZooKeeper server {myid} is already running")
        cmd = _java_command(self.install, QUORUM_MAIN_CLASS, self._config(member))
        # Appended to: a server started again keeps the log of its earlier runs.
        with open(member.data_dir / "zookeeper.log", "ab") as log_file:
            try:
                member.proc = subprocess.Popen(
                    [*member.prefix, *cmd], stdout=log_file, stderr=subprocess.STDOUT
                )
            except OSError as exc:
                raise RuntimeError(f"cannot start ZooKeeper ({' '.join(cmd)}): {exc}") from exc

    def kill(self, myid: int) -> None:
        """SIGKILL server ``myid`` and reap it."""
        member = self.member(myid)
        if member.proc is not None:
            member.proc.kill()
            member.proc.wait()
            member.proc = None

    def stop(self) -> None:
        """Every server stopped (SIGTERM, SIGKILL after 10 s) and reaped."""
        for member in self.members:
            if member.running() and member.proc is not None:
                member.proc.terminate()
        for member in self.members:
            if member.proc is None:
                continue
            try:
                member.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                member.proc.kill()
                member.proc.wait()
            member.proc = None

    def member(self, myid: int) -> EnsembleMember:
        for member in self.members:
            if member.myid == myid:
                return member
        raise KeyError(f"no ZooKeeper server {myid} in the ensemble")

    def serving(self) -> list[int]:
        """The servers that serve clients now (leader, followers, or the standalone one)."""
        return [m.myid for m in self.members if m.mode() is not None]

    def wait_serving(
        self, myids: Sequence[int] | None = None, timeout: float | None = None
    ) -> None:
        """Until a quorum serves (or, given ``myids``, each of them does); ``RuntimeError``
        with the last lines of a server's log past ``timeout``."""
        deadline = time.monotonic() + (self.startup_timeout if timeout is None else timeout)
        while True:
            serving = self.serving()
            if (
                (set(myids) <= set(serving))
                if myids is not None
                else len(serving) > len(self.members) // 2
            ):
                return
            for member in self.members:
                if member.proc is not None and member.proc.poll() is not None:
                    raise RuntimeError(
                        self._failure(member, f"exited with code {member.proc.poll()}")
                    )
            if time.monotonic() > deadline:
                late = next(m for m in self.members if m.myid not in serving)
                raise RuntimeError(
                    self._failure(
                        late, f"not serving after {timeout or self.startup_timeout:.0f} s"
                    )
                )
            time.sleep(0.2)

    def _failure(self, member: EnsembleMember, what: str) -> str:
        log = member.data_dir / "zookeeper.log"
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        return f"ZooKeeper server {member.myid} at {member.address} {what} (log: {log})\n{tail}"


@contextlib.contextmanager
def running_ensemble(
    data_root: Path,
    hosts: Sequence[str],
    *,
    port: int = 2181,
    quorum_port: int = 2888,
    election_port: int = 3888,
    prefixes: Sequence[Sequence[str]] = (),
    tick_ms: int = 250,
    startup_timeout: float = 60.0,
) -> Iterator[ZooKeeperEnsemble]:
    """ZooKeeper servers ``1..len(hosts)`` as one ensemble for the ``with``, ready once a
    quorum serves clients; stopped and reaped after, whatever happened. Server ``i`` listens
    on ``hosts[i-1]`` (each host its own address: a network namespace, or 127.0.0.N on
    loopback) and runs through ``prefixes[i-1]`` (``ip netns exec NS``). Its directory is
    ``data_root/zk<i>`` (``zoo.cfg``, ``zookeeper.log``, ``data/myid``)."""
    install = find_zookeeper()
    if isinstance(install, str):
        raise RuntimeError(install)
    if len(set(hosts)) != len(hosts):
        raise ValueError("each server of an ensemble needs an address of its own")
    members = [
        EnsembleMember(
            i,
            host,
            port,
            quorum_port,
            election_port,
            data_root / f"zk{i}",
            prefixes[i - 1] if prefixes else (),
        )
        for i, host in enumerate(hosts, 1)
    ]
    ensemble = ZooKeeperEnsemble(install, members, tick_ms, startup_timeout)
    try:
        for member in members:
            ensemble.start(member.myid)
        ensemble.wait_serving()
        yield ensemble
    finally:
        ensemble.stop()
