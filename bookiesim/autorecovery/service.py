"""Auto-recovery as one service: the auditor election and a replication worker on one store
session with one client, inside a bookie process or alone.

Theory of operation
-------------------
Upstream's ``AutoRecoveryMain``: one BookKeeper client, an ``AuditorElector`` (which runs the
``Auditor`` while elected) and one ``ReplicationWorker``, all on one metadata session. So
here :meth:`AutoRecoveryService.run` opens (or is given) a store, builds one
:class:`~bookiesim.client.BookKeeper` on it, and runs an :class:`~.auditor.Auditor` and a
:class:`~.worker.ReplicationWorker` side by side until cancelled. The auditor, the worker and
the admin calls below each get an :class:`UnderReplicationManager` of their own on that one
session: a manager remembers the marks it last scanned to wait for changes, and three readers
sharing that memory would miss each other's changes.

Where it runs:

* **Embedded** (``autoRecoveryDaemonEnabled=true``): :class:`AutoRecoveryCompanion` is a
  companion of :class:`~bookiesim.bookie.process.BookieService`; it gets the bookie's store
  session, id, configuration, admin router and metrics registry, so the bookie's
  ``/metrics`` shows auto-recovery's metrics and its admin API the
  ``/api/v1/autorecovery/...`` routes. It votes with the bookie's id, as upstream's embedded
  ``AutoRecoveryService`` does.
* **Alone** (``bookiesim autorecovery``): :meth:`AutoRecoveryService.from_bookie_config`
  opens ``metadataServiceUri`` itself and votes with the id the configuration would give a
  bookie (``AutoRecoveryMain`` uses ``BookieImpl.getBookieId(conf)``): ``127.0.0.1:3181``
  with the defaults. Its metrics are in a registry of their own (:attr:`metrics`,
  ``render()``).

The admin methods (who is auditor, the marks, trigger an audit, the delay, enable/disable)
are what the HTTP routes and the shell need; they act on the shared records, so they work
whichever service is the auditor, as upstream's tools do.

For deterministic runs (the simulator) the client's connector and configuration can be
given, ``now_ms`` replaces the wall clock in records, and every random choice uses the
client's seeded ``rng``.
"""

from __future__ import annotations

import logging
import math
import random
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from bookiesim.autorecovery import admin
from bookiesim.autorecovery.auditor import Auditor
from bookiesim.autorecovery.config import AutoRecoveryConfig, standalone_bookie_id
from bookiesim.autorecovery.http_routes import add_autorecovery_routes
from bookiesim.autorecovery.metrics import AutoRecoveryMetrics
from bookiesim.autorecovery.upstream_metrics import REPLICATION_UPSTREAM_METRICS
from bookiesim.autorecovery.worker import ReplicationWorker
from bookiesim.bookie.tls_connection import bookie_tls_settings
from bookiesim.bookie.upstream_metrics.collector import UpstreamNamesCollector
from bookiesim.client import BookKeeper, ClientConfig
from bookiesim.metadata.factory import DEFAULT_SESSION_TIMEOUT, open_store
from bookiesim.metadata.underreplication import UnderReplicationManager

if TYPE_CHECKING:
    from collections.abc import Callable

    from prometheus_client import CollectorRegistry

    from bookiesim.bookie.config import BookieConfig
    from bookiesim.bookie.http_admin import AdminRouter
    from bookiesim.bookie.process import CompanionContext
    from bookiesim.client.bookie_pool import BookieConnector
    from bookiesim.metadata.store import MetadataStore
    from bookiesim.metadata.underreplication import UnderReplicatedLedger

__all__ = ["AutoRecoveryCompanion", "AutoRecoveryService"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Running:
    store: MetadataStore
    client: BookKeeper
    urm: UnderReplicationManager
    auditor: Auditor
    worker: ReplicationWorker


def _client_config(cfg: BookieConfig) -> ClientConfig | None:
    """With TLS configured, the replication client talks TLS with the bookie's keys, as
    upstream's ``AutoRecoveryMain`` client reads them from ``bk_server.conf``."""
    tls = bookie_tls_settings(cfg)
    return ClientConfig(tls=tls) if tls.enabled else None


class AutoRecoveryService:
    """The auditor election and one replication worker; see the module docstring.

    ``store`` is an open store (embedded: the bookie's session) or a ``metadataServiceUri``
    to open for the run, with a session of ``session_timeout`` seconds (``zkTimeout``: the
    auditor's vote and the worker's locks outlive a dead service that long). ``registry`` is
    where the metrics go (the bookie's), else a new one.
    """

    def __init__(
        self,
        store: str | MetadataStore,
        config: AutoRecoveryConfig,
        *,
        bookie_id: str,
        registry: CollectorRegistry | None = None,
        ledgers_root: str | None = None,
        bookie_connector: BookieConnector | None = None,
        client_config: ClientConfig | None = None,
        now_ms: Callable[[], int] | None = None,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
    ) -> None:
        self.config = config
        self._session_timeout = session_timeout
        self.bookie_id = bookie_id
        self.metrics = AutoRecoveryMetrics(registry)
        if config.prometheus_upstream_names_enabled:
            UpstreamNamesCollector.register(
                self.metrics.registry,
                REPLICATION_UPSTREAM_METRICS,
                rollover_seconds=config.prometheus_stats_latency_rollover_seconds,
            )
        self._store = store
        self._ledgers_root = ledgers_root
        self._connector = bookie_connector
        self._client_config = client_config
        self._now_ms = now_ms
        self._routers: list[AdminRouter] = []
        self._running: _Running | None = None

    @classmethod
    def from_bookie_config(
        cls, cfg: BookieConfig, *, registry: CollectorRegistry | None = None
    ) -> AutoRecoveryService:
        """A standalone service as ``AutoRecoveryMain -c bk_server.conf``: the store of
        ``metadataServiceUri``, the auto-recovery keys, the id the file gives a bookie."""
        if not cfg.metadata_service_uri:
            raise ValueError("auto-recovery needs a metadata store: set metadataServiceUri")
        return cls(
            cfg.metadata_service_uri,
            AutoRecoveryConfig.from_bookie_config(cfg),
            bookie_id=standalone_bookie_id(cfg),
            registry=registry,
            client_config=_client_config(cfg),
            session_timeout=cfg.zk_timeout / 1000,
        )

    # --- running ----------------------------------------------------------------------------

    def add_routes(self, router: AdminRouter) -> None:
        """Serve ``/api/v1/autorecovery/...`` on ``router`` while :meth:`run` runs (added as
        it starts, before ``task_status.started()``)."""
        self._routers.append(router)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; started once the vote is cast and the worker runs."""
        async with AsyncExitStack() as stack:
            if isinstance(self._store, str):
                store = await stack.enter_async_context(
                    open_store(self._store, session_timeout=self._session_timeout)
                )
            else:
                store = self._store
            client = await stack.enter_async_context(
                BookKeeper(
                    store,
                    bookie_connector=self._connector,
                    config=self._client_config,
                    ledgers_root=self._ledgers_root,
                )
            )
            urm = self._manager(client)
            await urm.ensure_layout()
            auditor = Auditor(
                client,
                self._manager(client),
                self.config,
                self.metrics,
                bookie_id=self.bookie_id,
                now_ms=self._now_ms,
            )
            worker = ReplicationWorker(client, self._manager(client), self.config, self.metrics)
            self._running = _Running(store, client, urm, auditor, worker)
            try:
                async with trio.open_nursery() as nursery:
                    for router in self._routers:
                        add_autorecovery_routes(
                            router, store=store, client=client, nursery=nursery, config=self.config
                        )
                    await nursery.start(auditor.run)
                    await nursery.start(worker.run)
                    log.info("auto-recovery %s running", self.bookie_id)
                    task_status.started()
            finally:
                self._running = None

    def _manager(self, client: BookKeeper) -> UnderReplicationManager:
        rng = random.Random(client.rng.getrandbits(64))
        if self._now_ms is None:
            return UnderReplicationManager(client.store, client.ledgers_root, rng=rng)
        return UnderReplicationManager(
            client.store, client.ledgers_root, rng=rng, now_ms=self._now_ms
        )

    def _state(self) -> _Running:
        if self._running is None:
            raise RuntimeError("auto-recovery is not running: AutoRecoveryService.run starts it")
        return self._running

    @property
    def auditor(self) -> Auditor:
        return self._state().auditor

    @property
    def worker(self) -> ReplicationWorker:
        return self._state().worker

    @property
    def client(self) -> BookKeeper:
        return self._state().client

    @property
    def is_auditor(self) -> bool:
        """Whether this service is the elected auditor now."""
        return self._running is not None and self._running.auditor.is_auditor

    # --- admin ------------------------------------------------------------------------------

    async def auditor_id(self) -> str | None:
        """The elected auditor's id (``whoisauditor``), None if nobody is elected."""
        return await self._state().urm.auditor()

    async def under_replicated(self) -> list[UnderReplicatedLedger]:
        """The marks, by ledger id (``listunderreplicated``)."""
        return await self._state().urm.under_replicated()

    async def trigger_audit(self) -> int:
        """Make the elected auditor run its bookie check now, as upstream's ``triggeraudit``
        (rewrites the delay; :class:`~.admin.AdminError` if disabled or nobody is elected);
        returns the delay."""
        return await admin.trigger_audit(self._state().urm)

    async def get_lost_bookie_recovery_delay(self) -> int:
        """Seconds: the store's value, or this service's configuration before any is set."""
        stored = await self._state().urm.get_lost_bookie_recovery_delay()
        return math.ceil(self.config.lost_bookie_recovery_delay) if stored is None else stored

    async def set_lost_bookie_recovery_delay(self, seconds: int) -> None:
        """Write the cluster's delay (the auditor reacts as to a trigger when it is 0 or
        unchanged, else reschedules a pending audit)."""
        await admin.set_lost_bookie_recovery_delay(self._state().urm, seconds)

    async def is_enabled(self) -> bool:
        """Whether re-replication is enabled (no ``underreplication/disable``)."""
        return await self._state().urm.is_enabled()

    async def enable(self) -> bool:
        """Resume marking and re-replication; False if it was not disabled."""
        return await self._state().urm.enable()

    async def disable(self) -> bool:
        """Pause marking and re-replication cluster-wide; False if it already was."""
        return await self._state().urm.disable()


class AutoRecoveryCompanion:
    """Runs an :class:`AutoRecoveryService` beside a bookie, in its process, on its session
    (a companion of :class:`~bookiesim.bookie.process.BookieService`). :attr:`service` is
    the running service."""

    name = "auto-recovery"

    def __init__(self, config: AutoRecoveryConfig | None = None) -> None:
        self._config = config
        self.service: AutoRecoveryService | None = None

    async def serve(self, context: CompanionContext, *, task_status: trio.TaskStatus[None]) -> None:
        config = self._config or AutoRecoveryConfig.from_bookie_config(context.cfg)
        service = AutoRecoveryService(
            context.store,
            config,
            bookie_id=context.bookie_id,
            registry=context.registry,
            client_config=_client_config(context.cfg),
        )
        service.add_routes(context.router)
        self.service = service
        try:
            await service.run(task_status=task_status)
        finally:
            self.service = None
