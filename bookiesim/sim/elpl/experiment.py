"""The ELPL experiment as a whole: which runs, with which bookie settings, one after another.

Bookie settings (upstream keys) are chosen so that two hours of workload exercise every
mechanism, and are printed with the results:

* ``gcWaitTime=60000``: upstream's code default is 10 minutes, its sample configuration
  says 1 s; a minute is a common production value and keeps a pass every few samples.
* ``logSizeLimit=8 MiB`` instead of 1 GiB: with interleaved logs, space only comes back
  once the shared log has rotated; a few hundred MB of workload must fill several logs.
* ``minorCompactionInterval=900``, ``majorCompactionInterval=3600`` (upstream: 1 h, 1 day):
  so that both compactions run within the run. Thresholds stay upstream's (0.2, 0.8).
* ``compactionRateByEntries=10000`` (upstream: 1000/s): the throttle sleeps on trio's clock,
  and at 1000 entries/s a major compaction of interleaved logs keeps a GC pass busy for
  minutes, which would delay every reclaim behind it; raised so that the delete-to-reclaim
  times measure GC's scheduling, not the throttle.
* ``journalSyncData=false``: durability is not under study and an fsync per journal batch
  would dominate the wall time; entry logs are still fsynced at every checkpoint.
* ``flushInterval=10000`` and ``entrylogMapAccessExpiryTimeInSeconds=300``: the defaults.
* ``ledgerStorageClass=InterleavedLedgerStorage`` (the default is the sorted storage): the
  experiment studies when logs are rotated, sealed and reclaimed, so each add goes to its
  log at once. With the sorted storage every rotation waits for the table's next flush
  (at the latest the next checkpoint), which adds up to ``flushInterval`` to each seal and
  reclaim; the figures recorded so far were measured this way.

In real time (no ``--virtual-time``) the workload and every timer are compressed by the time
scale (durations divided, rates multiplied), so a two-hour workload takes ``7200 / scale``
seconds; integer keys are rounded (at least 1).

The bookie-loss runs (``--bookie-loss``, :mod:`.loss`) add auto-recovery's keys at upstream's
defaults (:data:`~.loss.AUTORECOVERY_SETTINGS`), scaled like the others, and need a bookie
more than the ensemble so that the lost one has a replacement.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import trio
import trio.testing

from bookiesim.autorecovery.config import AutoRecoveryConfig
from bookiesim.bookie.config import CONFIG_KEYS, BookieConfig
from bookiesim.sim.elpl.run import RunResult, RunSpec, run_experiment_run
from bookiesim.sim.elpl.workload import (
    ClusterShape,
    LedgerPlan,
    WorkloadSpec,
    plan_workload,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "DEFAULT_SETTINGS",
    "ExperimentConfig",
    "ExperimentResult",
    "config_of",
    "run_experiment",
    "run_matrix",
    "scaled_settings",
    "settings_to_overrides",
]

MIB = 1 << 20

DEFAULT_SETTINGS: Mapping[str, object] = {
    "gcWaitTime": 60_000,
    "flushInterval": 10_000,
    "entrylogMapAccessExpiryTimeInSeconds": 300,
    "logSizeLimit": 8 * MIB,
    "minorCompactionInterval": 900,
    "majorCompactionInterval": 3600,
    "compactionRateByEntries": 10_000,
    "journalSyncData": False,
    "ledgerStorageClass": "InterleavedLedgerStorage",
}

_MILLIS_KEYS = (
    "gcWaitTime",
    "flushInterval",
    "openLedgerRereplicationGracePeriod",
    "lockReleaseOfFailedLedgerGracePeriod",
    "rwRereplicateBackoffMs",
)
_SECONDS_KEYS = (
    "entrylogMapAccessExpiryTimeInSeconds",
    "minorCompactionInterval",
    "majorCompactionInterval",
    "lostBookieRecoveryDelay",
)


_ATTR_OF_KEY = {spec.key: spec.attr for spec in CONFIG_KEYS}


def config_of(settings: Mapping[str, object]) -> BookieConfig:
    """A bookie configuration with ``settings`` (upstream keys), validated and coerced as a
    configuration file's would be (directories are placeholders)."""
    return BookieConfig.from_mapping(
        {"journalDirectory": "/nonexistent", "ledgerDirectories": "/nonexistent", **settings}
    )


def settings_to_overrides(settings: Mapping[str, object]) -> dict[str, object]:
    """Bookie settings by upstream key (``gcWaitTime``) -> ``BookieConfig.replace`` names."""
    cfg = config_of(settings)
    return {_ATTR_OF_KEY[key]: getattr(cfg, _ATTR_OF_KEY[key]) for key in settings}


def scaled_settings(settings: Mapping[str, object], factor: float) -> dict[str, object]:
    """``settings`` with their timers divided by ``factor`` (integers, at least 1), and the
    compaction intervals kept at or above ``gcWaitTime`` as the bookie requires."""
    out = dict(settings)
    if factor == 1:
        return out
    for key in (*_MILLIS_KEYS, *_SECONDS_KEYS):
        value = out.get(key)
        if isinstance(value, int) and value > 0:
            out[key] = max(1, round(value / factor))
    gc_wait = out.get("gcWaitTime")
    if isinstance(gc_wait, int):
        floor = math.ceil(gc_wait / 1000)
        for key in ("minorCompactionInterval", "majorCompactionInterval"):
            value = out.get(key)
            if isinstance(value, int) and 0 < value < floor:
                out[key] = floor
        minor, major = out.get("minorCompactionInterval"), out.get("majorCompactionInterval")
        if isinstance(minor, int) and isinstance(major, int) and 0 < major <= minor:
            out["majorCompactionInterval"] = minor + 1
    return out


def run_matrix(
    *, write_close: str = "both", upstream: bool = False, bookie_loss: bool = False
) -> list[RunSpec]:
    """The runs: interleaved once (write-close cannot change anything with one shared log:
    there is no per-ledger log to rotate), per-ledger with write-close on and/or off, and
    with ``upstream`` per-ledger as upstream behaves (no write-close there). Interleaved
    under ``upstreamBehaviour`` is not run: with one log, rotated logs are always below
    leastUnflushedLogId, so upstream's GC sees exactly what ours sees. With ``bookie_loss``,
    per-ledger runs (writers' write-close on) that lose a bookie, with write-close after
    replication on and off."""
    choices = {"on": (True,), "off": (False,), "both": (True, False)}[write_close]
    runs = [RunSpec(per_ledger=False, write_close=choices[0])]
    runs += [RunSpec(per_ledger=True, write_close=wc) for wc in choices]
    if upstream:
        runs.append(RunSpec(per_ledger=True, write_close=False, upstream=True))
    if bookie_loss:
        runs += [
            RunSpec(per_ledger=True, write_close=True, bookie_loss=True, replication_write_close=r)
            for r in (True, False)
        ]
    return runs


@dataclass(frozen=True)
class ExperimentConfig:
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    shape: ClusterShape = field(default_factory=ClusterShape)
    settings: Mapping[str, object] = field(default_factory=lambda: dict(DEFAULT_SETTINGS))
    """Bookie settings by upstream key, as the bookies get them (already scaled)."""
    runs: tuple[RunSpec, ...] = tuple(run_matrix())
    seed: int = 1
    virtual_time: bool = True
    time_scale: float = 1.0
    """How much the workload was compressed (informational: ``workload`` is already)."""
    data_dir: Path | None = None
    """Where the bookies' files go (a subdirectory per run, removed after it); default a
    new temporary directory, on /dev/shm under virtual time (fsync costs nothing there, and
    in virtual time it would not count anyway)."""
    loss_at: float | None = None
    """Seconds into the (compressed) run at which the bookie-loss runs lose a bookie."""

    @property
    def bounds(self) -> dict[str, float]:
        """The timers that bound delete-to-reclaim, in seconds, as the bookies run them."""
        cfg = config_of(self.settings)
        return {
            "flushInterval": cfg.flush_interval / 1000,
            "gcWaitTime": cfg.gc_wait_time / 1000,
            "expiry": float(cfg.entrylog_map_access_expiry_time_in_seconds),
        }


@dataclass
class ExperimentResult:
    config: ExperimentConfig
    plans: list[LedgerPlan]
    runs: list[RunResult]


def _data_root(config: ExperimentConfig) -> tuple[Path, bool]:
    if config.data_dir is not None:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        return config.data_dir, False
    shm = Path("/dev/shm")
    parent = str(shm) if config.virtual_time and shm.is_dir() and _writable(shm) else None
    return Path(tempfile.mkdtemp(prefix="bookiesim-elpl-", dir=parent)), True


def _writable(path: Path) -> bool:
    try:
        with tempfile.TemporaryFile(dir=path):
            return True
    except OSError:
        return False


def run_experiment(
    config: ExperimentConfig,
    *,
    on_run_start: Callable[[RunSpec], None] = lambda run: None,
    progress: Callable[[RunSpec, float], None] = lambda run, t: None,
) -> ExperimentResult:
    """Every run of ``config``, one after another, each in its own trio run (under a
    ``MockClock`` with autojump when ``virtual_time``)."""
    plans = plan_workload(config.workload, config.shape, config.seed)
    overrides = settings_to_overrides(config.settings)
    autorecovery = AutoRecoveryConfig.from_bookie_config(config_of(config.settings))
    loss_at = config.loss_at if config.loss_at is not None else config.workload.duration / 2
    root, owned = _data_root(config)
    results = []
    try:
        for run in config.runs:
            on_run_start(run)
            run_root = root / run.slug
            clock = trio.testing.MockClock(autojump_threshold=0) if config.virtual_time else None

            async def main(run: RunSpec = run, run_root: Path = run_root) -> RunResult:
                return await run_experiment_run(
                    run,
                    plans,
                    config.workload,
                    config.shape,
                    overrides,
                    run_root,
                    seed=config.seed,
                    virtual_time=config.virtual_time,
                    progress=lambda t: progress(run, t),
                    loss_at=loss_at,
                    autorecovery=autorecovery,
                )

            results.append(trio.run(main, clock=clock))
            shutil.rmtree(run_root, ignore_errors=True)
    finally:
        if owned:
            shutil.rmtree(root, ignore_errors=True)
    return ExperimentResult(config, plans, results)
