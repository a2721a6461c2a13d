"""Upstream's bookie for a benchmark, from an installation
(:mod:`bookiesim.upstream.installation` finds it and writes its command lines).

For a benchmark, :func:`upstream_bookie` runs one bookie (``org.apache.bookkeeper.server.Main``)
the way an operator would: its own ZooKeeper (upstream's bookie cannot start without a
metadata service; the server is the ZooKeeper jar upstream ships in ``lib/``, run by
:mod:`bookiesim.metadata.testing`), a root formatted by upstream's own ``initnewcluster``, and
a ``bk_server.conf`` of upstream keys. It is ready once its port accepts connections.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bookiesim.metadata.testing import find_zookeeper, free_port, running_zookeeper
from bookiesim.upstream.installation import BOOKIE_JAVA_OPTS, java_command, tail, write_conf

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from pathlib import Path

__all__ = ["UpstreamBookie", "upstream_bookie", "zookeeper_for"]

HOST = "127.0.0.1"
START_TIMEOUT = 120.0
"""Seconds an upstream bookie has to accept connections (a cold JVM on a busy machine)."""


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


@contextmanager
def zookeeper_for(home: Path, work: Path) -> Iterator[str]:
    """A ZooKeeper for upstream's bookie (or for bookiesim's, when upstream's client is the
    load): the one this machine has, else the jar upstream ships; yields its ``host:port``."""
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
    metadata_uri: str
    """Its ``metadataServiceUri``: where a client finds it."""

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
    with zookeeper_for(home, root) as hosts:
        port = free_port(HOST)
        metadata_uri = f"zk://{hosts}/ledgers"
        conf = write_conf(
            root / "bk_server.conf",
            {
                "bookiePort": port,
                "advertisedAddress": HOST,
                "allowLoopback": "true",
                "useHostNameAsBookieID": "false",
                "metadataServiceUri": metadata_uri,
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
        bookie = UpstreamBookie(port, proc, root, log, metadata_uri)
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
