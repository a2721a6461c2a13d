"""The run's processes in their nodes: the bookies (``b1``..``bN``) and the auto-recovery
daemons (``ar1``, ``ar2``), how they start, how the faults hurt them, how they stop.

Bookies run with ``autoRecoveryDaemonEnabled=false``: auto-recovery (the auditor election and
the replication workers) runs in ``bookiesim autorecovery`` processes of its own, as upstream's
``AutoRecoveryMain`` on separate hosts, so a fault can take a bookie or an auto-recovery
daemon away without the other. Both kinds are ``spawn_bookie`` children (their own session,
stdout a pipe for the JSON ready line, stderr into ``<dir>/bookie.log``) and both stop with
SIGTERM, SIGKILL after 20 s, on every exit path of the harness.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bookiesim.chaos.target import CURRENT, Target
from bookiesim.chaos.upstream.bookies import (
    init_cluster,
    settings_of,
    spawn_upstream_bookie,
    upstream_conf,
    wait_accepting,
)
from bookiesim.cluster.processes import (
    ClusterError,
    LocalBookie,
    bookie_settings,
    spawn_bookie,
    stop_bookies,
    wait_ready,
)
from bookiesim.upstream.installation import write_conf

if TYPE_CHECKING:
    from bookiesim.chaos.lazyfs.mount import LazyMount
    from bookiesim.chaos.netns import LiveNetwork
    from bookiesim.chaos.upstream.cluster import BookieKind

__all__ = [
    "AUTORECOVERY_NODES",
    "AUTORECOVERY_PROGRAM",
    "BOOKIE_PORT",
    "DISK_BYTES",
    "DISK_SETTINGS",
    "AutoRecoveryDaemons",
    "Bookies",
]

BOOKIE_PORT = 3181
AUTORECOVERY_NODES = ("ar1", "ar2")
"""Two daemons: one wins the auditor election, the other takes over when it goes."""
AUTORECOVERY_PROGRAM = (sys.executable, "-m", "bookiesim", "autorecovery")
DISK_BYTES = 256 << 20
"""The size of each bookie's ledger disk (a tmpfs) when the ``disk`` family runs."""
DISK_SETTINGS = ("diskCheckInterval=500", "diskUsageThreshold=0.90", "diskUsageLwmThreshold=0.80")
"""Fast disk checks; read-only above 90 % used, writable again below 80 %."""
STOP_SECONDS = 20


def _signal(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if proc.poll() is not None:
        return  # reaped: its pid may be another process's by now
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)


def _kill9(proc: subprocess.Popen[bytes]) -> None:
    _signal(proc, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


def _stop(procs: list[LocalBookie]) -> None:
    """SIGCONT first (a paused one cannot take SIGTERM), then the cluster's own stop:
    SIGTERM, SIGKILL past the timeout."""
    for child in procs:
        _signal(child.proc, signal.SIGCONT)
    stop_bookies(procs, STOP_SECONDS)


@dataclass
class Bookies:
    """The run's bookie processes by node, and how to hurt them."""

    live: LiveNetwork
    root: Path
    uri: str
    extra: list[str] = field(default_factory=list)
    target: Target = CURRENT
    """The bookiesim the bookies run (``--bookiesim-from``)."""
    small_disks: bool = False
    """Each ledger directory on a tmpfs of :data:`DISK_BYTES` (the ``disk`` family)."""
    kinds: dict[str, BookieKind] = field(default_factory=dict)
    """Whose bookie each node runs (``--cluster``); a node not named runs bookiesim's."""
    home: Path | None = None
    """Upstream's installation, for the nodes that run its bookie."""
    procs: dict[str, LocalBookie] = field(default_factory=dict)
    mounts: list[Path] = field(default_factory=list)
    lazy: dict[str, LazyMount] = field(default_factory=dict)
    """Each bookie's lazy disk (the ``power`` family): its journal and ledgers are there."""

    @property
    def ids(self) -> dict[str, str]:
        """Node name by bookie id."""
        return {f"{self.live.net.address(n)}:{BOOKIE_PORT}": n for n in self.procs}

    def _settings(self, node: str) -> list[str]:
        address = self.live.net.address(node)
        return bookie_settings(
            self.root / node,
            f"metadataServiceUri={self.uri}",
            f"bookieAddress={address}",
            f"bookiePort={BOOKIE_PORT}",
            "autoRecoveryDaemonEnabled=false",
            *(DISK_SETTINGS if self.small_disks else ()),
            *self.extra,
            *self._lazy_dirs(node),
        )

    def _lazy_dirs(self, node: str) -> list[str]:
        if node not in self.lazy:
            return []
        mnt = self.lazy[node].mountpoint
        return [f"journalDirectory={mnt}/journal", f"ledgerDirectories={mnt}/ledgers"]

    def mount_disks(self, nodes: list[str]) -> None:
        for node in nodes:
            where = self.root / node / "ledgers"
            where.mkdir(parents=True)
            # The source names the run, so that `chaos cleanup` finds what a killed run left.
            source = f"{self.live.net.hub}-{node}"
            argv = ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", source, str(where)]
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise OSError(f"mount -t tmpfs at {where} failed: {done.stderr.strip()}")
            self.mounts.append(where)

    def unmount_disks(self) -> None:
        for where in self.mounts:
            # Lazy: a bookie killed a moment ago may still hold a file open.
            subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)
        self.mounts.clear()

    def fill(self, node: str) -> None:
        """A filler file that takes ``node``'s ledger disk to 95 % used."""
        disk = self.root / node / "ledgers"
        st = os.statvfs(disk)
        missing = int((0.95 - (1.0 - st.f_bavail / st.f_blocks)) * DISK_BYTES)
        with (disk / "filler").open("ab") as f:
            f.write(bytes(max(0, missing)))

    def free(self, node: str) -> None:
        (self.root / node / "ledgers" / "filler").unlink(missing_ok=True)

    def start(self, nodes: list[str], *, again: bool = False) -> None:
        upstream = [n for n in nodes if self.kinds.get(n) == "upstream"]
        if upstream and not again:
            self._format_for_upstream(upstream[0])
        started = []
        for node in nodes:
            if node in upstream:
                self.procs[node] = self._start_upstream(node)
                continue
            refused = self.target.unknown_keys(self._settings(node))
            if refused:
                raise ClusterError(
                    f"{self.target.describe()} does not know the setting(s) "
                    f"{', '.join(refused)} this run needs (a family or bug switch added later)"
                )
            program = self.live.net.exec_argv(node, self.target.bookie_program())
            bookie = spawn_bookie(
                node,
                self.root / node,
                self._settings(node),
                program=program,
                new_root=not (again or self.small_disks or bool(self.lazy)),
            )
            self.procs[node] = bookie
            started.append(bookie)
        wait_ready(started, 60)
        wait_accepting([(self.procs[n], self.live.net.address(n)) for n in upstream])

    def _upstream_conf(self, node: str) -> dict[str, object]:
        where = Path(self.lazy[node].mountpoint) if node in self.lazy else self.root / node
        assert self.home is not None
        return upstream_conf(
            address=self.live.net.address(node),
            port=BOOKIE_PORT,
            metadata_uri=self.uri,
            journal=where / "journal",
            ledgers=where / "ledgers",
            settings=settings_of([*(DISK_SETTINGS if self.small_disks else ()), *self.extra]),
        )

    def _format_for_upstream(self, node: str) -> None:
        """Upstream's ``initnewcluster`` (from ``node``), which its bookies need first."""
        assert self.home is not None
        work = self.root / "upstream-init"
        work.mkdir(parents=True, exist_ok=True)
        conf = write_conf(work / "bk_server.conf", self._upstream_conf(node))
        init_cluster(self.home, work, conf, self.live.net.exec_argv(node, []))

    def _start_upstream(self, node: str) -> LocalBookie:
        assert self.home is not None
        prefix = self.live.net.exec_argv(node, [])
        return spawn_upstream_bookie(
            node, self.root / node, self._upstream_conf(node), self.home, prefix
        )

    def signal(self, node: str, sig: signal.Signals) -> None:
        _signal(self.procs[node].proc, sig)

    def kill9(self, node: str) -> None:
        _kill9(self.procs[node].proc)

    def stop_all(self) -> None:
        _stop(list(self.procs.values()))


@dataclass
class AutoRecoveryDaemons:
    """``bookiesim autorecovery`` processes by node (``ar1``, ``ar2``), each in its namespace
    and voting with its node's address (``bookieAddress``); their logs in ``root/<node>/``."""

    live: LiveNetwork
    root: Path
    uri: str
    procs: dict[str, LocalBookie] = field(default_factory=dict)

    def _settings(self, node: str) -> list[str]:
        address = self.live.net.address(node)
        return [
            f"metadataServiceUri={self.uri}",
            f"bookieAddress={address}",
            f"bookiePort={BOOKIE_PORT}",
            "httpServerHost=127.0.0.1",
            "httpServerPort=0",
        ]

    def start(self, nodes: list[str] | tuple[str, ...], *, again: bool = False) -> None:
        started = []
        for node in nodes:
            program = self.live.net.exec_argv(node, AUTORECOVERY_PROGRAM)
            daemon = spawn_bookie(
                node, self.root / node, self._settings(node), program=program, new_root=not again
            )
            self.procs[node] = daemon
            started.append(daemon)
        wait_ready(started, 60)

    def signal(self, node: str, sig: signal.Signals) -> None:
        _signal(self.procs[node].proc, sig)

    def kill9(self, node: str) -> None:
        _kill9(self.procs[node].proc)

    def stop_all(self) -> None:
        _stop(list(self.procs.values()))
