"""The simulated cluster: real bookies on the simulated disk and network, one metadata store.

Each :class:`SimBookie` runs the project's :class:`~bookiesim.bookie.bookie.Bookie` (journal,
entry logs, index, checkpoints, GC) with its v3 request handling, but no TCP listener: the
:class:`~bookiesim.sim.network.SimNetwork` hands it the bookie end of each connection
and the bookie's own :meth:`~bookiesim.bookie.server.BookieServer.handle_connection` serves
it. A bookie registers in the shared store as a bookie process does.

:meth:`SimBookie.crash` is kill -9 with the page cache lost: connections reset at once (no
answer leaves after the crash instant), the disk frozen (nothing the dying process does
becomes durable), the tasks cancelled, then every file put back to its durable image
(:mod:`.disk`). The registration lingers for a while, as an expiring session's would.
:meth:`SimBookie.start` again is the restart: replay from the files, then serve.
:meth:`SimBookie.lose` is a crash with no coming back: the machine and its disks are gone.

With auto-recovery on (``SimCluster(autorecovery=...)``) each bookie runs an auto-recovery
node beside it, as a bookie process with ``autoRecoveryDaemonEnabled`` does
(:mod:`.recovery`): it dies with the bookie, and its session's ephemerals (ledger locks,
its vote in the auditor election) expire with the registration.
"""

from __future__ import annotations

import contextlib
import errno
import re
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from bookiesim.bookie.blocking import disk_latency
from bookiesim.bookie.bookie import AddObserver, Bookie
from bookiesim.bookie.config import BookieConfig
from bookiesim.bookie.handlers import RequestProcessor
from bookiesim.bookie.server import BookieServer
from bookiesim.client.context import ClientConfig
from bookiesim.metadata.errors import MetadataError, NodeExistsError
from bookiesim.metadata.ledgers import LedgerManager
from bookiesim.metadata.memory_store import MemoryStore
from bookiesim.metadata.registration import (
    FEATURE_WRITE_CLOSE,
    BookieInfo,
    available_path,
    readonly_path,
)
from bookiesim.metadata.store import join_path
from bookiesim.sim.network import SimConnection, SimNetwork
from bookiesim.sim.recovery import AutoRecoveryNode

if TYPE_CHECKING:
    import random
    from collections.abc import Callable

    from bookiesim.autorecovery.config import AutoRecoveryConfig
    from bookiesim.bookie.ledger_storage import EntryHeader
    from bookiesim.sim.disk import SimDisk
    from bookiesim.sim.history import History

__all__ = ["SIM_BOOKIE_SETTINGS", "SimBookie", "SimCluster", "describe_failure"]

SIM_BOOKIE_SETTINGS: dict[str, object] = {
    "journalSyncData": True,  # acknowledged means fsynced: what the crash model relies on
    "journalPreAllocSizeMB": 1,
    "journalMaxGroupWaitMSec": 2,
    "flushInterval": 1000,
    "gcWaitTime": 4000,
    "minorCompactionInterval": 8,
    "majorCompactionInterval": 20,
    "compactionRateByEntries": 100000,
    "entrylogMapAccessExpiryTimeInSeconds": 6,
    "maximumNumberOfActiveEntryLogs": 4,
    "entryLogMaxOpenReadFiles": 4,
    "openFileLimit": 8,
    "logSizeLimit": 64 * 1024,
    "diskCheckInterval": 1000,
}
"""Small timers and caps, so a minute of virtual time rotates, flushes, evicts, collects
and compacts many times."""


def describe_failure(exc: BaseException | None) -> str:
    """A bookie's failure for the trace, without file paths: they hold the run's temporary
    directory and journal ids taken from the wall clock, and two runs of a seed must trace
    the same lines."""
    return re.sub(r"'[^']*/[^']*'", "<path>", str(exc))


def fenced_add_observer(history: History, bookie_id: str) -> AddObserver:
    """A1 checked on the real bookie's add path: a ledger fenced before the add must refuse
    a normal add. Passed to the bookie as an add observer, so the bookie runs unchanged."""

    def observe(header: EntryHeader, recovery: bool, fenced: bool) -> None:
        if fenced and not recovery:
            history.violation(
                "A1", f"{bookie_id} accepted a normal add to fenced ledger {header.ledger_id}"
            )

    return observe


class SimBookie:
    """One bookie of the simulated cluster, across its crashes and restarts."""

    def __init__(self, cluster: SimCluster, number: int, cfg: BookieConfig) -> None:
        self.cluster = cluster
        self.name = f"bookie{number}"
        self.bookie_id = f"10.0.0.{number}:3181"
        self.root = Path(cfg.ledger_directories[0]).parent
        self.cfg = cfg
        self.faults = cluster.disk.add_root(self.root)
        self.bookie: Bookie | None = None
        self.incarnation = 0
        self.crashes = 0
        self._scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._stopped = trio.Event()
        self._crashing = False
        self.refused_start = False
        """The last start failed because the disk was full (see :meth:`start`)."""
        self.lost = False
        """Lost for good (:meth:`lose`): never starts again."""
        self.autorecovery: AutoRecoveryNode | None = None

    @property
    def up(self) -> bool:
        return self.bookie is not None

    async def start(self) -> bool:
        """Start (or restart) the bookie; False if it failed to (recorded as a violation)."""
        if self.up:
            return True
        if self.lost:
            self.cluster.history.trace(f"{self.name} is lost for good: not started")
            return False
        self.incarnation += 1
        self.refused_start = False
        try:
            await self.cluster.nursery.start(self._run)
        except Exception as exc:
            if isinstance(exc, OSError) and exc.errno == errno.ENOSPC and self.faults.full:
                # A bookie cannot start on a full disk (its journal needs a new file), nor can
                # upstream's; it is down, as after a crash, not broken. The end of the fault
                # starts it again, as a supervisor would; START stays for any other failure.
                self.refused_start = True
                self.cluster.history.trace(f"{self.name} cannot start: disk full ({exc})")
                return False
            self.cluster.history.violation("START", f"{self.name} could not start: {exc!r}")
            return False
        await self._register()
        config = self.cluster.autorecovery
        if config is not None and self._nursery is not None:
            # Once registered, as a bookie process starts its companions.
            name = f"{self.name}-ar"
            cluster = self.cluster
            node = AutoRecoveryNode(
                name,
                self.bookie_id,
                cluster.store,
                cluster.history,
                cluster.net.connector(name),
                config,
                cluster.client_config(name),
            )
            self.autorecovery = node
            await self._nursery.start(node.run)
        return True

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        disk_latency.set(self.faults.current_latency)
        self._stopped = trio.Event()
        self._crashing = False
        scope = self._scope = trio.CancelScope()
        history = self.cluster.history
        started = False
        try:
            with scope:
                bookie = Bookie(
                    self.cfg, add_observers=[fenced_add_observer(history, self.bookie_id)]
                )
                async with trio.open_nursery() as nursery:
                    await nursery.start(bookie.run)
                    bookie.gc.ledger_source = LedgerManager(self.cluster.store)
                    self._nursery = nursery
                    self._server = BookieServer(
                        RequestProcessor(bookie), max_frame_size=self.cfg.netty_max_frame_size_bytes
                    )
                    self.bookie = bookie
                    self.cluster.net.acceptors[self.bookie_id] = self._accept
                    nursery.start_soon(self._follow_read_only, bookie)
                    started = True
                    task_status.started()
        except Exception as exc:
            if not started:
                raise
            if not self._crashing:
                # A bookie that dies by itself is a finding, whatever the invariants say.
                history.violation("BOOKIE", f"{self.name} failed: {exc!r}")
        finally:
            self.bookie = None
            self._nursery = None
            self.cluster.net.acceptors[self.bookie_id] = None
            self._stopped.set()

    def _accept(self, conn: SimConnection) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(self._serve, conn)

    async def _serve(self, conn: SimConnection) -> None:
        disk_latency.set(self.faults.current_latency)
        await self._server.handle_connection(conn.bookie_end)

    def _info(self) -> BookieInfo:
        return BookieInfo(
            self.bookie_id,
            host=self.bookie_id.split(":")[0],
            port=3181,
            http_port=None,
            features=frozenset({FEATURE_WRITE_CLOSE}),
        )

    async def _register(self) -> None:
        """Register as writable, as a (re)started bookie process does; a read-only node left
        by the previous incarnation goes."""
        await self._move_registration(self._writable_node, self._read_only_node)

    async def _follow_read_only(self, bookie: Bookie) -> None:
        """Once the bookie's journal or storage fails, move its registration under
        ``available/readonly``, as the bookie process does
        (:meth:`~bookiesim.metadata.registration.BookieRegistration.set_read_only`): clients
        then stop choosing it for ensembles, instead of replacing it and choosing it again."""
        while True:
            await bookie.wait_mode(read_only=True)
            await self._move_registration(self._read_only_node, self._writable_node)
            self.cluster.history.trace(
                f"{self.name} registered read-only ({describe_failure(bookie.failure)})"
            )
            await bookie.wait_mode(read_only=False)
            await self._move_registration(self._writable_node, self._read_only_node)
            self.cluster.history.trace(f"{self.name} registered writable again")

    async def _move_registration(self, to: str, away_from: str) -> None:
        """Create the node ``to`` first, then delete ``away_from``: the bookie is never
        unregistered in between."""
        store = self.cluster.store
        # NodeExistsError: the previous incarnation's registration has not expired yet.
        with contextlib.suppress(NodeExistsError):
            await store.create(
                to, self._info().to_service_info(), ephemeral=True, make_parents=True
            )
        with contextlib.suppress(MetadataError):
            await store.delete(away_from)

    @property
    def _writable_node(self) -> str:
        return join_path(available_path(self.cluster.store.ledgers_root), self.bookie_id)

    @property
    def _read_only_node(self) -> str:
        return join_path(readonly_path(self.cluster.store.ledgers_root), self.bookie_id)

    async def crash(self, stale: float) -> None:
        """kill -9 and a lost page cache (module docstring); the registration goes after
        ``stale`` seconds unless the bookie is back by then."""
        if not self.up or self._scope is None:
            return
        self.crashes += 1
        self._crashing = True
        if self.autorecovery is not None:
            self.autorecovery.store.frozen = True
        self.cluster.net.acceptors[self.bookie_id] = None
        self.cluster.net.reset_bookie(self.bookie_id)
        self.faults.frozen = True
        self._scope.cancel()
        await self._stopped.wait()
        restored, removed = self.cluster.disk.crash(self.root)
        self.faults.frozen = False
        self.cluster.history.trace(
            f"{self.name} crashed: {restored} files back to their synced content, "
            f"{removed} never-synced files gone"
        )
        node, self.autorecovery = self.autorecovery, None
        self.cluster.nursery.start_soon(self._expire_registration, stale, self.incarnation, node)

    async def lose(self, stale: float) -> None:
        """Lost for good: kill -9 (if it runs) and never again a start; its registration
        lingers ``stale`` seconds like a crashed one's."""
        if self.lost:
            return
        self.lost = True
        self.cluster.history.lose(self.bookie_id)
        if self.up:
            await self.crash(stale)
        self.cluster.history.trace(f"{self.name} ({self.bookie_id}) lost for good")

    async def _expire_registration(
        self, stale: float, incarnation: int, node: AutoRecoveryNode | None
    ) -> None:
        await trio.sleep(stale)
        if node is not None:
            # The dead node's session: its locks and its vote go whether or not the bookie
            # is back (a restarted bookie runs a new node with a new session).
            await node.expire()
        if self.incarnation != incarnation or self.up:
            return
        for path in (self._writable_node, self._read_only_node):
            with contextlib.suppress(MetadataError):
                await self.cluster.store.delete(path)


class SimCluster:
    """Bookies, store, disk and network of one run."""

    def __init__(
        self,
        root: Path,
        bookies: int,
        history: History,
        net_rng: random.Random,
        nursery: trio.Nursery,
        *,
        disk: SimDisk,
        overrides: dict[str, object] | None = None,
        journals: int = 1,
        autorecovery: AutoRecoveryConfig | None = None,
        client_config: Callable[[str], ClientConfig] = lambda name: ClientConfig(),
    ) -> None:
        self.root = root
        self.autorecovery = autorecovery
        """Each bookie runs an auto-recovery node with this configuration (None: none)."""
        self.client_config = client_config
        """The client configuration of the named client (the auto-recovery nodes')."""
        self.history = history
        self.nursery = nursery
        self.store = MemoryStore("memory:simulation")
        self.disk = disk
        self.net = SimNetwork(net_rng)
        self.net.observers.append(history.observe_frame)
        settings = {**SIM_BOOKIE_SETTINGS, **(overrides or {})}
        self.bookies: dict[str, SimBookie] = {}
        for n in range(1, bookies + 1):
            broot = root / f"bookie{n}"
            dirs: dict[str, object] = {
                "journalDirectory": str(broot / "journal"),
                "ledgerDirectories": str(broot / "ledgers"),
            }
            if journals > 1:
                dirs["journalDirectories"] = ",".join(
                    str(broot / f"journal-{i}") for i in range(journals)
                )
            cfg = BookieConfig.from_mapping({**settings, **dirs})
            sb = SimBookie(self, n, cfg)
            self.bookies[sb.bookie_id] = sb

    def by_name(self, name: str) -> SimBookie:
        for sb in self.bookies.values():
            if sb.name == name:
                return sb
        raise KeyError(name)

    async def start(self) -> None:
        for sb in self.bookies.values():
            await sb.start()
