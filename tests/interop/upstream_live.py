"""Run upstream Apache BookKeeper beside bookiesim, for the live conformance checks.

An installation is whatever ``BOOKKEEPER_HOME`` names: a directory with ``lib/*.jar`` (the
binary distribution, or a build's ``lib``), run with the ``java`` on ``PATH`` (17 or later);
finding it and the ``java`` command line are :mod:`bookiesim.upstream.installation`'s, shared with
``bookiesim bench compare``. Nothing of upstream's is kept in this repository: its bookie runs
as ``server.Main``, its auto-recovery (auditor and replication worker) as
``replication.AutoRecoveryMain --conf``, its client as ``BookieShell`` commands
(``simpletest`` writes, reads back and closes a ledger; ``readledger`` reads, ``-r`` first
recovers, ``-b`` asks one bookie only; ``initnewcluster`` formats the root;
``listunderreplicated`` and ``whoisauditor`` read auto-recovery's records).

bookiesim runs as its own processes: ``bookiesim bookie``, ``bookiesim autorecovery`` and
``bookiesim ledger``. The root is read directly (kazoo, decoded with bookiesim's codecs) to
watch auto-recovery: who votes, which ledgers are marked, which bookies each ledger names.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from bookiesim.metadata.ledger_paths import ledger_path
from bookiesim.metadata.ledgers import LedgerMetadata
from bookiesim.metadata.testing import free_port
from bookiesim.metadata.underreplication_format import decode_mark, decode_vote, ledger_id_of_mark
from bookiesim.upstream import installation as upstream
from bookiesim.upstream.installation import tail

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from pathlib import Path

HOST = "127.0.0.1"
START_TIMEOUT = 60.0
"""Seconds a bookie of either kind has to register (a cold JVM takes several)."""
SHELL_TIMEOUT = 120.0
AUTORECOVERY = {
    "lostBookieRecoveryDelay": 0,
    "auditorPeriodicCheckInterval": 0,
    "auditorPeriodicBookieCheckInterval": 0,
    "openLedgerRereplicationGracePeriod": 1000,
    "lockReleaseOfFailedLedgerGracePeriod": 1000,
}
"""Auto-recovery settings of the live checks (upstream's keys and units): act on a lost bookie
at once, no periodic checks, and retry a ledger that could not be replicated after a second
(upstream's default holds its lock for five minutes)."""


def installation() -> Path | str:
    """``BOOKKEEPER_HOME`` as a usable installation, or why not (the skip reason)."""
    return upstream.installation()


@dataclass
class Root:
    """One ledgers root in the test ZooKeeper: ``zk://HOSTS/PATH``, upstream's meaning."""

    hosts: str
    path: str

    @classmethod
    def fresh(cls, hosts: str, prefix: str) -> Root:
        """A new ledgers root ``/PREFIX-<random>/ledgers``; its parent made, as an operator's
        chroot would be (upstream's ``initnewcluster`` makes the root itself)."""
        parent = f"/{prefix}-{uuid.uuid4().hex[:8]}"
        root = cls(hosts, f"{parent}/ledgers")
        zk = root.zk()
        try:
            zk.ensure_path(parent)
        finally:
            zk.stop()
            zk.close()
        return root

    @property
    def uri(self) -> str:
        return f"zk://{self.hosts}{self.path}"

    def zk(self) -> KazooClient:
        client = KazooClient(hosts=self.hosts)
        client.start(timeout=15)
        return client

    def registered(self) -> set[str]:
        client = self.zk()
        try:
            path = f"{self.path}/available"
            names = client.get_children(path) if client.exists(path) else []
            return {n for n in names if n != "readonly"}
        finally:
            client.stop()
            client.close()

    def wait_registered(self, bookie_id: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        wait_for(
            lambda: bookie_id in self.registered(), f"bookie {bookie_id} to register", proc, log
        )

    # -- auto-recovery's records, read as upstream's tools read them ---------------------

    @property
    def underreplication(self) -> str:
        return f"{self.path}/underreplication"

    def votes(self) -> list[str]:
        """The auditor election's votes (``V_NNNNNNNNNN``), lowest first."""
        return sorted(self._children(f"{self.underreplication}/auditorelection"))

    def marks(self) -> dict[int, tuple[str, ...]]:
        """Every under-replicated ledger and the replicas its mark names."""
        found: dict[int, tuple[str, ...]] = {}
        client = self.zk()
        try:
            level = [f"{self.underreplication}/ledgers"]
            for _ in range(4):
                level = [f"{p}/{c}" for p in level for c in _children(client, p)]
            for parent in level:
                for name in _children(client, parent):
                    ledger_id = ledger_id_of_mark(name)
                    data = _data(client, f"{parent}/{name}")
                    if ledger_id is not None and data is not None:
                        found[ledger_id] = decode_mark(data, f"{parent}/{name}")[0]
        finally:
            client.stop()
            client.close()
        return found

    def auditor(self) -> str | None:
        """The bookie id in the lowest vote (who is auditor, as upstream's tools read it)."""
        votes = self.votes()
        if not votes:
            return None
        path = f"{self.underreplication}/auditorelection/{votes[0]}"
        client = self.zk()
        try:
            data = _data(client, path)
        finally:
            client.stop()
            client.close()
        return None if data is None else decode_vote(data, path)

    def locks(self) -> list[str]:
        return self._children(f"{self.underreplication}/locks")

    def ledger(self, ledger_id: int) -> LedgerMetadata:
        client = self.zk()
        try:
            data = _data(client, ledger_path(ledger_id, self.path))
        finally:
            client.stop()
            client.close()
        assert data is not None, f"ledger {ledger_id} has no metadata"
        return LedgerMetadata.from_bytes(data)

    def _children(self, path: str) -> list[str]:
        client = self.zk()
        try:
            return _children(client, path)
        finally:
            client.stop()
            client.close()


def _children(client: KazooClient, path: str) -> list[str]:
    try:
        return list(client.get_children(path))
    except NoNodeError:
        return []


def _data(client: KazooClient, path: str) -> bytes | None:
    try:
        data, _ = client.get(path)
    except NoNodeError:
        return None
    return bytes(data)


def wait_for(
    condition: Callable[[], bool],
    what: str,
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
    timeout: float = START_TIMEOUT,
) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` (and the tail of ``log``) on a
    timeout or when ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while not condition():
        detail = "" if log is None else ":\n" + tail(log)
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode} waiting for {what}{detail}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
        time.sleep(0.2)


JVM_SIGTERM_EXIT = 128 + signal.SIGTERM
"""A JVM's exit status after SIGTERM, when its shutdown hooks have run (upstream's bookie
closes itself in one): 143, not 0."""
EXPECTED_STOP_EXIT = {"bookiesim": 0, "upstream": JVM_SIGTERM_EXIT}
"""The exit code of a bookie of each kind that stopped as it should after SIGTERM."""


def stop_problem(kind: str, code: int | None, timeout: float) -> str | None:
    """What was wrong with how a bookie of ``kind`` ended after SIGTERM (``code`` None: it
    had not exited after ``timeout`` seconds), or None if it stopped as it should.

    Judged by the exit code alone: upstream's JVM exits :data:`JVM_SIGTERM_EXIT` only once
    its shutdown hooks (the bookie's close among them) have finished. Whether the hook's
    last log line ("... successfully. Exiting.") reaches the log before the JVM halts varies
    between builds of the same release, so it proves nothing either way; what the stopped
    bookie left behind is proven by the data the next bookie reads from its directories. A
    negative code is :class:`subprocess.Popen`'s for a death by a signal the process did
    not handle (a JVM that ran no shutdown hook)."""
    expected = EXPECTED_STOP_EXIT[kind]
    if code is None:
        return f"the {kind} bookie had not exited {timeout:.0f} s after SIGTERM"
    if code == expected:
        return None
    if code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with {code}"
    return f"the {kind} bookie {how} after SIGTERM, not {expected}"


@dataclass
class Bookie:
    """A running bookie of either kind; ``dirs`` survive it, for a hand-over."""

    kind: str
    port: int
    dirs: Path
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def bookie_id(self) -> str:
        return f"{HOST}:{self.port}"

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, as a service manager stops it; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def stop_cleanly(self, timeout: float = 60) -> None:
        """:meth:`stop`; fail, with the end of the bookie's log, unless it exited as it
        should (:func:`stop_problem`)."""
        try:
            code: int | None = self.stop(timeout)
        except subprocess.TimeoutExpired:
            code = None  # _started kills it on leaving
        problem = stop_problem(self.kind, code, timeout)
        if problem is not None:
            raise AssertionError(f"{problem}; {self.log} ends:\n{tail(self.log)}")


@dataclass
class Process:
    """A started process of either kind (an auto-recovery daemon), its output in ``log``."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    bookie_id: str | None = None
    """The id it votes with, when the test chose it."""

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)


@contextmanager
def _started(
    name: str,
    command: list[str],
    where: Upstream | Bookiesim,
    ready: Callable[[subprocess.Popen[bytes], Path], None],
) -> Iterator[Process]:
    """Start a process of either kind, its output in ``WORK/NAME.log``; yield it once
    ``ready`` returns, and kill it on leaving if it still runs."""
    log = where.work / f"{name}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        ready(proc, log)
        yield Process(name, proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextmanager
def _registered_bookie(
    kind: str, name: str, command: list[str], port: int, dirs: Path, where: Upstream | Bookiesim
) -> Iterator[Bookie]:
    """Start a bookie of either kind; yield it once it has registered under the root."""
    bookie_id = f"{HOST}:{port}"

    def registered(proc: subprocess.Popen[bytes], log: Path) -> None:
        where.root.wait_registered(bookie_id, proc, log)

    with _started(name, command, where, registered) as started:
        yield Bookie(kind, port, dirs, started.proc, started.log)


@contextmanager
def _voting_autorecovery(
    name: str, command: list[str], where: Upstream | Bookiesim
) -> Iterator[Process]:
    """Start an auto-recovery daemon of either kind; yield it once it has entered the
    auditor election (a new vote under ``underreplication/auditorelection``)."""
    before = set(where.root.votes())

    def voted(proc: subprocess.Popen[bytes], log: Path) -> None:
        wait_for(lambda: bool(set(where.root.votes()) - before), f"{name} to vote", proc, log)

    with _started(name, command, where, voted) as started:
        yield started


@dataclass
class Upstream:
    """Upstream's jars, run as bookies and shell commands against one root."""

    home: Path
    root: Root
    work: Path
    java_opts: Sequence[str] = field(default_factory=lambda: ("-Xmx512m",))

    def _java(self, main: str, *args: str) -> list[str]:
        return upstream.java_command(self.home, self.work, self.java_opts, main, *args)

    def conf(self, name: str, port: int, dirs: Path, **extra: object) -> Path:
        """A bk_server.conf as the vectors' bookies ran, pointed at this root."""
        settings: dict[str, object] = {
            "bookiePort": port,
            "advertisedAddress": HOST,
            "allowLoopback": "true",
            "useHostNameAsBookieID": "false",
            "metadataServiceUri": self.root.uri,
            "journalDirectories": dirs / "journal",
            "ledgerDirectories": dirs / "ledgers",
            "ledgerStorageClass": "org.apache.bookkeeper.bookie.SortedLedgerStorage",
            "entryLogPerLedgerEnabled": "true",
            "journalSyncData": "true",
            "httpServerEnabled": "false",
            "autoRecoveryDaemonEnabled": "false",
            "journalPreAllocSizeMB": 1,
            **extra,
        }
        path = self.work / f"{name}.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return path

    def init_cluster(self) -> None:
        """``initnewcluster``: LAYOUT, INSTANCEID and the empty parents, as upstream writes
        them."""
        self.shell("initnewcluster")

    @contextmanager
    def bookie(
        self,
        name: str,
        port: int | None = None,
        dirs: Path | None = None,
        keys: Mapping[str, object] | None = None,
    ) -> Iterator[Bookie]:
        """``keys``: more upstream keys for its bk_server.conf (TLS, authorization)."""
        port = port or free_port(HOST)
        dirs = dirs or self.work / name
        conf = self.conf(name, port, dirs, **(keys or {}))
        command = self._java("org.apache.bookkeeper.server.Main", "--conf", str(conf))
        with _registered_bookie("upstream", name, command, port, dirs, self) as bookie:
            yield bookie

    @contextmanager
    def autorecovery(self, name: str, **settings: object) -> Iterator[Process]:
        """Upstream's ``AutoRecoveryMain`` (auditor candidate and replication worker) with
        :data:`AUTORECOVERY` and ``settings``; its id is ``HOST:port`` of a free port."""
        port = free_port(HOST)
        conf = self.conf(name, port, self.work / name, **{**AUTORECOVERY, **settings})
        command = self._java(
            "org.apache.bookkeeper.replication.AutoRecoveryMain", "--conf", str(conf)
        )
        with _voting_autorecovery(name, command, self) as process:
            process.bookie_id = f"{HOST}:{port}"
            yield process

    def shell(
        self,
        *args: str,
        v2: bool = False,
        timeout: float = SHELL_TIMEOUT,
        client_keys: Mapping[str, object] | None = None,
    ) -> str:
        """Run a ``BookieShell`` command as a client of this root; its output, which must
        not report a failure (the shell exits 0 even when a client command failed).
        ``client_keys``: more upstream client keys (TLS)."""
        conf = self.conf(
            "shell",
            0,
            self.work / "shell",
            useV2WireProtocol=str(v2).lower(),
            **(client_keys or {}),
        )
        done = subprocess.run(
            self._java("org.apache.bookkeeper.bookie.BookieShell", "-conf", str(conf), *args),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        out = done.stdout + done.stderr
        if done.returncode != 0 or "Failed to process command" in out:
            raise AssertionError(
                f"upstream shell {' '.join(args)} failed ({done.returncode}):\n{out[-4000:]}"
            )
        return out

    def simpletest(
        self,
        ensemble: int,
        write: int,
        ack: int,
        entries: int,
        *,
        v2: bool,
        client_keys: Mapping[str, object] | None = None,
    ) -> str:
        """Upstream's client creates a ledger, writes ``entries``, reads them back
        unconfirmed, closes, reads them confirmed, and deletes the ledger."""
        out = self.shell(
            "simpletest", "-e", str(ensemble), "-w", str(write), "-a", str(ack),
            "-n", str(entries), v2=v2, client_keys=client_keys,
        )  # fmt: skip
        assert f"{entries} entries written to ledger" in out, out[-4000:]
        return out

    def read_ledger(
        self,
        ledger_id: int,
        *,
        recover: bool = False,
        v2: bool = False,
        bookie: str | None = None,
        last: int | None = None,
    ) -> list[int]:
        """Entry ids upstream's client reads from the ledger (``-r``: open with recovery;
        ``bookie``: ask that bookie alone, entry by entry up to ``last``)."""
        args = ["readledger", "-l", str(ledger_id), "-fe", "0"]
        if recover:
            args.append("-r")
        if bookie is not None:
            args += ["-b", bookie]
        if last is not None:
            args += ["-le", str(last)]
        out = self.shell(*args, v2=v2)
        return [int(m) for m in re.findall(r"Lid=\S+, Eid=(-?\d+)", out)]

    def list_under_replicated(self) -> dict[int, list[str]]:
        """``listunderreplicated -pmr``: each marked ledger and its missing replicas, as
        upstream's tool reads the marks."""
        out = self.shell("listunderreplicated", "-pmr")
        found: dict[int, list[str]] = {}
        current: list[str] | None = None
        for line in out.splitlines():
            message = line.split(" - ", 1)[1] if " - " in line else line
            if re.fullmatch(r"\d+", message.strip()):
                current = found.setdefault(int(message.strip()), [])
            elif (
                missing := re.match(r"\s*MissingReplica : (\S+)", message)
            ) and current is not None:
                current.append(missing[1])
        count = re.search(r"Under replicated ledger count: (\d+)", out)
        assert count is not None, out[-4000:]
        assert int(count[1]) == len(found), out[-4000:]
        return found

    def who_is_auditor(self) -> str | None:
        out = self.shell("whoisauditor")
        found = re.search(r"Auditor: (\S+)", out)
        return None if found is None else found[1]


@dataclass
class Bookiesim:
    """bookiesim's bookie and CLI client against the same root."""

    root: Root
    work: Path

    @contextmanager
    def bookie(
        self,
        name: str,
        port: int | None = None,
        dirs: Path | None = None,
        keys: Mapping[str, object] | None = None,
    ) -> Iterator[Bookie]:
        """``keys``: more upstream keys, as ``--set`` (TLS, authorization); they win over
        the defaults here, as the upstream bookie's ``keys`` do over its conf's."""
        port = port or free_port(HOST)
        dirs = dirs or self.work / name
        settings = [
            f"bookiePort={port}",
            f"bookieAddress={HOST}",
            "httpServerPort=0",
            f"metadataServiceUri={self.root.uri}",
            f"journalDirectory={dirs / 'journal'}",
            f"ledgerDirectories={dirs / 'ledgers'}",
            "journalPreAllocSizeMB=1",
            "flushInterval=1000",
        ] + [f"{key}={value}" for key, value in (keys or {}).items()]
        args = [sys.executable, "-m", "bookiesim", "bookie"]
        for setting in settings:
            args += ["--set", setting]
        with _registered_bookie("bookiesim", name, args, port, dirs, self) as bookie:
            yield bookie

    @contextmanager
    def autorecovery(self, name: str, **settings: object) -> Iterator[Process]:
        """``bookiesim autorecovery`` (auditor candidate and replication worker) with
        :data:`AUTORECOVERY` and ``settings``, as ``--set`` upstream keys."""
        values: Mapping[str, object] = {
            "metadataServiceUri": self.root.uri,
            "httpServerPort": 0,
            **AUTORECOVERY,
            **settings,
        }
        args = [sys.executable, "-m", "bookiesim", "autorecovery"]
        for key, value in values.items():
            args += ["--set", f"{key}={value}"]
        with _voting_autorecovery(name, args, self) as process:
            yield process

    def ledger(self, *args: str, v2: bool = False, stdin: str | None = None) -> str:
        cmd = [sys.executable, "-m", "bookiesim", "ledger", *args]
        cmd += ["--metadata", self.root.uri]
        if v2:
            cmd += ["--use-v2-wire-protocol"]
        done = subprocess.run(
            cmd, input=stdin, capture_output=True, text=True, timeout=SHELL_TIMEOUT, check=False
        )
        if done.returncode != 0:
            raise AssertionError(f"bookiesim ledger {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def write_ledger(
        self, ensemble: int, write: int, ack: int, entries: int, *, v2: bool = False
    ) -> int:
        ledger_id = int(
            self.ledger("create", "-e", str(ensemble), "-w", str(write), "-a", str(ack), v2=v2)
        )
        self.ledger("write", str(ledger_id), "--count", str(entries), "--size", "100", v2=v2)
        return ledger_id

    def read_ids(self, ledger_id: int, *, v2: bool = False) -> list[int]:
        import json

        out = self.ledger("read", str(ledger_id), "--json", v2=v2)
        return [int(json.loads(line)["entryId"]) for line in out.splitlines() if line.strip()]
