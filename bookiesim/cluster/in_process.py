"""A local cluster in one trio run, for tests and experiments (like ``trio.testing``).

::

    async with running_cluster(tmp_path, 3) as cluster:
        async with BookKeeper(cluster.store) as bk:
            lh = await bk.create_ledger(3, 2, 2)
            await lh.add_entry(b"hello")
            await cluster.stop_bookie(lh.ensemble[0])     # the next add changes ensemble

:func:`running_cluster` starts ``n`` in-process bookies
(``bookiesim.cluster.testing.running_bookie``
style: free ports on 127.0.0.1, directories under the given path) and an embedded SQLite
metadata store, and registers every bookie in the store under its id (``host:port``) with
the ``writeClose`` feature, as a bookie process will register itself. Bookies can be stopped
(optionally leaving a stale registration behind, as a crashed bookie does until its session
expires) and restarted on the same port and directories.

With ``autorecovery`` (an :class:`~bookiesim.autorecovery.config.AutoRecoveryConfig`) each
bookie also runs auto-recovery beside it, as ``autoRecoveryDaemonEnabled=true`` does in a
bookie process: an :class:`~bookiesim.autorecovery.service.AutoRecoveryService` voting with
the bookie's id, started once the bookie is registered and stopped before the bookie stops
(its vote and locks go with it). Its admin routes are on :attr:`ClusterBookie.admin`, an
:class:`~bookiesim.bookie.http_admin.AdminRouter` tests can ``dispatch`` to.

:class:`FaultyConnector` is a bookie connector for :class:`~bookiesim.client.BookKeeper`
that can drop or hold the requests a client sends, by rule: enough to replay the message
orders of the TLA+ model's counterexamples (invariants §5) over real sockets.

:class:`TrioThread` runs a trio run in a thread so that synchronous code — hypothesis'
stateful rules — can drive a cluster and clients.
"""

from __future__ import annotations

import random
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

import trio

from bookiesim.autorecovery.service import AutoRecoveryService
from bookiesim.bookie.http_admin import AdminRouter
from bookiesim.bookie.process import BookieService
from bookiesim.client.bookie_pool import tcp_connector
from bookiesim.cluster.testing import bookie_config
from bookiesim.metadata.cluster import ensure_cluster
from bookiesim.metadata.factory import open_store
from bookiesim.metadata.registration import FEATURE_WRITE_CLOSE, BookieInfo, BookieRegistration
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.frames import NEED_DATA, FrameDecoder, encode_frame
from bookiesim.proto.v3 import parse_request

if TYPE_CHECKING:
    from bookiesim.autorecovery.config import AutoRecoveryConfig
    from bookiesim.metadata.store import MetadataStore

__all__ = [
    "ClusterBookie",
    "FaultyConnector",
    "LocalCluster",
    "RequestRule",
    "SeenRequest",
    "TrioThread",
    "running_cluster",
    "stable_port",
]

DEFAULT_FEATURES: frozenset[str] = frozenset({FEATURE_WRITE_CLOSE})


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def stable_port(host: str = "127.0.0.1") -> int:
    """A free TCP port *below* the kernel's ephemeral range.

    A bookie restarted "as itself" must get its port back, but a port handed out by
    ``bind(0)`` comes from the ephemeral range, where the kernel also picks the source
    ports of outgoing connections — a client's connection can sit on the stopped bookie's
    port and make the restart fail with EADDRINUSE. Ports below the range are never
    picked that way.
    """
    low, _ = _ephemeral_range()
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 20000), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


@dataclass
class ClusterBookie:
    """One bookie of a :class:`LocalCluster`: its directories, port and running state."""

    name: str
    root: Path
    features: frozenset[str]
    overrides: dict[str, object]
    port: int = 0
    service: BookieService | None = None
    bookie_scope: trio.CancelScope | None = None
    registration_scope: trio.CancelScope | None = None
    registration_ended: trio.Event = field(default_factory=trio.Event)
    stopped: trio.Event = field(default_factory=trio.Event)
    autorecovery: AutoRecoveryService | None = None
    """Auto-recovery beside this bookie, while it runs (see the module docstring)."""
    autorecovery_scope: trio.CancelScope | None = None
    autorecovery_ended: trio.Event = field(default_factory=trio.Event)
    admin: AdminRouter = field(default_factory=AdminRouter)
    """The auto-recovery admin routes of the running service (empty without one)."""

    @property
    def bookie_id(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.service is not None


class LocalCluster:
    """Bookies and a metadata store in the current trio run; see :func:`running_cluster`."""

    def __init__(
        self,
        root: Path,
        store: MetadataStore,
        uri: str,
        nursery: trio.Nursery,
        autorecovery: AutoRecoveryConfig | None = None,
    ):
        self.root = root
        self.store = store
        self.uri = uri
        self._nursery = nursery
        self.autorecovery = autorecovery
        self.bookies: dict[str, ClusterBookie] = {}
        self._count = 0

    def service(self, bookie_id: str) -> BookieService:
        """The running bookie with this id (``KeyError`` if stopped or unknown)."""
        service = self.bookies[bookie_id].service
        if service is None:
            raise KeyError(f"bookie {bookie_id} is not running")
        return service

    def running_ids(self) -> list[str]:
        return sorted(b for b, cb in self.bookies.items() if cb.running)

    async def start_bookie(
        self,
        bookie_id: str | None = None,
        *,
        features: Iterable[str] = DEFAULT_FEATURES,
        register: bool = True,
        overrides: Mapping[str, object] | None = None,
    ) -> str:
        """Start a new bookie (or restart the stopped ``bookie_id`` on its port and
        directories) and register it; returns its id. ``overrides`` are bookie config
        fields (``BookieConfig.replace`` names)."""
        if bookie_id is None:
            self._count += 1
            name = f"bookie{self._count}"
            cb = ClusterBookie(name, self.root / name, frozenset(features), dict(overrides or {}))
            cb.port = stable_port()
        else:
            cb = self.bookies[bookie_id]
            if cb.running:
                raise RuntimeError(f"bookie {bookie_id} is running")
            cb.overrides.update(overrides or {})
            cb.features = frozenset(features)
        cb.stopped = trio.Event()
        await self._nursery.start(self._run_bookie, cb)
        self.bookies[cb.bookie_id] = cb
        if register:
            await self.register(cb.bookie_id)
            if self.autorecovery is not None:
                await self._nursery.start(self._run_autorecovery, cb, self.autorecovery)
        return cb.bookie_id

    async def _run_autorecovery(
        self,
        cb: ClusterBookie,
        config: AutoRecoveryConfig,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        service = AutoRecoveryService(self.store, config, bookie_id=cb.bookie_id)
        cb.admin = AdminRouter()
        service.add_routes(cb.admin)
        scope = cb.autorecovery_scope = trio.CancelScope()
        cb.autorecovery_ended = ended = trio.Event()
        try:
            with scope:
                cb.autorecovery = service
                await service.run(task_status=task_status)
        finally:
            cb.autorecovery = None
            if cb.autorecovery_scope is scope:
                cb.autorecovery_scope = None
            ended.set()

    async def stop_autorecovery(self, bookie_id: str) -> None:
        """Stop the auto-recovery beside a bookie (its vote and locks go with it)."""
        cb = self.bookies[bookie_id]
        if cb.autorecovery_scope is not None:
            cb.autorecovery_scope.cancel()
            await cb.autorecovery_ended.wait()

    async def _run_bookie(
        self, cb: ClusterBookie, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        cfg = bookie_config(cb.root, bookie_port=cb.port)
        if cb.overrides:
            cfg = cfg.replace(**cb.overrides)
        service = BookieService(cfg)
        scope = cb.bookie_scope = trio.CancelScope()
        try:
            with scope:
                async with trio.open_nursery() as nursery:
                    address = await nursery.start(service.run)
                    cb.port = address.bookie_port
                    cb.service = service
                    task_status.started()
        finally:
            cb.service = None
            cb.stopped.set()

    async def register(self, bookie_id: str) -> None:
        """(Re-)register a bookie under its id (ephemeral, on the cluster's store session)."""
        cb = self.bookies[bookie_id]
        if cb.registration_scope is not None:
            return
        service = cb.service
        info = BookieInfo(
            bookie_id,
            host="127.0.0.1",
            port=cb.port,
            http_port=None
            if service is None or service.address is None
            else service.address.http_port,
            features=cb.features,
        )
        await self._nursery.start(self._run_registration, cb, info)

    async def _run_registration(
        self,
        cb: ClusterBookie,
        info: BookieInfo,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        scope = cb.registration_scope = trio.CancelScope()
        cb.registration_ended = ended = trio.Event()
        try:
            with scope:
                await BookieRegistration(self.store, info, stale_wait=1.0).run(
                    task_status=task_status
                )
        finally:
            if cb.registration_scope is scope:
                cb.registration_scope = None
            ended.set()

    async def unregister(self, bookie_id: str) -> None:
        """Remove a bookie's registration (clients stop choosing it)."""
        cb = self.bookies[bookie_id]
        scope = cb.registration_scope
        if scope is not None:
            scope.cancel()
            await cb.registration_ended.wait()

    async def stop_all(self) -> None:
        """Stop every running bookie (and drop every registration)."""
        for bookie_id in list(self.bookies):
            await self.stop_bookie(bookie_id)

    async def stop_bookie(self, bookie_id: str, *, unregister: bool = True) -> None:
        """Stop a bookie (it checkpoints and closes its connections). With
        ``unregister=False`` its registration stays, like a crashed bookie's until its
        session expires, so clients may still pick it and fail to connect."""
        cb = self.bookies[bookie_id]
        await self.stop_autorecovery(bookie_id)
        if unregister:
            await self.unregister(bookie_id)
        service = cb.service
        if cb.bookie_scope is not None and service is not None:
            cb.bookie_scope.cancel()
            await cb.stopped.wait()


@asynccontextmanager
async def running_cluster(
    root: Path,
    n: int = 3,
    *,
    features: Iterable[str] = DEFAULT_FEATURES,
    overrides: Mapping[str, object] | None = None,
    metadata_uri: str | None = None,
    store: MetadataStore | None = None,
    autorecovery: AutoRecoveryConfig | None = None,
) -> AsyncIterator[LocalCluster]:
    """``n`` registered in-process bookies under ``root`` and a metadata store — SQLite in
    ``root/meta.db`` unless ``metadata_uri`` names another, or ``store`` if given (already
    open, e.g. a :class:`~bookiesim.metadata.memory_store.MemoryStore` for virtual time;
    the caller closes it) — for the duration of the block. ``overrides`` are bookie config
    fields (``BookieConfig.replace`` names) for every bookie; ``autorecovery`` runs
    auto-recovery beside each bookie with that configuration."""
    await trio.Path(root).mkdir(parents=True, exist_ok=True)
    uri = metadata_uri or f"sqlite://{(root / 'meta.db').resolve()}"
    async with _opened_store(uri, store) as opened, trio.open_nursery() as nursery:
        cluster = LocalCluster(root, opened, opened.uri if store else uri, nursery, autorecovery)
        try:
            await ensure_cluster(opened)  # as a bookie process does at start
            for _ in range(n):
                await cluster.start_bookie(features=features, overrides=overrides)
            yield cluster
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(30):
                await cluster.stop_all()
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def _opened_store(uri: str, given: MetadataStore | None) -> AsyncIterator[MetadataStore]:
    if given is not None:
        yield given
        return
    async with open_store(uri) as store:
        yield store


# --- fault injection on the client side --------------------------------------------------


RequestRule = Callable[[str, pb.Request], str | None]
"""Given (bookie id, request), ``"drop"``, ``"hold"`` or ``None`` (deliver)."""


@dataclass(frozen=True)
class SeenRequest:
    """A request that went through a :class:`FaultyConnector`, and what became of it."""

    bookie: str
    operation: str
    """``ADD_ENTRY``, ``READ_ENTRY``, ``WRITE_CLOSE``, ..."""
    entry_id: int | None
    fence: bool
    """A read with FENCE_LEDGER."""
    recovery_add: bool
    """An add with RECOVERY_ADD."""
    verdict: str
    """``deliver``, ``drop`` or ``hold``."""


class FaultyConnector:
    """A bookie connector whose streams pass the client's requests through ``rules``.

    A rule returns ``"drop"`` (the frame is never sent: the client sees a timeout),
    ``"hold"`` (kept until :meth:`release`) or ``None``. Rules are tried in order; the
    first that answers wins. ``log`` records every request seen (:class:`SeenRequest`).
    """

    def __init__(self) -> None:
        self.rules: list[RequestRule] = []
        self.held: list[tuple[_FaultyStream, bytes, str, pb.Request]] = []
        self.log: list[SeenRequest] = []

    async def __call__(self, bookie_id: str) -> trio.abc.Stream:
        return _FaultyStream(await tcp_connector(bookie_id), bookie_id, self)

    def add_rule(self, rule: RequestRule) -> RequestRule:
        self.rules.append(rule)
        return rule

    def clear_rules(self) -> None:
        self.rules.clear()

    def verdict(self, bookie_id: str, request: pb.Request) -> str:
        for rule in self.rules:
            answer = rule(bookie_id, request)
            if answer is not None:
                return answer
        return "deliver"

    async def release(self, match: Callable[[str, pb.Request], bool] | None = None) -> int:
        """Send the held frames (those ``match`` accepts), in the order they were held."""
        keep: list[tuple[_FaultyStream, bytes, str, pb.Request]] = []
        sent = 0
        for stream, frame, bookie, request in list(self.held):
            if match is None or match(bookie, request):
                with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await stream.send_inner(frame)
                sent += 1
            else:
                keep.append((stream, frame, bookie, request))
        self.held = keep
        return sent

    def drop_held(self) -> int:
        n = len(self.held)
        self.held.clear()
        return n


def _seen(bookie: str, request: pb.Request, verdict: str) -> SeenRequest:
    entry_id: int | None = None
    fence = recovery_add = False
    if request.HasField("addRequest"):
        add = request.addRequest
        entry_id = add.entryId
        recovery_add = add.HasField("flag") and add.flag == pb.AddRequest.RECOVERY_ADD
    elif request.HasField("readRequest"):
        read = request.readRequest
        entry_id = read.entryId
        fence = read.HasField("flag") and read.flag == pb.ReadRequest.FENCE_LEDGER
    op = pb.OperationType.Name(request.header.operation)
    return SeenRequest(bookie, op, entry_id, fence, recovery_add, verdict)


class _FaultyStream(trio.abc.Stream):
    def __init__(self, inner: trio.abc.Stream, bookie_id: str, owner: FaultyConnector):
        self.inner = inner
        self.bookie_id = bookie_id
        self.owner = owner
        self._decoder = FrameDecoder()
        self._send_lock = trio.Lock()  # the connection's writer and release() both send

    async def send_inner(self, data: bytes | bytearray) -> None:
        async with self._send_lock:
            await self.inner.send_all(data)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self._decoder.receive_data(bytes(data))
        out = bytearray()
        while (frame := self._decoder.next_frame()) is not NEED_DATA:
            request = parse_request(frame)
            verdict = self.owner.verdict(self.bookie_id, request)
            self.owner.log.append(_seen(self.bookie_id, request, verdict))
            if verdict == "deliver":
                out += encode_frame(frame)
            elif verdict == "hold":
                self.owner.held.append((self, encode_frame(frame), self.bookie_id, request))
        if out:
            await self.send_inner(out)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


# --- driving trio from synchronous code (hypothesis stateful tests) ----------------------

T = TypeVar("T")


class TrioThread:
    """A trio run in a background thread that synchronous code can call into.

    Hypothesis' stateful tests have synchronous rules; this keeps one trio run (and
    whatever async context it opened: a cluster, clients) alive across rules::

        driver = TrioThread()
        cluster = driver.start(lambda: running_cluster(path, 3))
        driver.run(some_async_function, arg)
        driver.stop()
    """

    def __init__(self) -> None:
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._value: object = None
        self._error: BaseException | None = None

    def start(self, context: Callable[[], AbstractAsyncContextManager[T]]) -> T:
        """Run ``context()`` in a new trio run and return what it yields; it stays entered
        until :meth:`stop`."""

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            async with context() as value:
                self._value = value
                self._ready.set()
                await self._stop.wait()

        def thread() -> None:
            try:
                trio.run(main)
            except BaseException as exc:  # reported by start() or stop()
                self._error = exc
            finally:
                self._ready.set()

        self._thread = threading.Thread(target=thread, name="trio-driver", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise RuntimeError("the trio run failed to start") from self._error
        return cast("T", self._value)

    def run(self, fn: Callable[..., Awaitable[T]], *args: object) -> T:
        """Run ``await fn(*args)`` in the trio thread and return its result (or raise)."""
        assert self._token is not None, "start() first"
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def stop(self) -> None:
        """Leave the context and end the run; re-raises what it raised."""
        if self._thread is None:
            return
        if self._token is not None and self._stop is not None and self._error is None:
            with suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()
        self._thread = None
        if self._error is not None:
            raise RuntimeError("the trio run failed") from self._error
