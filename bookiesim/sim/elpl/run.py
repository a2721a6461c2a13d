"""One run of the ELPL experiment: a cluster in this trio run, the workload through the real
client, the bookies' real GC, samples over time.

Each run gets a fresh cluster (:func:`~bookiesim.cluster.in_process.running_cluster`) under its
own directory. Bookies started that way have no ``metadataServiceUri``, so their GC is given
the cluster's store as its ledger source here, as a bookie process does for itself. Under
virtual time the store is a :class:`~bookiesim.metadata.memory_store.MemoryStore`: SQLite
works in threads, and a thread at work makes the autojumping clock leap (see that module).

Write-close off means the bookies do not advertise it in their registration, so the client
does not send it — exactly what a client sees with bookies that do not know the operation.
With ``upstreamBehaviour`` the bookies advertise nothing either (as a bookie process would
register itself).

A bookie-loss run (:mod:`.loss`) also runs a stand-alone auto-recovery service from the start
and stops one bookie for good at ``loss_at``; write-close after replication is on or off in
the service's configuration, the writer's own write-close stays on. A ledger that
auto-recovery fences while it is still written (its last ensemble had the lost bookie and its
writer did not replace it within ``openLedgerRereplicationGracePeriod``) ends there, as a
fenced writer's would; the slow ledger's writer then starts a new one, as Pulsar rolls over.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.autorecovery.service import AutoRecoveryService
from bookiesim.client.bookkeeper import BookKeeper, ClientConfig
from bookiesim.client.digest import DigestManager, DigestType
from bookiesim.client.errors import BKError
from bookiesim.cluster.in_process import LocalCluster, running_cluster
from bookiesim.metadata.ledgers import LedgerManager
from bookiesim.metadata.memory_store import MemoryStore
from bookiesim.metadata.registration import FEATURE_WRITE_CLOSE
from bookiesim.sim.elpl.loss import AUTORECOVERY_ID, LossTracker, choose_victim, ledger_metadata
from bookiesim.sim.elpl.probes import (
    GcObserver,
    ReclaimTracker,
    ledger_log_ids,
    probe_bookie,
)
from bookiesim.sim.elpl.workload import (
    ClusterShape,
    LedgerKind,
    LedgerPlan,
    WorkloadSpec,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from bookiesim.autorecovery.config import AutoRecoveryConfig
    from bookiesim.client.ledger_handle import LedgerHandle

__all__ = [
    "RunResult",
    "RunSpec",
    "Sample",
    "run_experiment_run",
]


@dataclass(frozen=True)
class RunSpec:
    """One cell of the experiment's matrix."""

    per_ledger: bool
    write_close: bool
    upstream: bool = False
    bookie_loss: bool = False
    """A bookie is lost for good at ``loss_at`` and auto-recovery heals its ledgers."""
    replication_write_close: bool = True
    """With a loss: WriteClose to the bookie that received the copies (BP-32's third case)."""

    @property
    def name(self) -> str:
        if not self.per_ledger:
            return "interleaved" + (" (upstream)" if self.upstream else "")
        if self.upstream:
            return "per-ledger, upstream"
        if self.bookie_loss:
            on = "on" if self.replication_write_close else "off"
            return f"per-ledger, bookie lost, write-close after replication {on}"
        return f"per-ledger, write-close {'on' if self.write_close else 'off'}"

    @property
    def slug(self) -> str:
        mode = "per-ledger" if self.per_ledger else "interleaved"
        wc = "wc-on" if self.write_close else "wc-off"
        if self.bookie_loss:
            wc = f"loss-rwc-{'on' if self.replication_write_close else 'off'}"
        return f"{mode}-{'upstream' if self.upstream else wc}"

    @property
    def sends_write_close(self) -> bool:
        return self.write_close and not self.upstream


@dataclass(frozen=True)
class Sample:
    """Cluster-wide figures at ``t`` seconds into the run (sums over bookies unless said)."""

    t: float
    open_log_files: int
    active_logs: int
    lag: int
    """Largest over bookies of newest log id + 1 - leastUnflushedLogId."""
    disk_bytes: int
    live_bytes: int
    written_bytes: int
    reclaimed_bytes: int
    copied_bytes: int
    awaiting_reclaim: int
    slow_pins_pointer: bool | None
    """Every slow ledger's active log is at or above leastUnflushedLogId on every bookie
    holding it, i.e. the pointer cannot pass it; None before the slow ledgers exist, and
    in interleaved mode (the pointer always sits at the one shared log)."""
    copies_active: int | None = None
    """Bookie-loss runs, after the loss: re-replicated ledgers whose log on the bookie that
    received the copies is still active (None otherwise)."""


@dataclass
class RunResult:
    run: RunSpec
    samples: list[Sample] = field(default_factory=list)
    reclaims: list[tuple[int, float, float | None]] = field(default_factory=list)
    """(ledger id, deleted at, delete-to-reclaim seconds or None)."""
    gc_passes: int = 0
    max_gc_pass_seconds: float = 0.0
    reclaimed_by_deletion: int = 0
    reclaimed_by_compaction: int = 0
    copied_bytes: int = 0
    copied_entries: int = 0
    written_bytes: int = 0
    live_bytes: int = 0
    gc_reclaim_delays: list[float] = field(default_factory=list)
    rotations: dict[str, int] = field(default_factory=dict)
    write_closes_sent: int = 0
    wall_seconds: float = 0.0
    loss: dict[str, Any] | None = None
    """Bookie-loss runs: :meth:`.loss.LossTracker.summary`, and ``copyRecords``."""
    writes_fenced: int = 0
    """Ledgers whose writer was fenced off (auto-recovery recovered them), loss runs only."""


def _entry_overhead(digest: DigestType) -> int:
    """Bytes an entry takes in an entry log beyond its payload: size field + digest header."""
    return 4 + len(DigestManager(1, b"", digest).package(0, -1, 1, b"x")) - 1


class _Recorder:
    """Accounting shared by the ledger tasks, the sampler and the GC observers."""

    def __init__(
        self, cluster: LocalCluster, shape: ClusterShape, t0: float, *, per_ledger: bool
    ) -> None:
        self.cluster = cluster
        self.per_ledger = per_ledger
        self.shape = shape
        self.t0 = t0
        self.overhead = _entry_overhead(DigestType.CRC32C)
        self.written = 0
        self.live = 0
        self.ledger_bytes: dict[int, int] = {}
        self.slow_ledgers: set[int] = set()
        self.tracker = ReclaimTracker()
        self.observers: dict[str, GcObserver] = {}
        self.loss: LossTracker | None = None
        self.writes_fenced = 0

    def now(self) -> float:
        return trio.current_time() - self.t0

    def attach_gc(self) -> None:
        for bookie_id in self.cluster.running_ids():
            gc = self.cluster.service(bookie_id).bookie.gc
            gc.ledger_source = LedgerManager(self.cluster.store)
            observer = GcObserver(gc.metrics, self._pass_callback(bookie_id))
            gc.metrics = observer
            self.observers[bookie_id] = observer

    def _pass_callback(self, bookie_id: str) -> Callable[[], None]:
        def done() -> None:
            logger = self.cluster.service(bookie_id).bookie.storage.entry_logger
            self.tracker.pass_done(bookie_id, set(logger.log_ids()), self.now())

        return done

    def added(self, ledger_id: int, size: int) -> None:
        stored = (size + self.overhead) * self.shape.write_quorum
        self.written += stored
        self.live += stored
        self.ledger_bytes[ledger_id] = self.ledger_bytes.get(ledger_id, 0) + stored

    def holdings(self, ledger_id: int) -> dict[str, set[int]]:
        return {
            b: ledger_log_ids(self.cluster.service(b).bookie, ledger_id)
            for b in self.cluster.running_ids()
        }

    def deleted(self, ledger_id: int, holdings: dict[str, set[int]]) -> None:
        self.live -= self.ledger_bytes.pop(ledger_id, 0)
        self.tracker.deleted(ledger_id, self.now(), holdings)

    def sample(self) -> Sample:
        probes = {
            b: probe_bookie(self.cluster.service(b).bookie) for b in self.cluster.running_ids()
        }
        return Sample(
            t=self.now(),
            open_log_files=sum(p.open_log_files for p in probes.values()),
            active_logs=sum(p.active_logs for p in probes.values()),
            lag=max((p.lag for p in probes.values()), default=0),
            disk_bytes=sum(p.disk_bytes for p in probes.values()),
            live_bytes=self.live,
            written_bytes=self.written,
            reclaimed_bytes=sum(
                o.reclaimed_by_deletion + o.reclaimed_by_compaction for o in self.observers.values()
            ),
            copied_bytes=sum(o.copied_bytes for o in self.observers.values()),
            awaiting_reclaim=self.tracker.awaiting,
            slow_pins_pointer=self._slow_pins_pointer(),
            copies_active=None if self.loss is None else self.loss.active_copies,
        )

    def _slow_pins_pointer(self) -> bool | None:
        if not self.slow_ledgers or not self.per_ledger:
            return None
        for bookie_id in self.cluster.running_ids():
            storage = self.cluster.service(bookie_id).bookie.storage
            logger = storage.entry_logger
            for ledger_id in self.slow_ledgers:
                if not storage.ledger_exists(ledger_id):
                    continue  # not written to this bookie (yet)
                log_id = logger.current_log_id(ledger_id)
                if log_id is None or log_id < logger.least_unflushed_log_id:
                    return False
        return True

    def result(self, run: RunSpec, samples: list[Sample], wall: float) -> RunResult:
        observers = list(self.observers.values())
        rotations: dict[str, int] = {}
        for bookie_id in self.cluster.running_ids():
            logger = self.cluster.service(bookie_id).bookie.storage.entry_logger
            for reason, n in logger.rotations.items():
                rotations[reason.value] = rotations.get(reason.value, 0) + n
        return RunResult(
            run=run,
            samples=samples,
            reclaims=[(r.ledger_id, r.deleted_at, r.delay) for r in self.tracker.all_records()],
            gc_passes=sum(o.passes for o in observers),
            max_gc_pass_seconds=max((o.max_pass_seconds for o in observers), default=0.0),
            reclaimed_by_deletion=sum(o.reclaimed_by_deletion for o in observers),
            reclaimed_by_compaction=sum(o.reclaimed_by_compaction for o in observers),
            copied_bytes=sum(o.copied_bytes for o in observers),
            copied_entries=sum(o.copied_entries for o in observers),
            written_bytes=self.written,
            live_bytes=self.live,
            gc_reclaim_delays=sorted(d for o in observers for d in o.gc_reclaim_delays),
            rotations=rotations,
            wall_seconds=wall,
        )


async def run_experiment_run(
    run: RunSpec,
    plans: list[LedgerPlan],
    spec: WorkloadSpec,
    shape: ClusterShape,
    overrides: Mapping[str, object],
    root: Path,
    *,
    seed: int,
    virtual_time: bool,
    progress: Callable[[float], None] = lambda t: None,
    loss_at: float | None = None,
    autorecovery: AutoRecoveryConfig | None = None,
) -> RunResult:
    """Run the workload once against a fresh cluster under ``root``; see the module
    docstring. ``progress`` gets the run's elapsed seconds at every sample. A bookie-loss
    run needs ``loss_at`` (seconds into the run) and the auto-recovery configuration."""
    wall_start = time.perf_counter()
    bookie_overrides: dict[str, Any] = {
        **overrides,
        "entry_log_per_ledger_enabled": run.per_ledger,
        "upstream_behaviour": run.upstream,
    }
    features = frozenset({FEATURE_WRITE_CLOSE}) if run.sends_write_close else frozenset()
    store = MemoryStore() if virtual_time else None
    payload = os.urandom(spec.entry_size[1])
    quorums = (shape.ensemble, shape.write_quorum, shape.ack_quorum)
    try:
        async with running_cluster(
            root, shape.bookies, features=features, overrides=bookie_overrides, store=store
        ) as cluster:
            recorder = _Recorder(cluster, shape, trio.current_time(), per_ledger=run.per_ledger)
            recorder.attach_gc()
            samples: list[Sample] = []

            async def add(bk: BookKeeper, lh: LedgerHandle, plan: LedgerPlan, size: int) -> bool:
                """One entry; False when auto-recovery fenced the ledger (loss runs)."""
                try:
                    await lh.add_entry(payload[:size])
                except BKError:
                    if not run.bookie_loss:
                        raise
                    recorder.writes_fenced += 1
                    return False
                recorder.added(lh.ledger_id, size)
                if plan.kind is LedgerKind.SLOW:
                    recorder.slow_ledgers.add(lh.ledger_id)
                return True

            async def ledger_task(bk: BookKeeper, plan: LedgerPlan) -> None:
                t0 = recorder.t0
                await trio.sleep_until(t0 + plan.start)
                lh = await bk.create_ledger(*quorums)
                for at, size in zip(plan.entry_times, plan.entry_sizes, strict=True):
                    await trio.sleep_until(t0 + at)
                    if not await add(bk, lh, plan, size):
                        if plan.kind is not LedgerKind.SLOW:
                            return
                        lh = await bk.create_ledger(*quorums)  # rolls over, as Pulsar does
                        await add(bk, lh, plan, size)
                if plan.close_at is None:
                    return
                try:
                    await lh.close()
                except BKError:
                    if not run.bookie_loss:
                        raise
                    recorder.writes_fenced += 1
                    return
                if plan.delete_at is None:
                    return
                await trio.sleep_until(t0 + plan.delete_at)
                # Where the entries are, read just before the delete: see probes.py.
                holdings = recorder.holdings(lh.ledger_id)
                await bk.delete_ledger(lh.ledger_id)
                recorder.deleted(lh.ledger_id, holdings)

            async def sampler() -> None:
                while True:
                    samples.append(recorder.sample())
                    progress(recorder.now())
                    await trio.sleep(spec.sample_interval)

            async def lose(bk: BookKeeper, at: float) -> None:
                await trio.sleep_until(recorder.t0 + at)
                metadata = await ledger_metadata(bk)
                victim = choose_victim(metadata, cluster.running_ids())
                await cluster.stop_bookie(victim)
                recorder.tracker.bookie_gone(victim, recorder.now())
                recorder.loss = LossTracker(cluster, victim, metadata, recorder.now())
                await recorder.loss.follow(bk, recorder.now, spec.sample_interval / 30)

            client_config = ClientConfig(seed=seed)
            async with BookKeeper(cluster.store, config=client_config) as bk:
                async with trio.open_nursery() as nursery:
                    if run.bookie_loss:
                        if loss_at is None or autorecovery is None:
                            raise ValueError("a bookie-loss run needs loss_at and autorecovery")
                        config = autorecovery.replace(
                            write_close_after_replication=run.replication_write_close
                        )
                        service = AutoRecoveryService(
                            cluster.store, config, bookie_id=AUTORECOVERY_ID
                        )
                        await nursery.start(service.run)
                        nursery.start_soon(lose, bk, loss_at)
                    nursery.start_soon(sampler)
                    for plan in plans:
                        nursery.start_soon(ledger_task, bk, plan)
                    await trio.sleep_until(recorder.t0 + spec.end)
                    nursery.cancel_scope.cancel()
                samples.append(recorder.sample())
                progress(recorder.now())
                sent = bk.stats.write_close_sent
            result = recorder.result(run, samples, time.perf_counter() - wall_start)
            result.write_closes_sent = sent
            result.writes_fenced = recorder.writes_fenced
            if recorder.loss is not None:
                result.loss = recorder.loss.summary(result.reclaims)
            return result
    finally:
        if store is not None:
            await store.close()
