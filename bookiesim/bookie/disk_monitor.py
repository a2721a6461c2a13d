"""Upstream's LedgerDirsMonitor, as far as this bookie needs it.

Every ``diskCheckInterval`` the fullest ledger or index disk is measured (used fraction =
1 - usable/total, as upstream's DiskChecker) and handed to GC, which suspends compaction
above the warn threshold or forces GC when full (``isForceGCAllowWhenNoSpace``). The same
measures feed the metrics and the ``GET_BOOKIE_INFO`` answer.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from bookiesim.bookie.config import BookieConfig

__all__ = ["DiskCheckObserver", "LedgerDirsMonitor"]

log = logging.getLogger(__name__)

DiskCheckObserver = Callable[[float, float, float], object]
"""Called with (used fraction, warn threshold, full threshold) after every check."""


class LedgerDirsMonitor:
    """Measures the ledger and index directories' file systems."""

    def __init__(self, cfg: BookieConfig) -> None:
        self._cfg = cfg

    def used_fraction(self) -> float:
        """The highest used fraction among the file systems of the ledger and index
        directories."""
        cfg = self._cfg
        worst = 0.0
        for d in {*cfg.ledger_directories, *cfg.effective_index_directories}:
            st = os.statvfs(d)
            if st.f_blocks:
                worst = max(worst, 1.0 - st.f_bavail / st.f_blocks)
        return worst

    def writable_ledger_dirs(self) -> int:
        """Ledger directories whose disk is below diskUsageThreshold."""
        threshold = self._cfg.disk_usage_threshold
        writable = 0
        for d in self._cfg.ledger_directories:
            st = os.statvfs(d)
            if not st.f_blocks or 1.0 - st.f_bavail / st.f_blocks < threshold:
                writable += 1
        return writable

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

    async def run(self, on_check: DiskCheckObserver) -> None:
        """Measure every ``diskCheckInterval`` and report to ``on_check``; a failed
        measure is logged and skipped."""
        cfg = self._cfg
        while True:
            try:
                used = self.used_fraction()
            except OSError as exc:
                log.warning("disk check failed: %s", exc)
            else:
                on_check(used, cfg.disk_usage_warn_threshold, cfg.disk_usage_threshold)
            await trio.sleep(cfg.disk_check_interval / 1000)
