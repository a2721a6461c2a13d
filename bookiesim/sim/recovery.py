"""Auto-recovery in the simulation: the real auditor and replication worker beside each bookie.

A bookie process with ``autoRecoveryDaemonEnabled`` runs an auto-recovery service beside the
bookie; :class:`AutoRecoveryNode` is that for a :class:`~.sim_cluster.SimBookie`. It runs the
project's own :class:`~bookiesim.autorecovery.service.AutoRecoveryService` (auditor election,
auditor, one replication worker) with a BookKeeper client of its own on the simulated network,
named ``<bookie>-ar`` (message loss, delays and crashes reach it; partitions are drawn over the
plan's clients only), and a :class:`~.store.SessionStore` view of the run's one metadata store:
its metadata writes are recorded like every client's (A12, and RS on each swap), and its
ephemerals expire when the bookie crashes, after the same delay as the registration.

:func:`autorecovery_config` is the simulation's configuration: upstream's keys with timers cut
to fit a run of a minute (a few seconds of ``lostBookieRecoveryDelay``, so that short crashes
come back first and long ones are replicated away), and the bug switches of :mod:`.bugs`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from bookiesim.autorecovery.config import AutoRecoveryConfig
from bookiesim.autorecovery.service import AutoRecoveryService
from bookiesim.sim.store import SessionStore

if TYPE_CHECKING:
    from bookiesim.client.bookie_pool import BookieConnector
    from bookiesim.client.context import ClientConfig
    from bookiesim.metadata.memory_store import MemoryStore
    from bookiesim.sim.history import History

__all__ = ["SIM_AUTORECOVERY", "AutoRecoveryNode", "autorecovery_config"]

SIM_AUTORECOVERY = AutoRecoveryConfig(
    auto_recovery_daemon_enabled=True,
    lost_bookie_recovery_delay=2.0,
    auditor_periodic_check_interval=0.0,
    auditor_periodic_bookie_check_interval=10.0,
    open_ledger_rereplication_grace_period=3.0,
    lock_release_of_failed_ledger_grace_period=4.0,
    rw_rereplicate_backoff=0.5,
    rereplication_entry_batch_size=10,
)
"""Timers for runs of a minute; see the module docstring."""


def autorecovery_config(**flags: bool) -> AutoRecoveryConfig:
    """:data:`SIM_AUTORECOVERY` with bug switches (``AutoRecoveryConfig`` fields) set."""
    return SIM_AUTORECOVERY.replace(**flags) if flags else SIM_AUTORECOVERY


class AutoRecoveryNode:
    """The auto-recovery service of one incarnation of a bookie: ``name`` on the network
    and in the trace, voting and locking as ``bookie_id``."""

    def __init__(
        self,
        name: str,
        bookie_id: str,
        store: MemoryStore,
        history: History,
        connector: BookieConnector,
        config: AutoRecoveryConfig,
        client: ClientConfig,
    ) -> None:
        self.name = name
        self.history = history
        self.store = SessionStore(store, name, history)
        self.service = AutoRecoveryService(
            self.store,
            config,
            bookie_id=bookie_id,
            bookie_connector=connector,
            client_config=client,
            now_ms=_virtual_ms,
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Until the bookie's nursery is cancelled (a crash, or the end of the run)."""
        await self.service.run(task_status=task_status)

    async def expire(self) -> None:
        """The node died with its bookie: its session's ephemerals go."""
        gone = await self.store.expire()
        if gone:
            self.history.trace(f"{self.name}: session expired ({gone} ephemerals)")


def _virtual_ms() -> int:
    """Record times (marks, the last check of all ledgers) from the run's clock, so that
    two runs of a seed write the same bytes."""
    return int(trio.current_time() * 1000)
