"""Auto-recovery's settings, taken from the bookie's configuration.

Theory of operation
-------------------
The keys themselves live in :class:`bookiesim.bookie.config.BookieConfig` (section
*Auto-recovery*), under upstream's names, units and defaults, because upstream reads them from
the same ``bk_server.conf`` whether auto-recovery runs inside a bookie or alone
(``AutoRecoveryMain -c bk_server.conf``). :class:`AutoRecoveryConfig` is the auditor's and the
workers' view of them: every duration converted to **seconds as a float**, whatever unit the
key has upstream (``lostBookieRecoveryDelay`` is in seconds, ``openLedgerRereplicationGracePeriod``
in milliseconds), so the code has one unit and tests can ask for a tenth of a second where
the file format only has whole seconds.

A period of 0 turns its periodic check off, as upstream's does. The last three fields are not
keys of any file: an experiment's switch (write-close after replication, on by default) and
the simulator's bug switches (off).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bookiesim.bookie.config import BookieConfig

__all__ = ["AutoRecoveryConfig", "standalone_bookie_id"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AutoRecoveryConfig:
    """What the auditor and the replication workers read; durations in seconds.

    The defaults are upstream's (the keys' defaults in :class:`BookieConfig`).
    """

    auto_recovery_daemon_enabled: bool = False
    """autoRecoveryDaemonEnabled: run inside the bookie process."""
    lost_bookie_recovery_delay: float = 0.0
    """lostBookieRecoveryDelay: wait this long after a bookie vanishes before marking its
    ledgers; the store's ``underreplication/lostBookieRecoveryDelay``, once set, wins."""
    auditor_periodic_check_interval: float = 604800.0
    """auditorPeriodicCheckInterval: period of the check of all ledgers' entries; 0 = off."""
    auditor_periodic_bookie_check_interval: float = 86400.0
    """auditorPeriodicBookieCheckInterval: period of the bookie check; 0 = off."""
    auditor_ledger_verification_percentage: int = 0
    """auditorLedgerVerificationPercentage: share of each fragment's entries the check of all
    ledgers reads; 0 = only the first and last entry each bookie should hold."""
    rereplication_entry_batch_size: int = 10
    """rereplicationEntryBatchSize: entries a worker copies at a time."""
    open_ledger_rereplication_grace_period: float = 30.0
    """openLedgerRereplicationGracePeriod: how long a worker leaves an open ledger's last
    fragment to its writer before recovering the ledger."""
    lock_release_of_failed_ledger_grace_period: float = 300.0
    """lockReleaseOfFailedLedgerGracePeriod: longest a worker holds the lock of a ledger it
    failed to replicate (exponential back-off up to it)."""
    rw_rereplicate_backoff: float = 5.0
    """rwRereplicateBackoffMs: a worker's pause after an error before its next ledger."""

    prometheus_upstream_names_enabled: bool = True
    """prometheusUpstreamNamesEnabled: also serve upstream's metric names (replication_*);
    the collector costs nothing until a scrape."""
    prometheus_stats_latency_rollover_seconds: float = 60.0
    """prometheusStatsLatencyRolloverSeconds: the window of those summaries' quantiles."""

    # Not configuration keys: switches for experiments and the simulator's fault campaign.
    write_close_after_replication: bool = True
    """Send BP-32's WriteClose (reason replication) to the bookie that received a copy; off
    for the ELPL experiment's comparison (outcome ``skipped``)."""
    unsafe_swap_before_copy: bool = False
    """Bug switch: swap the bookie in the metadata before the copy is complete (the bug the
    simulator's replication invariant must catch)."""
    unsafe_replication_adds_without_recovery_flag: bool = False
    """Bug switch: copy with plain adds (no RECOVERY_ADD flag), as upstream 4.16.0-4.16.3
    did; a target that has the ledger fenced refuses them."""

    def __post_init__(self) -> None:
        durations = {
            "lost_bookie_recovery_delay": self.lost_bookie_recovery_delay,
            "auditor_periodic_check_interval": self.auditor_periodic_check_interval,
            "auditor_periodic_bookie_check_interval": self.auditor_periodic_bookie_check_interval,
            "open_ledger_rereplication_grace_period": self.open_ledger_rereplication_grace_period,
            "lock_release_of_failed_ledger_grace_period": (
                self.lock_release_of_failed_ledger_grace_period
            ),
            "rw_rereplicate_backoff": self.rw_rereplicate_backoff,
        }
        for name, value in durations.items():
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: expected seconds >= 0, got {value!r}")
        if not 0 <= self.auditor_ledger_verification_percentage <= 100:
            raise ValueError(
                "auditor_ledger_verification_percentage: expected 0 .. 100, got "
                f"{self.auditor_ledger_verification_percentage!r}"
            )
        if self.rereplication_entry_batch_size < 1:
            raise ValueError(
                "rereplication_entry_batch_size: expected >= 1, got "
                f"{self.rereplication_entry_batch_size!r}"
            )

    @classmethod
    def from_bookie_config(cls, cfg: BookieConfig) -> AutoRecoveryConfig:
        """The auto-recovery keys of ``cfg``, in seconds."""
        return cls(
            auto_recovery_daemon_enabled=cfg.auto_recovery_daemon_enabled,
            lost_bookie_recovery_delay=float(cfg.lost_bookie_recovery_delay),
            auditor_periodic_check_interval=float(cfg.auditor_periodic_check_interval),
            auditor_periodic_bookie_check_interval=float(
                cfg.auditor_periodic_bookie_check_interval
            ),
            auditor_ledger_verification_percentage=cfg.auditor_ledger_verification_percentage,
            rereplication_entry_batch_size=cfg.rereplication_entry_batch_size,
            open_ledger_rereplication_grace_period=(
                cfg.open_ledger_rereplication_grace_period / 1000
            ),
            lock_release_of_failed_ledger_grace_period=(
                cfg.lock_release_of_failed_ledger_grace_period / 1000
            ),
            rw_rereplicate_backoff=cfg.rw_rereplicate_backoff_ms / 1000,
            prometheus_upstream_names_enabled=cfg.prometheus_upstream_names_enabled,
            prometheus_stats_latency_rollover_seconds=float(
                cfg.prometheus_stats_latency_rollover_seconds
            ),
        )

    def replace(self, **changes: object) -> AutoRecoveryConfig:
        """A copy with some values changed (validated again)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def standalone_bookie_id(cfg: BookieConfig) -> str:
    """The id a standalone auto-recovery process votes and locks with.

    Upstream's ``AutoRecoveryMain`` uses the bookie id its configuration would give a bookie
    (``BookieImpl.getBookieId``): the advertised address, else the bookie's address, and
    ``bookiePort`` — so ``127.0.0.1:3181`` with the defaults, even though no bookie listens
    there.
    """
    return f"{cfg.advertised_address or cfg.bookie_address}:{cfg.bookie_port}"
