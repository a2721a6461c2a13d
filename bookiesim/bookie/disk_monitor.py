"""Upstream's LedgerDirsMonitor: the disk check that turns the bookie read-only and back.

Every ``diskCheckInterval`` each ledger directory (and each index directory, when they are
configured apart: a group of their own, as upstream monitors its index dirs manager) is
measured with ``statvfs`` and the group stepped by :func:`~.disk_state.check` (the rules and
thresholds are in :mod:`.disk_state`). A group with no writable directory left turns the
bookie read-only (:attr:`LedgerDirsMonitor.all_full`); GC gets the worst state (compaction
suspended or forced, ``isForceGCAllowWhenNoSpace``). A write that failed for lack of space
fills every directory at once (:meth:`LedgerDirsMonitor.out_of_space`). The same measures
feed the metrics and the ``GET_BOOKIE_INFO`` answer.

:func:`check_directories` is the start-up check (upstream's ``DiskChecker.checkDir``): every
journal, ledger and index directory must be a directory this process can create files in.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
from typing import TYPE_CHECKING

import trio

from bookiesim.bookie.disk_state import (
    CheckResult,
    DirSpace,
    DirsState,
    DiskThresholds,
    check,
    total_usage,
)
from bookiesim.gc.policy import DiskState

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from bookiesim.bookie.config import BookieConfig

__all__ = [
    "NO_SPACE_ERRNOS",
    "LedgerDirsMonitor",
    "UnusableDirectoryError",
    "check_directories",
    "is_out_of_space",
]

log = logging.getLogger(__name__)

NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""The errors that mean "no room left" rather than "the disk failed"."""


def is_out_of_space(exc: BaseException) -> bool:
    """A write failed for lack of space (ENOSPC, or a quota: EDQUOT)."""
    return isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS


class UnusableDirectoryError(OSError):
    """A configured directory cannot be used (not a directory, not writable, read-only
    file system); the message names it."""

    def __str__(self) -> str:
        return str(self.strerror)


def check_directories(cfg: BookieConfig) -> None:
    """Create every journal, ledger and index directory (and its ``current``) where missing
    and make sure a file can be created in it; :class:`UnusableDirectoryError` naming the
    first that cannot, before anything is opened."""
    roles: dict[Path, str] = {}
    for role, dirs in (
        ("journal", cfg.effective_journal_directories),
        ("ledger", cfg.ledger_directories),
        ("index", cfg.effective_index_directories),
    ):
        for d in dirs:
            roles.setdefault(d, role)
    for d, role in roles.items():
        current = os.path.join(str(d), "current")
        try:
            os.makedirs(current, exist_ok=True)
            # A probe file: access(2) says nothing of a full disk, an immutable directory or
            # a file system remounted read-only under a root process.
            with tempfile.NamedTemporaryFile(dir=current, prefix=".probe-"):
                pass
        except OSError as exc:
            if is_out_of_space(exc):
                continue  # a full disk is no refusal: the bookie starts read-only
            reason = exc.strerror or str(exc)
            raise UnusableDirectoryError(
                exc.errno, f"{role} directory {d} is not writable: {reason}"
            ) from exc


def _measure(d: str) -> DirSpace:
    st = os.statvfs(d)
    return DirSpace(os.stat(d).st_dev, st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


class LedgerDirsMonitor:
    """The filled/writable state of the ledger (and index) directories, and its check."""

    def __init__(self, cfg: BookieConfig) -> None:
        self._cfg = cfg
        self.thresholds = DiskThresholds.from_config(cfg)
        ledger = tuple(str(d) for d in cfg.ledger_directories)
        index = tuple(str(d) for d in cfg.effective_index_directories)
        self.groups: list[DirsState] = [DirsState(ledger)]
        if set(index) != set(ledger):
            self.groups.append(DirsState(index))
        self.disk_state = DiskState.WRITABLE
        self.usage: dict[str, float] = {}
        """Each directory's used fraction at the last check."""
        self.high_priority_writes_allowed = True
        """Upstream's ``highPriorityWritesAllowed``: False while some group has no writable
        directory and none of its directories keeps ``minUsableSizeForHighPriorityWrites``
        available (or a write has just found no space at all)."""

    @property
    def all_full(self) -> bool:
        """Some group has no writable directory: upstream's ``allDisksFull``."""
        return any(group.all_full for group in self.groups)

    def writable_ledger_dirs(self) -> int:
        """Ledger directories not filled (upstream's ``bookie_ledger_writable_dirs``)."""
        return len(self.groups[0].writable)

    def check(self) -> CheckResult | None:
        """Measure every directory and step each group; logs what changed. Returns the
        ledger group's result (None if a measure failed: the state stays, as upstream's
        monitor skips a directory it cannot check)."""
        try:
            spaces = {d: _measure(d) for group in self.groups for d in group.dirs}
        except OSError as exc:
            log.warning("disk check failed: %s", exc)
            return None
        usage = {d: s.used for d, s in spaces.items()}
        self.usage = usage
        results = []
        for i, group in enumerate(self.groups):
            group_usage = total_usage(spaces[d] for d in group.dirs)
            result = check(group, usage, group_usage, self.thresholds)
            self._log(result, usage, group_usage)
            self.groups[i] = result.state
            results.append(result)
        self.disk_state = max(r.disk_state for r in results)
        self._allow_high_priority_writes(spaces)
        return results[0]

    def _allow_high_priority_writes(self, spaces: dict[str, DirSpace]) -> None:
        keep = self._cfg.effective_min_usable_size_for_high_priority_writes
        allowed = all(
            any(spaces[d].available >= keep for d in group.dirs)
            for group in self.groups
            if group.all_full
        )
        if allowed != self.high_priority_writes_allowed:
            log.warning(
                "high-priority adds (recovery, re-replication) %s on this read-only bookie "
                "(minUsableSizeForHighPriorityWrites %d bytes)",
                "taken again" if allowed else "refused",
                keep,
            )
        self.high_priority_writes_allowed = allowed

    def _log(self, result: CheckResult, usage: dict[str, float], group_usage: float) -> None:
        t = self.thresholds
        for d in result.newly_filled:
            log.error(
                "ledger directory %s is out of space: usage %.3f > diskUsageThreshold %g",
                d,
                usage[d],
                t.full,
            )
        for d in result.recovered:
            log.info(
                "ledger directory %s is writable again: usage %.3f (group %.3f, "
                "diskUsageLwmThreshold %g)",
                d,
                usage[d],
                group_usage,
                t.lwm,
            )

    def out_of_space(self, exc: OSError) -> None:
        """A write failed for lack of space: every directory is filled until the check
        finds room again (below the low-water mark, :mod:`.disk_state`)."""
        if not all(group.all_full for group in self.groups):
            log.error("a write found no space left (%s): every ledger directory is full", exc)
        self.groups = [group.all_filled() for group in self.groups]
        self.disk_state = DiskState.FULL
        self.high_priority_writes_allowed = False  # no room for them either, until a check

    def used_fraction(self) -> float:
        """The highest used fraction among the file systems of the ledger and index
        directories (measured now)."""
        worst = 0.0
        for group in self.groups:
            for d in group.dirs:
                worst = max(worst, _measure(d).used)
        return worst

    def total_and_free(self) -> tuple[int, int]:
        """(total, free) bytes over the ledger directories' file systems, each counted
        once."""
        seen: set[int] = set()
        total = free = 0
        for d in self._cfg.ledger_directories:
            dev = os.stat(d).st_dev
            if dev in seen:
                continue
            seen.add(dev)
            usage = shutil.disk_usage(d)
            total += usage.total
            free += usage.free
        return total, free

    async def run(self, on_check: Callable[[], object]) -> None:
        """Check every ``diskCheckInterval`` and call ``on_check`` after each."""
        interval = self._cfg.disk_check_interval / 1000
        while True:
            await trio.sleep(interval)
            self.check()
            on_check()
