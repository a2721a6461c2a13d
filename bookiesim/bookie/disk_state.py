"""Which ledger (or index) directories are full: upstream's LedgerDirsManager and the rules of
its LedgerDirsMonitor's check, without I/O.

One :class:`DirsState` per group of directories (the ledger dirs; the index dirs when they
are configured apart), stepped by :func:`check` with the measured used fractions
(``1 - available / total`` per directory's file system, as upstream's DiskChecker). The rules,
upstream's (4.17.4):

- a writable directory used above ``diskUsageThreshold`` becomes *filled*; one above
  ``diskUsageWarnThreshold`` is *almost full* (still writable);
- while some directory of the group is writable, a filled one used at or below
  ``diskUsageThreshold`` is writable again;
- while none is (the bookie is read-only), filled ones come back only once the group's
  total usage (over its distinct file systems) is below ``diskUsageLwmThreshold``, and then
  each only if it is itself at or below ``diskUsageThreshold``. The low-water mark keeps a
  bookie that hovers at the threshold from flapping between read-only and writable.

A group with no writable directory is upstream's ``allDisksFull``: the bookie turns read-only
(or, with ``readOnlyModeEnabled=false``, shuts down). A write that failed for lack of space
(ENOSPC) fills every directory of the group at once (:meth:`DirsState.all_filled`), as
upstream's SyncThread reports ``allDisksFull`` when it cannot write: the way back is the
low-water mark's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bookiesim.gc.policy import DiskState

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from bookiesim.bookie.config import BookieConfig

__all__ = ["CheckResult", "DirSpace", "DirsState", "DiskThresholds", "check", "total_usage"]


@dataclass(frozen=True)
class DiskThresholds:
    """``diskUsageThreshold``, ``diskUsageWarnThreshold``, ``diskUsageLwmThreshold``."""

    full: float
    warn: float
    lwm: float

    @classmethod
    def from_config(cls, cfg: BookieConfig) -> DiskThresholds:
        return cls(
            full=cfg.disk_usage_threshold,
            warn=cfg.disk_usage_warn_threshold,
            lwm=cfg.effective_disk_usage_lwm_threshold,
        )


@dataclass(frozen=True)
class DirsState:
    """One group's directories and which of them are filled."""

    dirs: tuple[str, ...]
    filled: frozenset[str] = field(default_factory=frozenset)

    @property
    def writable(self) -> tuple[str, ...]:
        return tuple(d for d in self.dirs if d not in self.filled)

    @property
    def all_full(self) -> bool:
        """No writable directory left: upstream's ``NoWritableLedgerDirException``."""
        return not self.writable

    def all_filled(self) -> DirsState:
        """Every directory filled (a write failed for lack of space)."""
        return DirsState(self.dirs, frozenset(self.dirs))


@dataclass(frozen=True)
class CheckResult:
    """The group after one check, and what changed in it."""

    state: DirsState
    newly_filled: tuple[str, ...] = ()
    """Writable before, used above ``diskUsageThreshold`` now (logged, GC told)."""
    almost_full: tuple[str, ...] = ()
    """Writable, used above ``diskUsageWarnThreshold``."""
    recovered: tuple[str, ...] = ()
    """Filled before, writable again."""

    @property
    def disk_state(self) -> DiskState:
        """The group's worst state, for GC: FULL while any directory is filled (so its
        compaction stays suspended until the directory is writable again, not merely below
        the threshold), else ALMOST_FULL while any is above the warn threshold."""
        if self.state.filled:
            return DiskState.FULL
        if self.almost_full:
            return DiskState.ALMOST_FULL
        return DiskState.WRITABLE


@dataclass(frozen=True)
class DirSpace:
    """One directory's file system as measured: its id (``st_dev``), total and available
    bytes (``f_blocks`` and ``f_bavail`` times ``f_frsize``)."""

    fs: int
    total: int
    available: int

    @property
    def used(self) -> float:
        """Upstream's DiskChecker: ``1 - usable / total`` (0 for a file system of no size)."""
        return 1.0 - self.available / self.total if self.total > 0 else 0.0


def total_usage(spaces: Iterable[DirSpace]) -> float:
    """Upstream's ``getTotalDiskUsage``: ``1 - available / total`` over the distinct file
    systems of a group's directories."""
    seen: set[int] = set()
    total = available = 0
    for space in spaces:
        if space.fs not in seen:
            seen.add(space.fs)
            total += space.total
            available += space.available
    return 1.0 - available / total if total > 0 else 0.0


def check(
    state: DirsState,
    usage: Mapping[str, float],
    group_usage: float,
    thresholds: DiskThresholds,
) -> CheckResult:
    """One check of a group (module docstring): ``usage`` holds each directory's used
    fraction (a directory missing from it keeps its state), ``group_usage`` the group's total
    (:func:`total_usage`)."""
    filled = set(state.filled)
    newly_filled: list[str] = []
    almost_full: list[str] = []
    for d in state.writable:
        used = usage.get(d)
        if used is None:
            continue
        if used > thresholds.full:
            filled.add(d)
            newly_filled.append(d)
        elif used > thresholds.warn:
            almost_full.append(d)
    # Upstream re-reads the writable list after the first pass: a group filled by this
    # check waits for the low-water mark like one that was already full.
    make_writable = len(filled) < len(state.dirs) or group_usage < thresholds.lwm
    recovered: list[str] = []
    if make_writable:
        for d in state.dirs:
            if d in filled and d not in newly_filled:
                used = usage.get(d)
                if used is not None and used <= thresholds.full:
                    filled.discard(d)
                    recovered.append(d)
                    if used > thresholds.warn:
                        almost_full.append(d)
    return CheckResult(
        DirsState(state.dirs, frozenset(filled)),
        tuple(newly_filled),
        tuple(almost_full),
        tuple(recovered),
    )
