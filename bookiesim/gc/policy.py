"""When to compact, how fast, and what full disks do to it: upstream's rules as plain data.

Nothing here reads a clock or a disk; the collector passes times and states in. That keeps
each rule testable on its own (``tests/gc/test_policy.py``).

Which compaction a GC pass runs (upstream ``GarbageCollectorThread.runWithFlags``): major if
it is not suspended and either it was forced and forcing it is allowed, or it is enabled and
(forced, or its interval has passed since the last one); otherwise minor under the same rule.
A major compaction counts as a minor one too (it moves the minor timer). A compaction is
*enabled* when its interval and threshold are both > 0; forcing one is *allowed* with
``forceAllowCompaction`` when its threshold is in (0, 1), even if it is disabled.

Disks (upstream's ``LedgerDirsListener`` of the ledger storage): a ledger or index disk used
above ``diskUsageWarnThreshold`` is almost full and suspends major compaction, one above
``diskUsageThreshold`` is full and suspends both — unless ``isForceGCAllowWhenNoSpace``, in
which case either forces a GC pass instead (compaction is how space comes back). A disk that
drops from full to the warn zone resumes minor compaction only; one below the warn threshold
resumes both (or, with force allowed, stops forcing).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "CompactionKind",
    "CompactionSettings",
    "DiskAction",
    "DiskState",
    "Throttle",
    "choose_compaction",
    "classify_disk",
    "disk_actions",
]


class CompactionKind(enum.Enum):
    MAJOR = "major"
    MINOR = "minor"


class _GcConfig(Protocol):
    """The configuration keys compaction reads (``BookieConfig`` has them)."""

    @property
    def minor_compaction_threshold(self) -> float: ...
    @property
    def minor_compaction_interval(self) -> int: ...
    @property
    def major_compaction_threshold(self) -> float: ...
    @property
    def major_compaction_interval(self) -> int: ...
    @property
    def minor_compaction_max_time_millis(self) -> int: ...
    @property
    def major_compaction_max_time_millis(self) -> int: ...
    @property
    def force_allow_compaction(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    """Thresholds (fractions), intervals (seconds) and time limits (seconds, None = none)."""

    minor_threshold: float
    minor_interval: float
    minor_max_time: float | None
    major_threshold: float
    major_interval: float
    major_max_time: float | None
    force_allow: bool = False

    @classmethod
    def from_config(cls, cfg: _GcConfig) -> CompactionSettings:
        """Config validation (``BookieConfig.RULES``) has already rejected thresholds above 1,
        intervals shorter than gcWaitTime, and minor >= major when both are enabled."""

        def limit(millis: int) -> float | None:
            return millis / 1000 if millis > 0 else None

        return cls(
            minor_threshold=cfg.minor_compaction_threshold,
            minor_interval=cfg.minor_compaction_interval,
            minor_max_time=limit(cfg.minor_compaction_max_time_millis),
            major_threshold=cfg.major_compaction_threshold,
            major_interval=cfg.major_compaction_interval,
            major_max_time=limit(cfg.major_compaction_max_time_millis),
            force_allow=cfg.force_allow_compaction,
        )

    @property
    def minor_enabled(self) -> bool:
        return self.minor_interval > 0 and self.minor_threshold > 0

    @property
    def major_enabled(self) -> bool:
        return self.major_interval > 0 and self.major_threshold > 0

    @property
    def force_minor_allowed(self) -> bool:
        return self.force_allow and 0 < self.minor_threshold < 1

    @property
    def force_major_allowed(self) -> bool:
        return self.force_allow and 0 < self.major_threshold < 1

    def threshold(self, kind: CompactionKind) -> float:
        return self.major_threshold if kind is CompactionKind.MAJOR else self.minor_threshold

    def max_time(self, kind: CompactionKind) -> float | None:
        return self.major_max_time if kind is CompactionKind.MAJOR else self.minor_max_time


def choose_compaction(
    settings: CompactionSettings,
    *,
    now: float,
    last_major: float,
    last_minor: float,
    force: bool,
    suspend_major: bool,
    suspend_minor: bool,
) -> CompactionKind | None:
    """The compaction one GC pass runs, if any (see the module docstring)."""
    s = settings
    major = (s.force_major_allowed and force) or (
        s.major_enabled and (force or now - last_major > s.major_interval)
    )
    if major and not suspend_major:
        return CompactionKind.MAJOR
    minor = (s.force_minor_allowed and force) or (
        s.minor_enabled and (force or now - last_minor > s.minor_interval)
    )
    if minor and not suspend_minor:
        return CompactionKind.MINOR
    return None


class Throttle:
    """Paces compaction's re-adds at ``rate`` units per second (entries, or bytes with
    ``isThrottleByBytes``); :meth:`reserve` says until when the caller must wait."""

    def __init__(self, rate: float, *, by_bytes: bool) -> None:
        if rate <= 0:
            raise ValueError(f"compaction rate must be positive, not {rate}")
        self.rate = rate
        self.by_bytes = by_bytes
        self._free_at = float("-inf")

    def reserve(self, nbytes: int, now: float) -> float:
        """Take the permits for one entry of ``nbytes``; return the time it may be copied.

        Permits are not saved up while idle beyond one entry's worth: after a pause the
        next entry goes at once, the ones after it at the rate again.
        """
        cost = (nbytes if self.by_bytes else 1) / self.rate
        start = max(self._free_at, now)
        self._free_at = start + cost
        return start


class DiskState(enum.IntEnum):
    """Worst state of the bookie's ledger and index disks; ordered by severity."""

    WRITABLE = 0
    ALMOST_FULL = 1
    FULL = 2


def classify_disk(used_fraction: float, warn_threshold: float, full_threshold: float) -> DiskState:
    """Upstream's DiskChecker: above ``diskUsageThreshold`` full, above the warn one almost."""
    if used_fraction > full_threshold:
        return DiskState.FULL
    if used_fraction > warn_threshold:
        return DiskState.ALMOST_FULL
    return DiskState.WRITABLE


class DiskAction(enum.Enum):
    FORCE_GC = "force_gc"
    STOP_FORCING = "stop_forcing"
    SUSPEND_MAJOR = "suspend_major"
    SUSPEND_MINOR = "suspend_minor"
    RESUME_MAJOR = "resume_major"
    RESUME_MINOR = "resume_minor"


def disk_actions(
    previous: DiskState, current: DiskState, *, force_gc_allowed: bool
) -> list[DiskAction]:
    """What one disk check does to GC. A disk that stays (almost) full repeats its actions
    at every check, as upstream's monitor keeps calling its listeners; a disk that is
    writable again acts once, on the transition."""
    if current is DiskState.FULL:
        if force_gc_allowed:
            return [DiskAction.FORCE_GC]
        return [DiskAction.SUSPEND_MAJOR, DiskAction.SUSPEND_MINOR]
    if current is DiskState.ALMOST_FULL:
        if previous is DiskState.FULL:
            # Upstream's "just writable": out of full, still above the warn threshold.
            return [DiskAction.FORCE_GC] if force_gc_allowed else [DiskAction.RESUME_MINOR]
        return [DiskAction.FORCE_GC] if force_gc_allowed else [DiskAction.SUSPEND_MAJOR]
    if previous is DiskState.WRITABLE:
        return []
    if force_gc_allowed:
        return [DiskAction.STOP_FORCING]
    return [DiskAction.RESUME_MAJOR, DiskAction.RESUME_MINOR]
