"""Running a bookie: storage, server and admin HTTP in one trio run.

:class:`BookieService` wires a :class:`~bookiesim.bookie.bookie.Bookie` to its v3 server and
its admin/metrics HTTP server. The command line (``bookiesim bookie``) runs one per process;
tests and experiments run several in one process through :mod:`bookiesim.cluster.testing`.

Start-up order, as upstream's: with a ``metadataServiceUri`` the store session is opened
first and the cluster's identity ensured (``LAYOUT``, ``INSTANCEID``); then the cookies are
checked and stamped (:mod:`.cookie_check`), and only then does the ledger storage open, the
journal replay, the server listen and the bookie register, on that one session. One
difference: with ``bookiePort=0`` the port is bound first (the port its directories' cookie
names, else a free one), so that the cookies name the id the bookie registers with. Before all
that, a process running one bookie (:func:`main_sync`) raises its soft ``RLIMIT_NOFILE`` to
the hard limit and fits the descriptor caches under it (:mod:`.descriptors`); in-process
clusters share one process and keep their configuration as given.

Companions: a bookie process may run other services beside the bookie, as upstream's
``BookieServer`` runs ``AutoRecoveryMain`` when ``autoRecoveryDaemonEnabled`` is set. This
layer knows them only as :class:`Companion`: each is started once the bookie serves and is
registered (so whatever it does sees this bookie live), before the process announces itself
(so its admin routes answer from the first request), and gets a :class:`CompanionContext`:
the store session, the bookie's id, its configuration, the admin router and the metrics
registry behind ``/metrics``. The command line chooses them; the bookie never imports them.
A companion that fails stops the bookie, as upstream's death watcher stops a bookie whose
embedded auto-recovery died.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import trio

from bookiesim import __version__, native
from bookiesim.bookie import exit_codes
from bookiesim.bookie.bookie import Bookie
from bookiesim.bookie.cookie_check import CookieError, check_cookies, cookie_port
from bookiesim.bookie.descriptors import DescriptorLimitError, plan_for_config, raise_soft_limit
from bookiesim.bookie.disk_monitor import UnusableDirectoryError, check_directories
from bookiesim.bookie.gc_admin import add_gc_routes
from bookiesim.bookie.handlers import RequestProcessor
from bookiesim.bookie.http_admin import (
    AdminRequest,
    AdminResponse,
    AdminRouter,
    json_response,
    metrics_handler,
    serve_admin,
)
from bookiesim.bookie.http_upstream_bookie import add_upstream_bookie_routes
from bookiesim.bookie.http_upstream_cluster import add_upstream_cluster_routes
from bookiesim.bookie.http_upstream_routes import answer_wrong_methods_as_upstream
from bookiesim.bookie.metrics import BookieMetrics
from bookiesim.bookie.server import BookieServer
from bookiesim.bookie.tls_connection import server_security
from bookiesim.bookie.upstream_keys import not_applied_warning
from bookiesim.bookie.upstream_metrics.bookie_names import BOOKIE_UPSTREAM_METRICS
from bookiesim.bookie.upstream_metrics.collector import UpstreamNamesCollector
from bookiesim.metadata import open_store
from bookiesim.metadata.cluster import ensure_cluster, ledgers_root_of
from bookiesim.metadata.ledgers import LedgerManager
from bookiesim.metadata.registration import FEATURE_WRITE_CLOSE, BookieInfo, register_bookie

if TYPE_CHECKING:
    from collections.abc import Sequence

    from prometheus_client import CollectorRegistry

    from bookiesim.bookie.config import BookieConfig
    from bookiesim.metadata.store import MetadataStore

log = logging.getLogger(__name__)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclass(frozen=True)
class BookieAddress:
    host: str
    bookie_port: int
    http_port: int

    @property
    def bookie_id(self) -> str:
        """Upstream's BookieId form, ``host:port``."""
        return f"{self.host}:{self.bookie_port}"


@dataclass(frozen=True)
class CompanionContext:
    """What a :class:`Companion` gets from the bookie process it runs in."""

    store: MetadataStore
    """The bookie's own metadata session (its registration lives on it)."""
    bookie_id: str
    cfg: BookieConfig
    router: AdminRouter
    """The bookie's admin HTTP routes; a companion may add its own."""
    registry: CollectorRegistry
    """The registry ``/metrics`` renders; a companion may register its metrics in it."""


class Companion(Protocol):
    """A service run beside the bookie in its process (see the module docstring)."""

    @property
    def name(self) -> str:
        """For log lines and errors."""
        ...

    async def serve(self, context: CompanionContext, *, task_status: trio.TaskStatus[None]) -> None:
        """Start (``task_status.started()`` once its routes are added and it runs), then run
        until cancelled."""
        ...


class BookieService:
    """A bookie with its servers; :meth:`run` checks the cookies, then serves until
    cancelled. :attr:`bookie`, :attr:`processor` and :attr:`server` exist once the cookies
    are checked (the storage must not open before). ``companions`` run beside it once it is
    registered (they need a ``metadataServiceUri``)."""

    def __init__(self, cfg: BookieConfig, companions: Sequence[Companion] = ()) -> None:
        if companions and not cfg.metadata_service_uri:
            names = ", ".join(c.name for c in companions)
            raise ValueError(f"{names} needs a metadata store: set metadataServiceUri")
        self.cfg = cfg
        self.companions = tuple(companions)
        self.metrics = BookieMetrics()
        if cfg.prometheus_upstream_names_enabled:
            UpstreamNamesCollector.register(
                self.metrics.registry,
                BOOKIE_UPSTREAM_METRICS,
                rollover_seconds=cfg.prometheus_stats_latency_rollover_seconds,
            )
        self._bookie: Bookie | None = None
        self._server: BookieServer | None = None
        self.address: BookieAddress | None = None

    def _not_started(self) -> RuntimeError:
        return RuntimeError("the bookie is not started: BookieService.run opens it")

    @property
    def bookie(self) -> Bookie:
        if self._bookie is None:
            raise self._not_started()
        return self._bookie

    @property
    def server(self) -> BookieServer:
        if self._server is None:
            raise self._not_started()
        return self._server

    @property
    def processor(self) -> RequestProcessor:
        processor = self.server.processor
        assert isinstance(processor, RequestProcessor)
        return processor

    def _open_bookie(self) -> None:
        """Open the storage and journal (only after the cookies are checked)."""
        bookie = Bookie(self.cfg, self.metrics)
        processor = RequestProcessor(bookie)
        self._server = BookieServer(
            processor,
            max_frame_size=self.cfg.netty_max_frame_size_bytes,
            security=server_security(self.cfg),
        )
        self._bookie = bookie

    def admin_router(self, store: MetadataStore | None = None) -> AdminRouter:
        """bookiesim's routes and upstream's (:mod:`.http_upstream_routes`); those answered
        from the metadata store only with ``store``. Companions add theirs later."""
        router = AdminRouter()
        router.add("GET", "/metrics", metrics_handler(self.metrics.render))
        router.add("GET", "/api/v1/bookie/info", self._info)
        router.add("GET", "/api/v1/bookie/state", self._state)
        add_gc_routes(router, self.bookie.gc, lambda: self.bookie_id)
        add_upstream_bookie_routes(router, self.cfg, lambda: self.bookie)
        if store is not None:
            add_upstream_cluster_routes(router, store)
        answer_wrong_methods_as_upstream(router)
        return router

    @property
    def bookie_id(self) -> str:
        """This bookie's id once it listens (before: the configured address and port)."""
        if self.address is not None:
            return self.address.bookie_id
        return f"{self.cfg.bookie_address}:{self.cfg.bookie_port}"

    async def _info(self, request: AdminRequest) -> AdminResponse:
        total, free = self.bookie.disk_usage()
        # Upstream's two keys first (its whole answer), then bookiesim's.
        return json_response({"freeSpace": free, "totalSpace": total} | self.info())

    async def _state(self, request: AdminRequest) -> AdminResponse:
        bookie = self.bookie
        return json_response(
            {
                "running": bookie.ready.is_set(),
                "readOnly": bookie.is_read_only,
                "shuttingDown": False,
                "availableForHighPriorityWrites": bookie.available_for_high_priority_writes,
            }
        )

    def info(self) -> dict[str, Any]:
        address = self.address
        info: dict[str, Any] = {"version": __version__}
        if address is not None:
            info |= {
                "bookieId": address.bookie_id,
                "bookiePort": address.bookie_port,
                "httpServerPort": address.http_port,
            }
        return info | self.bookie.info()

    async def run(
        self, *, task_status: trio.TaskStatus[BookieAddress] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Check the cookies (:class:`CookieError` if this bookie must not start), open
        the bookie, serve and register; until cancelled."""
        check_directories(self.cfg)
        listeners = await self._bind_ephemeral() if self.cfg.bookie_port == 0 else None
        try:
            cfg = self.cfg
            if not cfg.metadata_service_uri:
                await check_cookies(cfg)
                await self._serve(None, listeners, task_status=task_status)
                return
            async with open_store(
                cfg.metadata_service_uri, session_timeout=cfg.zk_timeout / 1000
            ) as store:
                instance = await ensure_cluster(store)
                await check_cookies(
                    cfg, store=store, ledgers_root=ledgers_root_of(store), instance_id=instance
                )
                await self._serve(store, listeners, task_status=task_status)
        finally:
            for listener in listeners or ():
                await trio.aclose_forcefully(listener)

    async def _bind_ephemeral(self) -> list[trio.SocketListener]:
        """For ``bookiePort=0``: listen on the port the directories' cookie names (the id
        this bookie's ledgers name; :class:`CookieError` when it is taken), else on a free
        one, and make it the configured port, so the cookies stamped next and the
        registration name one id."""
        cfg = self.cfg
        port = cookie_port(cfg)
        try:
            listeners = await trio.open_tcp_listeners(port or 0, host=cfg.bookie_address)
        except OSError as exc:
            if port is None:
                raise
            raise CookieError(
                f"cannot listen on {cfg.bookie_address}:{port}, the port of bookie "
                f"{cfg.bookie_address}:{port} that its cookie names ({exc.strerror or exc}): "
                "another process holds it; stop that one, or start this bookie when it is free"
            ) from None
        bound = int(listeners[0].socket.getsockname()[1])
        self.cfg = cfg.replace(bookie_port=bound)
        return listeners

    async def _serve(
        self,
        store: MetadataStore | None,
        listeners: list[trio.SocketListener] | None,
        *,
        task_status: trio.TaskStatus[BookieAddress],
    ) -> None:
        cfg = self.cfg
        self._open_bookie()
        async with trio.open_nursery() as nursery:
            await nursery.start(self.bookie.run)
            bookie_port = await nursery.start(
                partial(self.server.serve, cfg.bookie_address, cfg.bookie_port, listeners=listeners)
            )
            router = self.admin_router(store)
            http_port = await nursery.start(
                serve_admin, router, cfg.http_server_host, cfg.http_server_port
            )
            self.address = BookieAddress(cfg.bookie_address, bookie_port, http_port)
            if store is not None:
                await nursery.start(self._stay_registered, store, self.address)
                context = CompanionContext(
                    store, self.address.bookie_id, cfg, router, self.metrics.registry
                )
                for companion in self.companions:
                    await nursery.start(self._run_companion, companion, context)
            answer_wrong_methods_as_upstream(router)  # again, for the companions' routes
            task_status.started(self.address)

    @staticmethod
    async def _run_companion(
        companion: Companion,
        context: CompanionContext,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        log.info("starting %s beside bookie %s", companion.name, context.bookie_id)
        await companion.serve(context, task_status=task_status)

    async def _stay_registered(
        self,
        store: MetadataStore,
        address: BookieAddress,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Register in the metadata store (an ephemeral node that vanishes with this
        process) for as long as the bookie serves; clients find bookies there. GC lists the
        store's ledgers through the same session to find the deleted ones."""
        # Upstream bookies know no WriteClose; advertising it would make clients send frames
        # an upstream bookie cannot parse.
        features = frozenset() if self.cfg.upstream_behaviour else {FEATURE_WRITE_CLOSE}
        info = BookieInfo(
            bookie_id=address.bookie_id,
            host=address.host,
            port=address.bookie_port,
            http_port=address.http_port,
            features=frozenset(features),
            pid=os.getpid(),
            http_host=self.cfg.http_server_host,
        )
        async with register_bookie(store, info) as registration:
            gc = self.bookie.gc
            gc.ledger_source = LedgerManager(store)
            try:
                task_status.started()
                bookie = self.bookie
                while True:
                    # As upstream: clients stop placing new ensembles here; reads go on.
                    await bookie.wait_mode(read_only=True)
                    await registration.set_read_only()
                    await bookie.wait_mode(read_only=False)
                    await registration.set_writable()
            finally:
                gc.ledger_source = None


async def run_until_signalled(
    cfg: BookieConfig,
    *,
    announce: bool = True,
    companions: Sequence[Companion] = (),
    stopped: list[bool] | None = None,
    task_status: trio.TaskStatus[BookieService] = trio.TASK_STATUS_IGNORED,
) -> list[str]:
    """Serve (with ``companions`` beside the bookie) until SIGINT or SIGTERM, or until the
    bookie asks to stop (:attr:`Bookie.stop_requested`, then ``True`` is appended to
    ``stopped``), then stop (final checkpoint). Returns the disk errors the stop logged
    (:attr:`Bookie.shutdown_errors`): empty when it was clean."""
    service = BookieService(cfg, companions)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            address = await nursery.start(service.run)
            task_status.started(service)
            # Freeze what start-up made (modules, configuration, replayed state; it lives as long
            # as the process) once the bookie serves. Why: CPython's full (generation 2)
            # collection scans every tracked object, and at 25,000 adds/s the objects of in-flight
            # adds reach generation 2 often enough for one about once a second. With the ~50,000
            # start-up objects in the scan each took 30-40 ms, every add in flight waited, and the
            # p99 of `bench bookie`'s half-peak run was 50-85 ms; frozen, those collections scan a
            # few thousand objects and the p99 fell to 6-10 ms (BENCHMARKS.md, bookie). Upstream
            # tunes its JVM's collector for the same reason.
            gc.freeze()
            if announce:
                ready = {
                    "bookiePort": address.bookie_port,
                    "httpServerPort": address.http_port,
                    "bookieId": address.bookie_id,
                    "pid": os.getpid(),
                    "metrics": f"http://{cfg.http_server_host}:{address.http_port}/metrics",
                    "ledgerDirectories": [str(d) for d in cfg.ledger_directories],
                    # The first, as before (what a one-journal bookie's readers take), then
                    # every journal directory (upstream's journalDirectories).
                    "journalDirectory": str(cfg.effective_journal_directories[0]),
                    "journalDirectories": [str(d) for d in cfg.effective_journal_directories],
                }
                _announce(json.dumps(ready))
            nursery.start_soon(_stop_when_requested, service.bookie, nursery.cancel_scope, stopped)
            async for signum in signals:
                log.info("received %s, stopping", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
    return service.bookie.shutdown_errors


async def _stop_when_requested(
    bookie: Bookie, scope: trio.CancelScope, stopped: list[bool] | None
) -> None:
    """The bookie asked to stop by itself (readOnlyModeEnabled=false and it would turn
    read-only): stop as on SIGTERM, and say so in ``stopped``."""
    await bookie.stop_requested.wait()
    if stopped is not None:
        stopped.append(True)
    scope.cancel()


def _announce(line: str) -> None:
    """Print the ready line. Whoever started this bookie may be gone (a ``cluster up``
    interrupted while it started): the bookie serves on, stdout goes to /dev/null."""
    try:
        print(line, flush=True)
    except OSError as exc:
        log.warning("could not announce readiness on stdout (%s); serving anyway", exc)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _cookie_errors(exc: BaseException) -> list[CookieError]:
    """The cookie refusals in ``exc``, however trio's nurseries grouped it; [] if it holds
    anything else too (then it is not a refusal, and it propagates)."""
    if isinstance(exc, CookieError):
        return [exc]
    if isinstance(exc, BaseExceptionGroup):
        found = [_cookie_errors(e) for e in exc.exceptions]
        if all(found):
            return [e for errors in found for e in errors]
    return []


# Why shorter than CPython's 5 ms: a journal fdatasync, a checkpoint or a log creation
# finishes in a worker thread, which then needs the GIL back from the trio thread; with the
# trio thread busy serving adds, the worker waits for the switch interval. Measured here
# (fdatasync in a worker beside a busy trio loop): hand-back p99 84 ms at 5 ms, 4.8 ms at
# 0.5 ms (BENCHMARKS.md, bookie).
GIL_SWITCH_INTERVAL = 0.0005


def within_descriptor_limit(cfg: BookieConfig) -> BookieConfig:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one and fit the descriptor caches under
    it (:mod:`.descriptors`), logging the budget and every cache lowered;
    :class:`~.descriptors.DescriptorLimitError` if the limit is too small to run at all.
    For a process that runs one bookie (the budget counts the whole process)."""
    limit = raise_soft_limit()
    budget = plan_for_config(limit.soft, cfg)
    for line in budget.warnings():
        log.warning("%s", line)
    log.info("%s", budget.describe(limit.before if limit.before != limit.soft else None))
    log.info("running %s", native.build_in_use())
    return budget.apply(cfg)


def main_sync(cfg: BookieConfig, companions: Sequence[Companion] = ()) -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    # Upstream's keys that bookiesim accepts and ignores: told once, not once per key.
    ignored = not_applied_warning(cfg.not_applied)
    if ignored is not None:
        log.warning("%s", ignored)
    try:
        cfg = within_descriptor_limit(cfg)
    except DescriptorLimitError as exc:
        log.error("refusing to start: %s", exc)
        return exit_codes.BAD_CONFIGURATION
    stopped_by_itself: list[bool] = []
    try:
        errors = trio.run(
            partial(run_until_signalled, cfg, companions=companions, stopped=stopped_by_itself)
        )
    except BaseException as exc:
        unusable = _unusable_directory(exc)
        if unusable is not None:
            log.error("refusing to start: %s", unusable)
            return exit_codes.UNUSABLE_DIRECTORY
        refused = _cookie_errors(exc)
        if not refused:
            raise
        # The one line that says which directory and which cookie; nothing was opened.
        for error in refused:
            log.error("refusing to start: %s", error)
        return exit_codes.INVALID_COOKIE
    if errors:
        # Nothing acknowledged is lost (the next start replays the journal), but whoever
        # supervises the process should know that this stop was not clean.
        log.error(
            "stopped with %d disk error(s); exit code %d", len(errors), exit_codes.UNCLEAN_STOP
        )
        return exit_codes.UNCLEAN_STOP
    if stopped_by_itself:
        log.error(
            "stopped instead of turning read-only (readOnlyModeEnabled=false); exit code %d",
            exit_codes.READ_ONLY_DISABLED,
        )
        return exit_codes.READ_ONLY_DISABLED
    return exit_codes.OK


def _unusable_directory(exc: BaseException) -> UnusableDirectoryError | None:
    """The :class:`UnusableDirectoryError` in ``exc``, however trio's nurseries grouped it."""
    if isinstance(exc, UnusableDirectoryError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _unusable_directory(inner)
            if found is not None:
                return found
    return None
