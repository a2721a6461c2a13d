"""Upstream's bookie in a node of the run: its ``bk_server.conf``, its command, the cluster's
formatting by upstream's own shell, and its start (readiness: its port accepts connections).

An upstream bookie is held as a :class:`~bookiesim.cluster.processes.LocalBookie` like
bookiesim's, so the nemesis signals, kills and restarts both kinds the same way; its output
goes to ``bookie.log`` in its directory (it prints no ready line: the harness waits for its
port, then for its registration, as for every bookie).
"""

from __future__ import annotations

import socket
import subprocess
import time
from typing import TYPE_CHECKING

from bookiesim.chaos.upstream.cluster import upstream_metadata_uri
from bookiesim.cluster.processes import ClusterError, LocalBookie
from bookiesim.upstream.installation import BOOKIE_JAVA_OPTS, java_command, tail, write_conf

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

__all__ = [
    "JAVA_OPTS",
    "init_cluster",
    "init_cluster_argv",
    "settings_of",
    "spawn_upstream_bookie",
    "upstream_bookie_argv",
    "upstream_conf",
    "wait_accepting",
]

JAVA_OPTS = (*(o for o in BOOKIE_JAVA_OPTS if not o.startswith(("-Xms", "-Xmx"))), "-Xmx512m")
"""Upstream's own bookie options (``bin/common.sh``) with a smaller heap: four or five JVMs
share the machine with the harness, the ZooKeeper servers and the workloads."""
SERVER_MAIN = "org.apache.bookkeeper.server.Main"
SHELL_MAIN = "org.apache.bookkeeper.bookie.BookieShell"
START_TIMEOUT = 120.0


def upstream_conf(
    *,
    address: str,
    port: int,
    metadata_uri: str,
    journal: Path,
    ledgers: Path,
    settings: Mapping[str, object],
) -> dict[str, object]:
    """Upstream keys for a bookie registered as ``address:port``, with the settings
    bookiesim's bookies of the run have (entry log per ledger, the flush interval), the
    auto-recovery left to the run's own daemons, and ``settings`` over them."""
    return {
        "bookiePort": port,
        "advertisedAddress": address,
        "useHostNameAsBookieID": "false",
        "metadataServiceUri": upstream_metadata_uri(metadata_uri),
        "zkTimeout": 5000,
        "journalDirectories": journal,
        "ledgerDirectories": ledgers,
        "entryLogPerLedgerEnabled": "true",
        "flushInterval": 10_000,
        "httpServerEnabled": "false",
        "autoRecoveryDaemonEnabled": "false",
        **settings,
    }


def settings_of(pairs: Sequence[str]) -> dict[str, str]:
    """``key=value`` settings (the run's: disk thresholds, the checkpoint interval) as a
    mapping for :func:`upstream_conf`; their keys are upstream's own names."""
    return dict(pair.split("=", 1) for pair in pairs)


def upstream_bookie_argv(home: Path, work: Path, conf: Path) -> list[str]:
    return java_command(home, work, JAVA_OPTS, SERVER_MAIN, "--conf", str(conf))


def init_cluster_argv(home: Path, work: Path, conf: Path) -> list[str]:
    """Upstream's ``initnewcluster``: the metadata layout its bookies refuse to start
    without (bookiesim's bookies accept it as their own)."""
    return java_command(home, work, ("-Xmx256m",), SHELL_MAIN, "-conf", str(conf), "initnewcluster")


def init_cluster(home: Path, work: Path, conf: Path, prefix: Sequence[str]) -> None:
    """Run ``initnewcluster`` (in a node: ``prefix``); ``ClusterError`` with its output when
    it fails."""
    argv = [*prefix, *init_cluster_argv(home, work, conf)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise ClusterError(
            f"upstream initnewcluster failed (exit {done.returncode}): " + " | ".join(output)
        )


def spawn_upstream_bookie(
    name: str, root: Path, conf: Mapping[str, object], home: Path, prefix: Sequence[str]
) -> LocalBookie:
    """Write ``root/bk_server.conf`` and start ``server.Main`` (after ``prefix``, which must
    exec it, so that the pid is the JVM's and signals reach it)."""
    root.mkdir(parents=True, exist_ok=True)
    path = write_conf(root / "bk_server.conf", conf)
    argv = [*prefix, *upstream_bookie_argv(home, root, path)]
    with (root / "bookie.log").open("ab") as log:
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            raise ClusterError(f"cannot start upstream's bookie {name}: {exc}") from exc
    return LocalBookie(name, root, proc, bookie_port=int(str(conf["bookiePort"])))


def _accepts(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1.0):
            return True
    except OSError:
        return False


def wait_accepting(
    bookies: Sequence[tuple[LocalBookie, str]], timeout: float = START_TIMEOUT
) -> None:
    """Until each ``(bookie, address)`` accepts connections on its port; ``ClusterError``
    naming the first that exited or ran out of time, with the end of its log."""
    deadline = time.monotonic() + timeout
    for bookie, address in bookies:
        while not _accepts(address, bookie.bookie_port):
            code = bookie.proc.poll()
            if code is not None or time.monotonic() > deadline:
                state = f"exit code {code}" if code is not None else f"not within {timeout:.0f} s"
                raise ClusterError(
                    f"upstream's bookie {bookie.name} did not accept connections on "
                    f"{address}:{bookie.bookie_port} ({state}); log {bookie.log_path}:\n"
                    f"{tail(bookie.log_path, 15)}"
                )
            time.sleep(0.2)
