"""One run of a schedule against real bookiesim bookies (``bookiesim chaos run``).

The run: a network (a node per bookie, ``b1``..``bN``, ``c1`` for the client workloads,
``ar1``/``ar2`` for the auto-recovery daemons, and with ``--metadata zk`` ``zk1``..``zkN`` for
the ZooKeeper servers; else the metadata is in SQLite, one file every namespace sees),
``bookiesim bookie`` processes in their nodes (``bookieAddress`` = the node's address, port
3181, auto-recovery off) and ``bookiesim autorecovery`` ones in theirs (:mod:`.daemons`), the
ZooKeeper ensemble (:mod:`.zookeepers`), the workloads (:mod:`.workloads`) and the nemesis
(:mod:`.nemesis`) for the duration, then the heal, the final phase (every writer's ledger
recovered and read back, the under-replicated count polled until 0, a probe write), and the
checker and the reports (``report_run``). Everything goes into ``out``: ``history.jsonl``,
``summary.json``, ``timeline.png``, ``bookies/<node>/`` (each bookie's directories and
``bookie.log``), ``autorecovery/<node>/bookie.log``, ``zookeeper/zk<i>/zookeeper.log``.

The harness process enters the client node's network namespace for the run (``setns`` on
its main thread, restored at the end), so its client connections come from the client
node's address and every network fault applies to them.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import random
import signal
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.chaos.daemons import AUTORECOVERY_NODES, BOOKIE_PORT, AutoRecoveryDaemons, Bookies
from bookiesim.chaos.history import JsonLinesSink, Recorder, read_history
from bookiesim.chaos.journey_cluster import ClusterJourney
from bookiesim.chaos.lazyfs.mount import lazy_mount
from bookiesim.chaos.nemesis import (
    LAZY_DISK_FAMILIES,
    READ_ERROR_FILES,
    PlannedFault,
    plan_schedule,
)
from bookiesim.chaos.netfaults import Loss, NetworkFault, OneWay, Partition, Slow
from bookiesim.chaos.netns import FaultRecord, LiveNetwork
from bookiesim.chaos.network import TestNetwork
from bookiesim.chaos.overlap import plan_overlapping
from bookiesim.chaos.overlap_run import run_overlapping
from bookiesim.chaos.report import report_run
from bookiesim.chaos.run_options import (
    BUGS,
    CLIENT,
    CONVERGENCE,
    HISTORY_NAME,
    READ_ERROR_SETTINGS,
    RunOptions,
)
from bookiesim.chaos.upstream.cluster import upstream_metadata_uri
from bookiesim.chaos.upstream.java_writer import compile_writer, java_writer, writer_argv
from bookiesim.chaos.workloads import Journeys, Workloads
from bookiesim.chaos.zookeepers import running_zookeepers
from bookiesim.client.bookkeeper import BookKeeper
from bookiesim.client.context import ClientConfig
from bookiesim.cluster.processes import ClusterError
from bookiesim.metadata.errors import StoreUnavailableError
from bookiesim.metadata.factory import open_store
from bookiesim.metadata.underreplication import UnderReplicationManager

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    from rich.console import Console

    from bookiesim.chaos.history import FaultHandle
    from bookiesim.chaos.zookeepers import ZooKeepers

__all__ = ["BOOKIE_PORT", "BUGS", "HISTORY_NAME", "RunOptions", "in_namespace", "run_schedule"]

_CLONE_NEWNET = 0x40000000


def replay_command(history: Path) -> str:
    return f"bookiesim chaos replay {history}"


@contextlib.contextmanager
def in_namespace(namespace: str) -> Any:
    """The calling thread in ``namespace``'s network namespace for the block."""
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(target, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {namespace}")
        try:
            yield
        finally:
            libc.setns(own, _CLONE_NEWNET)
    finally:
        os.close(own)
        os.close(target)


@dataclass
class Run:
    options: RunOptions
    live: LiveNetwork
    bookies: Bookies
    rec: Recorder
    console: Console
    counts: dict[tuple[str, str], int]
    autorecovery: AutoRecoveryDaemons
    zookeepers: ZooKeepers | None = None
    cut_off_sessions: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """By fault (``id``): the bookies whose ZooKeeper sessions it cut off."""
    started: float = 0.0
    notes: list[str] = field(default_factory=list)

    def say(self, text: str) -> None:
        elapsed = trio.current_time() - self.started
        self.console.print(f"[dim]{elapsed:7.1f} s[/dim] {text}", highlight=False)

    def _network_fault(self, fault: PlannedFault) -> NetworkFault:
        net = self.live.net
        if fault.kind in ("isolate", "zk-isolate"):
            return Partition.isolate(net, fault.targets[0])
        if fault.kind == "split":
            return Partition.split(net, fault.targets)
        if fault.kind == "one-way":
            return OneWay.of([CLIENT], fault.targets)
        if fault.kind == "session-expiry":
            return Partition.of(fault.targets, self.options.zookeeper_nodes)
        if fault.kind == "slow":
            return Slow(frozenset(fault.targets), int(fault.params["rate_kbit"]))
        others = [n for n in net.names if n not in fault.targets]
        return Loss.of(fault.targets, others, int(fault.params["percent"]))

    def _processes(self, node: str) -> Bookies | AutoRecoveryDaemons:
        return self.autorecovery if node in self.autorecovery.procs else self.bookies

    async def _inject(self, fault: PlannedFault) -> FaultRecord | None:
        node = fault.targets[0]
        if fault.kind == "zk-crash":
            assert self.zookeepers is not None
            await trio.to_thread.run_sync(self.zookeepers.crash, node)
            return None
        if fault.family in ("net", "zk", "slow"):
            await self._note_cut_off_sessions(fault)
            return await trio.to_thread.run_sync(self.live.start, self._network_fault(fault))
        if fault.family == "pause":
            self._processes(node).signal(node, signal.SIGSTOP)
        elif fault.family == "crash":
            await trio.to_thread.run_sync(self._processes(node).kill9, node)
        elif fault.family == "disk":
            await trio.to_thread.run_sync(self.bookies.fill, node)
        elif fault.family == "power":
            # Kill first, then crash the disk, then wait: a bookie killed inside an fsync of
            # the lazy disk cannot exit until the file system answers it (the crash does).
            self.bookies.signal(node, signal.SIGKILL)
            report = await self.bookies.lazy[node].crash(tear=fault.params.get("tear"))
            await trio.to_thread.run_sync(self.bookies.kill9, node)
            self.say(f"power loss on {node}: {report}")
        elif fault.family == "eio":
            await self._fail_reads(fault)
        return None

    async def _fail_reads(self, fault: PlannedFault) -> None:
        node, files = fault.targets[0], fault.params["files"]
        known = await self.bookies.lazy[node].fail_reads(READ_ERROR_FILES[files])
        self.say(f"reads of {node}'s {files} fail from now ({known} files now)")

    async def _heal_reads(self, fault: PlannedFault) -> dict[str, Any]:
        node, files = fault.targets[0], fault.params["files"]
        failed = await self.bookies.lazy[node].heal_reads(READ_ERROR_FILES[files])
        self.say(f"reads of {node}'s {files} work again ({failed} refused)")
        return {"reads_failed": failed}

    async def _heal(self, fault: PlannedFault, record: FaultRecord | None) -> dict[str, Any]:
        if record is not None:
            await trio.to_thread.run_sync(self.live.heal, record)
            return {}
        node = fault.targets[0]
        if fault.kind == "zk-crash":
            assert self.zookeepers is not None
            try:
                await trio.to_thread.run_sync(self.zookeepers.restart, node)
            except RuntimeError as exc:
                self.notes.append(f"{node} did not serve again: {exc}".splitlines()[0])
                return {"error": self.notes[-1]}
        elif fault.family == "pause":
            self._processes(node).signal(node, signal.SIGCONT)
        elif fault.family == "disk":
            self.bookies.free(node)
        elif fault.family == "eio":
            return await self._heal_reads(fault)
        elif fault.family in ("crash", "power"):
            procs = self._processes(node)
            try:
                await trio.to_thread.run_sync(lambda: procs.start([node], again=True))
            except ClusterError as exc:
                self.notes.append(f"{node} did not come back: {exc}".splitlines()[0])
                return {"error": self.notes[-1]}
        return {}

    async def _note_cut_off_sessions(self, fault: PlannedFault) -> None:
        """Before a fault cuts ZooKeeper servers off from bookies (``zk-isolate``, a ``split``
        with servers on the minority side), the bookies whose sessions are on those servers:
        they count as down too. A client notices a silent server after 2/3 of its session
        and then needs another server within the rest, so with 5 s sessions theirs may expire
        and their registration vanish until they register again (the campaign's seed 3006:
        two of four bookies so, a `ledger create` found one registered)."""
        servers = [n for n in fault.targets if n in self.options.zookeeper_nodes]
        if self.zookeepers is None or not servers or fault.kind not in ("zk-isolate", "split"):
            return
        by_address = {self.live.net.address(n): n for n in self.bookies.procs}
        cut: list[str] = []
        for server in servers:
            hosts = await trio.to_thread.run_sync(self.zookeepers.client_hosts, server)
            cut += [
                by_address[h]
                for h in hosts
                if h in by_address and by_address[h] not in fault.targets
            ]
        self.cut_off_sessions[id(fault)] = tuple(sorted(set(cut)))

    def down_of(self, fault: PlannedFault) -> tuple[str, ...]:
        """What a fault's record names ``down``: its targets, and the bookies whose ZooKeeper
        sessions it cut off (:meth:`_note_cut_off_sessions`)."""
        return (*fault.targets, *self.cut_off_sessions.get(id(fault), ()))

    async def nemesis(self, schedule: list[PlannedFault]) -> None:
        if self.options.overlap:
            nodes, most = list(self.bookies.procs), self.options.max_down
            await run_overlapping(
                schedule, self.started, nodes, most, self._inject, self._heal, self.rec, self.say,
                down_of=self.down_of,
            )  # fmt: skip
            return
        for fault in schedule:
            await trio.sleep_until(self.started + fault.start)
            # A fault injected late (the heal before it restarted a process) still lasts its
            # length: a session expiry must outlast the session.
            injected = trio.current_time()
            record = await self._inject(fault)
            # Every target counts as down, a read-error's too: its bookie takes adds but
            # answers reads EIO, and a journey's read or recovery cannot count on it. `down`
            # is one set over a step's whole span, so overstating it only excuses more steps.
            handle: FaultHandle = self.rec.fault_start(
                fault.kind, fault.targets, fault.params, down=self.down_of(fault)
            )
            self.say(
                f"[yellow]fault {handle.id}[/yellow] {fault.describe()} for {fault.length:.1f} s"
            )
            await trio.sleep_until(max(self.started + fault.end, injected + fault.length))
            result = await self._heal(fault, record)
            self.rec.fault_end(handle, **result)
            self.say(f"[green]healed {handle.id}[/green] {fault.kind} {result.get('error', '')}")

    async def _registered(self, bk: BookKeeper, seconds: float) -> bool:
        with trio.move_on_after(seconds):
            while set(self.bookies.ids) - set(await bk.live_bookies()):  # noqa: ASYNC110 - polls the store
                await trio.sleep(0.5)
            return True
        return False

    async def final_phase(self, work: Workloads, bk: BookKeeper) -> None:
        if not await self._registered(bk, 60):
            self.notes.append("not every bookie registered again within 60 s of the heal")
        self.say(f"final reads of {len(work.ledgers)} ledgers")
        for lid in sorted(work.ledgers):
            await work.recover_and_read(lid)
        self.say("replication checks")
        manager = UnderReplicationManager(bk.store, bk.ledgers_root)
        deadline = trio.current_time() + CONVERGENCE / 2
        while True:
            marked = {mark.ledger_id for mark in await manager.under_replicated()}
            if not marked:
                h = self.rec.invoke("replication_check", process="final", node=CLIENT)
                self.rec.ok(h, under_replicated=0)
                break
            # One check per ledger, so that a mark that stays names its ledger alone.
            for lid in sorted(work.ledgers | marked):
                h = self.rec.invoke("replication_check", process="final", node=CLIENT, ledger=lid)
                self.rec.ok(h, under_replicated=int(lid in marked))
            if trio.current_time() > deadline:
                self.notes.append(f"ledgers still marked under-replicated: {sorted(marked)}")
                break
            await trio.sleep(2)
        for _attempt in range(5):
            h = self.rec.invoke("probe_write", process="final", node=CLIENT)
            try:
                with trio.fail_after(20):
                    lh = await bk.create_ledger(3, 2, 2)
                    await lh.add_entry(b"probe")
                    await lh.close()
            except (trio.TooSlowError, Exception) as exc:
                self.rec.fail(h, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                await trio.sleep(2)
                continue
            self.rec.ok(h, ledger=lh.ledger_id)
            break

    async def main(self, schedule: list[PlannedFault]) -> None:
        """The bookies (on their lazy disks, with the ``power`` or ``eio`` family), the
        workloads and the nemesis, the final phase; the bookies stop before their disks go."""
        nodes = [f"b{i}" for i in range(1, self.options.bookies + 1)]
        async with contextlib.AsyncExitStack() as stack:
            if set(LAZY_DISK_FAMILIES) & set(self.options.families):
                for node in nodes:
                    backing, mnt = (
                        self.bookies.root / node / "disk",
                        self.bookies.root / node / "lazy",
                    )
                    backing.mkdir(parents=True, exist_ok=True)
                    mnt.mkdir(parents=True, exist_ok=True)
                    # The run in its source, for `chaos cleanup` after a killed harness.
                    fsname = f"{self.live.net.hub}-{node}-lazy"
                    self.bookies.lazy[node] = await stack.enter_async_context(
                        lazy_mount(backing, mnt, fsname=fsname)
                    )
            try:
                await trio.to_thread.run_sync(self.bookies.start, nodes)
                await trio.to_thread.run_sync(self.autorecovery.start, AUTORECOVERY_NODES)
                await self._workloads(schedule)
            finally:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self.autorecovery.stop_all)
                    await trio.to_thread.run_sync(self.bookies.stop_all)

    async def _workloads(self, schedule: list[PlannedFault]) -> None:
        opts = self.options
        # A ZooKeeper server on a loaded machine may take a while to take its first session.
        for attempt in range(6):
            try:
                async with open_store(self.bookies.uri):
                    break
            except StoreUnavailableError:
                if attempt == 5:
                    raise
                await trio.sleep(2)
        config = ClientConfig(request_timeout=5.0, connect_timeout=3.0, seed=opts.seed)
        v2 = ClientConfig(
            request_timeout=5.0, connect_timeout=3.0, seed=opts.seed, use_v2_wire_protocol=True
        )
        async with (
            BookKeeper.open(self.bookies.uri, config=config) as bk,
            BookKeeper.open(self.bookies.uri, config=v2) as bk2,
        ):
            if not await self._registered(bk, 60):
                raise ClusterError("the bookies did not all register within 60 s")
            self.started = trio.current_time()
            end = self.started + opts.duration
            rng = random.Random(opts.seed)
            work = Workloads(self.rec, CLIENT, {False: bk, True: bk2}, rng, end)
            java = await self._java_writers(work)
            self.say(f"{len(schedule)} faults planned over {opts.duration:.0f} s")
            async with trio.open_nursery() as nursery:
                for i, spec in enumerate(opts.writers, 1):
                    nursery.start_soon(work.writer, spec, i)
                for run_java in java:
                    nursery.start_soon(run_java)
                nursery.start_soon(work.tailer)
                nursery.start_soon(work.recoverer)
                if "ledger" in opts.journeys:
                    journeys = Journeys(
                        self.rec, CLIENT, lambda argv: self.live.net.exec_argv(CLIENT, argv),
                        self.bookies.uri, self.bookies.ids, bk, random.Random(opts.seed + 1), end,
                        zookeeper=opts.zookeeper_nodes,
                        bookiesim=opts.target.bookiesim(),
                    )  # fmt: skip
                    nursery.start_soon(journeys.run)
                if "cluster" in opts.journeys:
                    cluster = ClusterJourney(
                        self.rec, CLIENT, lambda argv: self.live.net.exec_argv(CLIENT, argv),
                        opts.target.bookiesim(), opts.out / "cluster-journey",
                    )  # fmt: skip
                    nursery.start_soon(cluster.run)
                nursery.start_soon(self.nemesis, schedule)
                nursery.start_soon(self._progress, end)
            # Anything left hurt (none, once the nemesis ran to its end) is healed here.
            self.live.heal_all()
            for node in self.bookies.procs:
                self.bookies.signal(node, signal.SIGCONT)
            for node in self.autorecovery.procs:
                self.autorecovery.signal(node, signal.SIGCONT)
            self.say("workloads done, every fault healed")
            await self.final_phase(work, bk)

    async def _java_writers(self, work: Workloads) -> list[Callable[[], Awaitable[None]]]:
        """Upstream's Java client as writers (``--java-writers``): compiled here, each run in
        the client node; what runs each."""
        opts, home = self.options, self.options.bookkeeper_home
        if not opts.java_writers or home is None:
            return []
        work_dir = opts.out / "java"
        classes = await trio.to_thread.run_sync(compile_writer, home, work_dir)
        uri = upstream_metadata_uri(self.bookies.uri)
        runs: list[Callable[[], Awaitable[None]]] = []
        for i, spec in enumerate(opts.java_writers, 1):
            name = f"java-writer-{i}"
            argv = writer_argv(
                home, classes, work_dir, uri, spec, opts.duration, opts.seed + i, name
            )
            log = opts.out / f"{name}.log"
            argv = self.live.net.exec_argv(CLIENT, argv)
            runs.append(partial(java_writer, work, argv, spec, i, log))
        return runs

    async def _progress(self, end: float) -> None:
        while trio.current_time() < end:
            await trio.sleep(min(10.0, max(0.1, end - trio.current_time())))
            self.say(f"progress: {self.rec_counts()}")

    def rec_counts(self) -> str:
        c = self.counts
        return (
            f"{c.get(('add', 'ok'), 0)} adds acknowledged, {c.get(('add', 'fail'), 0)} failed, "
            f"{c.get(('add', 'unknown'), 0)} unknown; {c.get(('journey', 'ok'), 0)} journey "
            f"steps ok, {c.get(('journey', 'fail'), 0) + c.get(('journey', 'unknown'), 0)} not"
        )


def run_schedule(options: RunOptions, console: Console) -> int:
    """One run; returns the exit code (0: no violation, 1: violations). ``ClusterError`` /
    ``NetworkError`` / ``OSError`` propagate with one-line messages."""
    out = options.out
    out.mkdir(parents=True, exist_ok=True)
    history_path = out / HISTORY_NAME
    if history_path.exists():
        raise FileExistsError(f"{history_path} exists: give --out a new directory")
    bookies = [f"b{i}" for i in range(1, options.bookies + 1)]
    zk = options.zookeeper_nodes
    daemons = AUTORECOVERY_NODES if options.autorecovery_faults else ()
    if options.overlap:
        schedule = plan_overlapping(
            options.seed, options.duration, options.families, bookies, options.max_down,
            zookeepers=zk, autorecovery=daemons,
        )  # fmt: skip
    else:
        schedule = plan_schedule(
            options.seed, options.duration, options.families, bookies,
            zookeepers=zk, autorecovery=daemons,
        )  # fmt: skip
    plan = TestNetwork.plan([*bookies, CLIENT, *zk, *AUTORECOVERY_NODES])
    uri = f"sqlite:///{out.resolve()}/metadata.db"
    counts: dict[tuple[str, str], int] = {}
    kinds: dict[int, str] = {}
    # The client's warnings (fenced writers, ensemble changes) go to a file, not between the
    # progress lines.
    log = logging.FileHandler(out / "harness.log")
    log.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(log)
    try:
        return _run(options, console, schedule, plan, uri, counts, kinds)
    finally:
        logging.getLogger().removeHandler(log)
        log.close()


def _run(
    options: RunOptions,
    console: Console,
    schedule: list[PlannedFault],
    plan: TestNetwork,
    uri: str,
    counts: dict[tuple[str, str], int],
    kinds: dict[int, str],
) -> int:
    out = options.out
    history_path = out / HISTORY_NAME
    bookies = [f"b{i}" for i in range(1, options.bookies + 1)]

    with JsonLinesSink(history_path) as sink, LiveNetwork(plan) as live:

        def counting(record: dict[str, Any]) -> None:
            # Progress figures, counted as the records go by.
            sink(record)
            if record["type"] == "invoke":
                kinds[record["op"]] = record["kind"]
            elif record["type"] in ("ok", "fail", "unknown"):
                key = (kinds.get(record["op"], "?"), record["type"])
                counts[key] = counts.get(key, 0) + 1

        rec = Recorder(counting, replay=replay_command(history_path), meta=options.meta())
        bugs = [BUGS[name][0] for name in options.bugs]
        bugs += list(READ_ERROR_SETTINGS) if "eio" in options.families else []
        nodes = Bookies(
            live, out / "bookies", uri, bugs, target=options.target,
            small_disks="disk" in options.families, kinds=options.kinds,
            home=options.bookkeeper_home,
        )  # fmt: skip
        daemons = AutoRecoveryDaemons(live, out / "autorecovery", uri)
        run = Run(options, live, nodes, rec, console, counts, daemons)
        console.print(
            f"chaos run {plan.run_id}: seed {options.seed}, {options.duration:.0f} s, "
            f"families {','.join(options.families) or 'none'}, {options.bookies} bookies, "
            f"out {out}"
            + ("" if options.target.root is None else f"; {options.target.describe()}"),
            highlight=False,
        )
        try:
            # In c1's namespace from here: the ZooKeeper server's readiness check, like the
            # workloads, must reach the nodes' addresses (the root namespace has no route).
            with in_namespace(plan.node(CLIENT).namespace), contextlib.ExitStack() as stack:
                if options.metadata == "zk":
                    run.zookeepers = stack.enter_context(
                        running_zookeepers(plan, options.zookeeper_nodes, out / "zookeeper")
                    )
                    nodes.uri = daemons.uri = run.zookeepers.uri("/ledgers")
                if nodes.small_disks:
                    nodes.mount_disks(bookies)
                try:
                    trio.run(run.main, schedule)
                finally:
                    daemons.stop_all()
                    nodes.stop_all()
        finally:
            daemons.stop_all()
            nodes.stop_all()
            nodes.unmount_disks()
    for note in run.notes:
        console.print(f"note: {note}", markup=False)
    result, _summary = report_run(read_history(history_path), out, console)
    return 1 if result.violations else 0
