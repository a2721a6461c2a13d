"""One simulated run: a cluster, a workload and a fault plan in one trio run, in virtual time.

::

    result = run_simulation(SimSettings(seed=7, steps=40))
    result.ok, result.violations, result.trace

The run is ``trio.run`` under an autojumping :class:`trio.testing.MockClock` (idle waits
cost nothing: a minute of timeouts and timers takes milliseconds), with trio's scheduler and
every random draw pinned to the seed (:mod:`.rng`), files on the simulated disk (:mod:`.disk`)
and the network simulated (:mod:`.network`). After every plan step the invariants are checked
(:mod:`.invariants`); the run stops at the first violation. Without one, a final phase turns
every fault off, brings every bookie back, recovers every ledger left open (it must close:
liveness L2), lets GC run, checks once more and reads every closed ledger back in full.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import trio
import trio.testing

from bookiesim.bookie.config import LEDGER_STORAGE_NAMES
from bookiesim.client.bookkeeper import ClientConfig
from bookiesim.metadata.ledgers import LedgerState
from bookiesim.sim.actors import ClientActor, Writer, WriterSettings
from bookiesim.sim.bugs import autorecovery_flags, bookie_overrides, client_flags
from bookiesim.sim.disk import SimDisk
from bookiesim.sim.history import History, Violation
from bookiesim.sim.invariants import CheckerMemory, check_all
from bookiesim.sim.loss import note_only_copies, unrecoverable
from bookiesim.sim.observe import REPLICATION_BOUND, Observer
from bookiesim.sim.plan import FAULT_KINDS, FaultPlan, Step, draw_loss, draw_plan
from bookiesim.sim.recovery import autorecovery_config
from bookiesim.sim.rng import SimRandom, deterministic_run
from bookiesim.sim.sim_cluster import SIM_BOOKIE_SETTINGS, SimCluster, describe_failure
from bookiesim.sim.slow_writer import SlowWriter

if TYPE_CHECKING:
    import random
    from collections.abc import Awaitable, Callable, Iterator, Sequence

__all__ = [
    "BY_SEED",
    "LEDGER_STORAGES",
    "RunResult",
    "SimSettings",
    "Simulation",
    "new_simulation",
    "quiet_logs",
    "run_simulation",
]

DEFAULT_SHAPES: tuple[tuple[int, int, int], ...] = (
    (3, 3, 2),
    (2, 2, 2),
    (3, 2, 2),
    (3, 2, 1),
    (4, 3, 2),
)


BY_SEED = "by-seed"
""":attr:`SimSettings.ledger_storage`'s default: the storage class follows the seed."""
LEDGER_STORAGES = (BY_SEED, *LEDGER_STORAGE_NAMES)


@dataclass(frozen=True)
class SimSettings:
    """Everything a run depends on besides its plan (which the seed draws unless given)."""

    seed: int = 0
    steps: int = 30
    bookies: int = 5
    writers: int = 2
    recoverers: int = 3
    faults: frozenset[str] = frozenset(FAULT_KINDS)
    gap: float = 1.0
    """Mean seconds between plan steps."""
    bugs: frozenset[str] = frozenset()
    """Upstream bugs re-created for the run, by name (:data:`.bugs.BUGS`); the campaign must
    then find a violation."""
    shapes: tuple[tuple[int, int, int], ...] = DEFAULT_SHAPES
    request_timeout: float = 2.0
    stop_on_violation: bool = True
    ledger_storage: str = BY_SEED
    """``ledgerStorageClass`` of every bookie (short name), or :data:`BY_SEED`: the sorted
    storage (the default) for even seeds, the interleaved one for odd seeds, so that every
    campaign covers both and the regressions found before the sorted storage existed keep
    their seeds."""
    journals: int = 1
    """Journal directories per bookie (``journalDirectories``): with more than one, each
    ledger's records go to journal ``ledgerId mod n``, each journal with its own mark."""

    @property
    def ledger_storage_class(self) -> str:
        """The ``ledgerStorageClass`` this run's bookies get."""
        if self.ledger_storage != BY_SEED:
            return self.ledger_storage
        return "SortedLedgerStorage" if self.seed % 2 == 0 else "InterleavedLedgerStorage"

    def replay_command(self) -> str:
        """The command line that runs exactly this run again."""
        parts = [
            "bookiesim sim faults",
            f"--seed {self.seed}",
            "--seeds 1",
            f"--steps {self.steps}",
        ]
        defaults = SimSettings()
        if self.bookies != defaults.bookies:
            parts.append(f"--bookies {self.bookies}")
        if self.writers != defaults.writers:
            parts.append(f"--writers {self.writers}")
        if self.recoverers != defaults.recoverers:
            parts.append(f"--recoverers {self.recoverers}")
        if self.faults != defaults.faults:
            parts.append(f"--faults {','.join(sorted(self.faults)) or 'none'}")
        if self.ledger_storage != defaults.ledger_storage:
            parts.append(f"--ledger-storage {self.ledger_storage}")
        if self.journals != defaults.journals:
            parts.append(f"--journals {self.journals}")
        parts.extend(f"--inject-bug {bug}" for bug in sorted(self.bugs))
        return " ".join(parts)


@dataclass
class RunResult:
    settings: SimSettings
    plan: FaultPlan
    violations: list[Violation]
    trace: list[str]
    simulated_seconds: float
    wall_seconds: float
    digest: str
    counters: dict[str, int] = field(default_factory=dict)
    cpu_seconds: float = 0.0
    """The process's CPU time while the run ran (its trio thread and any worker threads)."""

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def first_violation(self) -> Violation | None:
        return self.violations[0] if self.violations else None


_S = TypeVar("_S", bound="Simulation")


def run_simulation(
    settings: SimSettings,
    plan: FaultPlan | None = None,
    root: Path | None = None,
    instruments: Sequence[trio.abc.Instrument] = (),
) -> RunResult:
    """Run one simulation (synchronously: it is its own ``trio.run``; ``instruments`` watch
    its scheduling, as ``bench sim`` counts it)."""
    sim = new_simulation(Simulation, settings, plan, root)
    started = time.perf_counter()
    cpu_started = time.process_time()
    clock = trio.testing.MockClock(autojump_threshold=0)
    disk = SimDisk()
    try:
        with deterministic_run(settings.seed), disk.installed():
            trio.run(sim.main, disk, clock=clock, instruments=instruments)
    finally:
        shutil.rmtree(sim.root, ignore_errors=True)
    run = sim.result(disk, time.perf_counter() - started)
    run.cpu_seconds = time.process_time() - cpu_started
    return run


def new_simulation(
    kind: type[_S], settings: SimSettings, plan: FaultPlan | None = None, root: Path | None = None
) -> _S:
    """A run's :class:`Simulation` (or subclass), its plan drawn from the seed unless given,
    in a new work directory under ``root`` (``sim.root``: the caller removes it)."""
    rng = SimRandom(settings.seed)
    bookie_names = [f"bookie{n}" for n in range(1, settings.bookies + 1)]
    clients = [f"writer{n}" for n in range(1, settings.writers + 1)]
    clients += [f"recoverer{n}" for n in range(1, settings.recoverers + 1)] + ["admin"]
    if plan is None:
        plan = draw_plan(
            rng.stream("plan"),
            steps=settings.steps,
            bookies=bookie_names,
            clients=clients,
            kinds=settings.faults,
            gap=settings.gap,
            max_down=max(1, settings.bookies - 3),
        )
        if "lose" in settings.faults and settings.bookies - 1 >= max(s[0] for s in settings.shapes):
            # Only where every shape still fits on the bookies left: otherwise writers and
            # recoveries would stall for want of bookies, which is not what is under test.
            plan = draw_loss(rng.stream("lose"), plan, bookie_names)
    workdir = Path(tempfile.mkdtemp(prefix="bookiesim-sim-", dir=root or scratch_base()))
    return kind(settings, plan, workdir, History(), rng, clients)


def scratch_base() -> Path | None:
    """Where runs make their work directories: memory (``/dev/shm``) where there is one, else
    the system's temporary directory (None)."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else None


class Simulation:
    """The run's actors and its step loop."""

    def __init__(
        self,
        settings: SimSettings,
        plan: FaultPlan,
        root: Path,
        history: History,
        rng: SimRandom,
        clients: list[str],
    ) -> None:
        self.settings = settings
        self.plan = plan
        self.root = root
        self.history = history
        self.rng = rng
        self.clients = clients
        self.cluster: SimCluster | None = None
        self.writers: list[Writer] = []
        self.recoverers: list[ClientActor] = []
        self.admin: ClientActor | None = None
        self.stopping = trio.Event()
        self.memory = CheckerMemory()
        self.reported: set[tuple[str, str]] = set()
        self.simulated = 0.0
        self.steps_run = 0
        self._start = 0.0
        self._violations_seen = 0

    def result(self, disk: SimDisk, wall_seconds: float) -> RunResult:
        """What the run found and cost, once it is over."""
        history = self.history
        net = self.cluster.net if self.cluster is not None else None
        return RunResult(
            settings=self.settings,
            plan=self.plan,
            violations=list(history.violations),
            trace=history.trace.lines,
            simulated_seconds=self.simulated,
            wall_seconds=wall_seconds,
            digest=net.digest if net is not None else "",
            counters={
                "frames": net.frames if net else 0,
                "dropped": net.dropped if net else 0,
                "metadata_writes": history.metadata_writes,
                "ledgers": len(history.writers),
                "syncs": disk.syncs,
            },
        )

    def _config(self, name: str) -> ClientConfig:
        skew = self.plan.skews.get(name, 1.0)
        return ClientConfig(
            request_timeout=self.settings.request_timeout * skew,
            connect_timeout=self.settings.request_timeout / 2 * skew,
            seed=self.rng.derive(name),
            **client_flags(self.settings.bugs),
            write_close_grace=0.0,
        )

    async def main(self, disk: SimDisk, drive: Callable[[], Awaitable[None]] | None = None) -> None:
        """Build the cluster and the clients, then run ``drive`` (the plan's step loop
        unless given: :mod:`.stepper` drives a run from synchronous code instead)."""
        self._start = trio.current_time()
        try:
            async with trio.open_nursery() as nursery:
                cluster = SimCluster(
                    self.root,
                    self.settings.bookies,
                    self.history,
                    self.rng.stream("network"),
                    nursery,
                    disk=disk,
                    overrides={
                        **bookie_overrides(self.settings.bugs),
                        "ledgerStorageClass": self.settings.ledger_storage_class,
                    },
                    journals=self.settings.journals,
                    autorecovery=(
                        autorecovery_config(**autorecovery_flags(self.settings.bugs))
                        if "lose" in self.settings.faults
                        else None
                    ),
                    client_config=self._config,
                )
                self.cluster = cluster
                cluster.net.faults.write_close_loss = self.plan.write_close_loss
                cluster.net.faults.write_close_dup = self.plan.write_close_dup
                await cluster.start()
                self.admin = await self._client(
                    ClientActor(cluster, "admin", self._config("admin"))
                )
                for n in range(1, self.settings.recoverers + 1):
                    name = f"recoverer{n}"
                    self.recoverers.append(
                        await self._client(ClientActor(cluster, name, self._config(name)))
                    )
                for _ in range(self.settings.writers):
                    await self._new_writer()
                if "slow_ledger" in self.settings.faults:
                    rng = self.rng.stream("slow")
                    slow = SlowWriter(cluster, "slow", self._config("slow"), rng)
                    await self._client(slow)
                    slow.spawn(slow.write_forever)
                    slow.spawn(slow.retention, self.stopping)
                self.observer = Observer(cluster, self.history)
                self.history.swap_checks.append(self.observer.check_swap)
                await (drive or self._run_plan)()
                nursery.cancel_scope.cancel()
        finally:
            self.simulated = trio.current_time() - self._start

    async def _client(self, actor: ClientActor) -> ClientActor:
        assert self.cluster is not None
        await self.cluster.nursery.start(actor.run)
        return actor

    async def _new_writer(self) -> Writer:
        assert self.cluster is not None
        name = f"writer{len(self.writers) + 1}"
        settings = WriterSettings(self.settings.shapes)
        writer = Writer(self.cluster, name, self._config(name), settings, self.rng.stream(name))
        await self._client(writer)
        writer.spawn(writer.write_forever, self.stopping)
        self.writers.append(writer)
        return writer

    # -- the step loop --------------------------------------------------------------------------

    async def _run_plan(self) -> None:
        self.history.trace(
            f"start: {self.settings.bookies} bookies, plan of {len(self.plan.steps)} events"
        )
        if self._check():
            return
        for step in self.plan.ordered():
            await trio.sleep_until(self._start + step.at)
            await self._apply(step)
            self.steps_run += 1
            if self._check() and self.settings.stop_on_violation:
                return
        await self._final_phase()

    def _check(self) -> bool:
        """Check every invariant now; True if a new violation turned up since the last
        check (including those the history recorded the moment they happened)."""
        before = self._violations_seen
        findings = check_all(self.observer.view(), self.memory)
        for writer in self.writers:  # CHK for the clients' ledger handles too
            if writer.current is not None:
                try:
                    writer.current._check()
                except AssertionError as exc:
                    findings.append(("CHK", f"{writer.name}'s ledger handle: _check() {exc!r}"))
        for invariant, message in findings:
            if (invariant, message) not in self.reported:
                self.reported.add((invariant, message))
                self.history.violation(invariant, message)
        self._violations_seen = len(self.history.violations)
        return self._violations_seen > before

    async def _apply(self, step: Step) -> None:
        cluster = self.cluster
        assert cluster is not None
        rng = self.rng.stream("steps")
        net = cluster.net
        self.history.trace(f"step: {step.describe()}")
        action = step.action
        if action == "crash":
            await cluster.by_name(step.targets[0]).crash(stale=rng.uniform(0.2, 3.0))
        elif action == "restart":
            await cluster.by_name(step.targets[0]).start()
        elif action == "lose":
            target = cluster.by_name(step.targets[0])
            note_only_copies(self.history, self.observer, target.bookie_id)
            await target.lose(stale=rng.uniform(0.2, 3.0))
        elif action == "partition":
            i = step.targets.index("|")
            bookies = [cluster.by_name(b).bookie_id for b in step.targets[i + 1 :]]
            net.partition(list(step.targets[:i]), bookies)
        elif action == "heal":
            net.heal()
        elif action in ("loss", "loss_end"):
            net.faults.loss = step.value
        elif action in ("spike", "spike_end"):
            net.faults.spike = step.value
            net.faults.spike_max = 3.0
        elif action == "storm":
            self._storm(step.value, rng)
        elif action == "storm_end":
            net.faults.link_delay.clear()
            net.faults.link_loss.clear()
        elif action in ("slow_disk", "disk_ok"):
            cluster.by_name(step.targets[0]).faults.latency = step.value
        elif action in ("disk_full", "disk_free"):
            target = cluster.by_name(step.targets[0])
            target.faults.full = action == "disk_full"
            if action == "disk_free" and target.refused_start:
                await target.start()
        elif action == "stop_writer":
            active = [w for w in self.writers if not w.zombie and not w.finished]
            if active:
                rng.choice(active).stop_mid_stream()
                await self._new_writer()
        elif action == "recover":
            self._recover(int(step.value), rng.random(), rng.random())
        elif action == "delete":
            closed = sorted(lid for lid, md in self.history.metadata.items() if md.is_closed)
            if closed and self.admin is not None:
                self.admin.spawn(self.admin.delete, rng.choice(closed))
        elif action == "read":
            known = sorted(self.history.metadata)
            if known and self.admin is not None:
                self.admin.spawn(self.admin.read, rng.choice(known))
        # Let what the step set off (a connection reset, a release) be seen by the check.
        await trio.sleep(0.001)

    def _storm(self, value: float, rng: random.Random) -> None:
        """A sick bookie during a failover: pick a ledger being written and one bookie of
        its ensemble; the writers' links to it get slow (late, but within their request
        timeout: a late add that still counts is what makes a negative recovery read
        dangerous), the recoverers' links to it flaky (lose ``value`` of the frames), and
        recoveries of that ledger start. The shape of upstream #2614."""
        cluster = self.cluster
        assert cluster is not None
        writing = sorted(
            (w.current.ledger_id, w.current.ensemble)
            for w in self.writers
            if w.current is not None and w.current.error is None
        )
        if not writing:
            return
        ledger_id, ensemble = writing[rng.randrange(len(writing))]
        sick = ensemble[rng.randrange(len(ensemble))]
        faults = cluster.net.faults
        patience = min(w.config.request_timeout for w in self.writers)
        delay = rng.uniform(0.3, 0.9) * patience
        for w in self.writers:
            faults.link_delay[(w.name, sick)] = delay
        for r in self.recoverers:
            faults.link_loss[(r.name, sick)] = value
        self.history.trace(
            f"storm: ledger {ledger_id}, {sick} slow to writers, flaky to recoverers"
        )
        # The recovery comes a little later, once the writer's window is full of adds
        # waiting for the slow bookie and the writer has stopped sending.
        later = rng.uniform(0.25, 0.6)
        for actor in self.recoverers[: rng.choice([1, 1, 2])]:
            actor.spawn(actor.recover, ledger_id, later)

    def _recover(self, n: int, pick: float, which: float) -> None:
        """Recover one ledger with ``n`` recoverers at once: mostly a ledger a writer is
        writing right now (the interesting case), else any ledger not closed yet."""
        history = self.history
        writing = sorted(
            w.current.ledger_id
            for w in self.writers
            if w.current is not None
            and (md := history.metadata.get(w.current.ledger_id)) is not None
            and md.state is LedgerState.OPEN
        )
        not_closed = sorted(lid for lid, md in history.metadata.items() if not md.is_closed)
        pool = writing if writing and pick < 0.7 else not_closed
        if not pool:
            return
        lid = pool[int(which * len(pool))]
        for actor in self.recoverers[: max(1, n)]:
            actor.spawn(actor.recover, lid)

    # -- the end ------------------------------------------------------------------------------

    async def _final_phase(self) -> None:
        cluster = self.cluster
        assert cluster is not None
        assert self.admin is not None
        history = self.history
        history.trace("final phase: every fault off, every bookie back")
        net = cluster.net
        net.heal()
        net.release()
        net.faults.loss = net.faults.spike = 0.0
        for sb in cluster.bookies.values():
            sb.faults.full = False
            sb.faults.latency = 0.0
            if sb.bookie is not None and sb.bookie.failure is not None:
                why = describe_failure(sb.bookie.failure)
                history.trace(f"{sb.name}: read-only ({why}), restarting it")
                await sb.crash(stale=0.0)
            await sb.start()
        self.stopping.set()
        await trio.sleep(
            4 * self.settings.request_timeout * max(self.plan.skews.values(), default=1.0)
        )
        if self._check():
            return
        for lid in sorted(history.metadata):
            stuck = unrecoverable(history.metadata[lid], history.lost)
            if stuck is not None:
                history.trace(f"ledger {lid} not recovered: {stuck}")
                continue
            for _attempt in range(6):
                md = history.metadata.get(lid)
                if md is None or md.is_closed:
                    break
                await self.admin.recover(lid)
                await trio.sleep(1.0)
            md = history.metadata.get(lid)
            if md is not None and not md.is_closed:
                if lid in history.data_lost:  # recovery may need what went with the bookie
                    history.trace(f"ledger {lid} not recovered: {history.data_lost[lid]}")
                    continue
                history.violation("L2", f"ledger {lid} still {md.state.name} after six recoveries")
                return
        gc_wait = float(SIM_BOOKIE_SETTINGS["gcWaitTime"]) / 1000  # type: ignore[arg-type]
        await trio.sleep(2 * gc_wait + 2)
        if history.lost:
            # RR: the workers' time to re-replicate what the lost bookie held, then the check.
            await trio.sleep(REPLICATION_BOUND + 1)
        if self._check():
            return
        for lid in sorted(history.metadata):
            if lid in history.data_lost:
                history.trace(f"ledger {lid} not read back: {history.data_lost[lid]}")
                continue
            stuck = unrecoverable(history.metadata[lid], history.lost)
            if stuck is not None:
                # Left open above for the same reason: the LAC read needs the coverage the
                # fencing needs, so its open fails as upstream's does (unknown, not empty).
                history.trace(f"ledger {lid} not read back, its LAC unknowable: {stuck}")
                continue
            await self.admin.read(lid, must_succeed=True)
        history.trace(f"end: {len(history.metadata)} ledgers checked, network digest {net.digest}")


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Only critical records from ``bookiesim`` loggers while inside: faults make the bookies
    and clients log warnings by the hundred, and the trace says what matters. The level is
    put back after, so whatever runs next in the process (a test that checks a warning) hears
    them again."""
    logger = logging.getLogger("bookiesim")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
