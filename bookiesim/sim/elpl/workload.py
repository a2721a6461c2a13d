"""The workload of ``bookiesim sim elpl``: what each ledger does and when. Pure, no I/O.

A workload is drawn once from a seed and replayed unchanged in every run (interleaved,
per-ledger, with and without write-close, our and upstream's behaviour), so runs differ
only in how the bookies store and collect the same writes.

* ``ledgers`` ledgers are created at uniformly random times in ``[0, duration)``. Each is
  short-lived (exponential lifetime, mean ``short_lifetime``) or, with probability
  ``long_fraction``, long-lived (mean ``long_lifetime``); lifetimes are cut so that every
  ledger is closed by ``duration``. A ledger adds ``add_rate`` entries per second while it
  lives, each of a size drawn uniformly from ``entry_size``, then closes.
* With probability ``delete_fraction`` a closed ledger is deleted ``retention`` seconds
  (exponential) after it closed, if that is before ``duration``; the others stay live.
* ``slow_ledgers`` ledgers are created first, write one entry per ``ensemble`` bookie at once
  (so each of them has a log on every bookie of its ensemble from the start, the lowest ids),
  then one entry every ``slow_interval`` seconds — less often than anything else, but more
  often than the log expiry — until the run ends; they are never closed. This is the ledger
  of upstream issue #2728: its log stays active and pins leastUnflushedLogId.

Times are seconds of the run's clock (virtual or real). :meth:`WorkloadSpec.compressed`
divides every duration by a factor and multiplies the add rate by it: the same entries, in
less time (for runs in real time).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from enum import Enum

__all__ = ["ClusterShape", "LedgerKind", "LedgerPlan", "WorkloadSpec", "plan_workload"]


class LedgerKind(Enum):
    SHORT = "short"
    LONG = "long"
    SLOW = "slow"


@dataclass(frozen=True)
class ClusterShape:
    """Bookies in the cluster, and every ledger's ensemble and quorums."""

    bookies: int = 3
    ensemble: int = 3
    write_quorum: int = 2
    ack_quorum: int = 2

    def __post_init__(self) -> None:
        if not self.bookies >= self.ensemble >= self.write_quorum >= self.ack_quorum >= 1:
            raise ValueError(
                f"need bookies >= E >= Qw >= Qa >= 1, got {self.bookies} bookies, "
                f"E={self.ensemble} Qw={self.write_quorum} Qa={self.ack_quorum}"
            )


@dataclass(frozen=True)
class WorkloadSpec:
    """Parameters of a workload; see the module docstring. Defaults: two hours of a few
    hundred ledgers, meant for virtual time."""

    duration: float = 7200.0
    drain: float = 900.0
    """Seconds the run goes on after ``duration`` (only the slow ledgers write) so that GC
    can reclaim what was deleted last."""
    ledgers: int = 200
    long_fraction: float = 0.2
    short_lifetime: float = 120.0
    long_lifetime: float = 1800.0
    add_rate: float = 1.0
    entry_size: tuple[int, int] = (1024, 4096)
    delete_fraction: float = 0.9
    retention: float = 300.0
    slow_ledgers: int = 1
    slow_interval: float = 60.0
    sample_interval: float = 30.0

    def __post_init__(self) -> None:
        low, high = self.entry_size
        checks = {
            "duration": self.duration > 0,
            "drain": self.drain >= 0,
            "ledgers": self.ledgers >= 0,
            "long_fraction": 0 <= self.long_fraction <= 1,
            "short_lifetime": self.short_lifetime > 0,
            "long_lifetime": self.long_lifetime > 0,
            "add_rate": self.add_rate > 0,
            "entry_size": 1 <= low <= high,
            "delete_fraction": 0 <= self.delete_fraction <= 1,
            "retention": self.retention >= 0,
            "slow_ledgers": self.slow_ledgers >= 0,
            "slow_interval": self.slow_interval > 0,
            "sample_interval": self.sample_interval > 0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid workload parameter(s): {', '.join(bad)}")

    @property
    def end(self) -> float:
        return self.duration + self.drain

    def compressed(self, factor: float) -> WorkloadSpec:
        """The same entries in ``1/factor`` of the time."""
        if factor <= 0:
            raise ValueError(f"time scale must be positive, not {factor}")
        return dataclasses.replace(
            self,
            duration=self.duration / factor,
            drain=self.drain / factor,
            short_lifetime=self.short_lifetime / factor,
            long_lifetime=self.long_lifetime / factor,
            add_rate=self.add_rate * factor,
            retention=self.retention / factor,
            slow_interval=self.slow_interval / factor,
            sample_interval=self.sample_interval / factor,
        )


@dataclass(frozen=True)
class LedgerPlan:
    """One ledger's life: entries at ``start + i / rate`` (sizes given), then close, then
    maybe delete. Slow ledgers are never closed: their entries run to the end."""

    index: int
    kind: LedgerKind
    start: float
    entry_times: tuple[float, ...]
    entry_sizes: tuple[int, ...]
    close_at: float | None
    delete_at: float | None

    @property
    def bytes(self) -> int:
        return sum(self.entry_sizes)


def plan_workload(spec: WorkloadSpec, shape: ClusterShape, seed: int) -> list[LedgerPlan]:
    """Every ledger of the workload, slow ones first, then by creation time."""
    rng = random.Random(seed)
    low, high = spec.entry_size
    plans: list[LedgerPlan] = []
    burst = shape.ensemble  # one entry per ensemble position: a log on each bookie at once
    slow_times = [0.0] * burst
    t = spec.slow_interval
    while t < spec.end:
        slow_times.append(t)
        t += spec.slow_interval
    for i in range(spec.slow_ledgers):
        sizes = tuple(rng.randint(low, high) for _ in slow_times)
        plans.append(LedgerPlan(i, LedgerKind.SLOW, 0.0, tuple(slow_times), sizes, None, None))
    # Drawn in a fixed order per ledger so that changing one parameter (say, the retention)
    # leaves the other draws of the same seed alone.
    drawn = []
    for _ in range(spec.ledgers):
        start = rng.uniform(0.0, spec.duration)
        long = rng.random() < spec.long_fraction
        lifetime = rng.expovariate(1 / (spec.long_lifetime if long else spec.short_lifetime))
        deleted = rng.random() < spec.delete_fraction
        retention = rng.expovariate(1 / spec.retention) if spec.retention > 0 else 0.0
        drawn.append((start, long, lifetime, deleted, retention, rng.getrandbits(32)))
    drawn.sort()
    for n, (start, long, lifetime, deleted, retention, entry_seed) in enumerate(drawn):
        # At least one entry; all of them, and the close, before the workload ends.
        count = max(1, int(min(lifetime, spec.duration - start) * spec.add_rate))
        times = tuple(start + k / spec.add_rate for k in range(count))
        close_at = times[-1]
        entry_rng = random.Random(entry_seed)
        sizes = tuple(entry_rng.randint(low, high) for _ in range(count))
        delete_at = close_at + retention if deleted else None
        if delete_at is not None and delete_at >= spec.duration:
            delete_at = None
        kind = LedgerKind.LONG if long else LedgerKind.SHORT
        plans.append(
            LedgerPlan(spec.slow_ledgers + n, kind, start, times, sizes, close_at, delete_at)
        )
    return plans
