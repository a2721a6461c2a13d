"""The BookKeeper client object: metadata, bookie connections, and the ledger operations.

::

    async with BookKeeper.open("sqlite:///tmp/cluster/meta.db") as bk:
        lh = await bk.create_ledger(3, 2, 2)
        entry_id = await lh.add_entry(b"hello")
        await lh.close()
        reader = await bk.open_ledger(lh.ledger_id)
        entries = await reader.read_entries(0, reader.last_add_confirmed)

One :class:`BookKeeper` owns one pipelined connection per bookie (shared by all its ledger
handles), a :class:`~bookiesim.metadata.ledgers.LedgerManager` on the metadata store, and a
nursery in which everything that outlives a call runs: connections, ensemble changes,
fire-and-forget WriteClose. Leaving its ``async with`` stops all of that; WriteCloses still
in flight get a short grace period first.
"""

from __future__ import annotations

import logging
import random
import time
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Self

import trio

from bookiesim.client.bookie_pool import BookieConnector, BookiePool, Outcome
from bookiesim.client.context import ClientConfig, ClientStats, EnsembleProposal
from bookiesim.client.digest import DigestType
from bookiesim.client.errors import (
    BKError,
    LedgerClosedError,
    LedgerFencedError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    UnauthorizedError,
    read_only_note,
)
from bookiesim.client.ledger_handle import LedgerHandle
from bookiesim.client.read_handle import LedgerEntry, ReadOnlyLedgerHandle
from bookiesim.client.recovery import recover_ledger
from bookiesim.client.tls import start_tls
from bookiesim.metadata.cluster import refuse_previous_uri_form
from bookiesim.metadata.errors import NoSuchLedgerError as MetaNoSuchLedgerError
from bookiesim.metadata.factory import open_store
from bookiesim.metadata.ledgers import DigestType as MetaDigestType
from bookiesim.metadata.ledgers import (
    LedgerManager,
    LedgerMetadata,
    LedgerState,
)
from bookiesim.metadata.registration import (
    BookieInfo,
    bookie_address,
    live_bookies,
    read_only_bookies,
)
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.tls import client_context
from bookiesim.proto.tls_refresh import RefreshingContext
from bookiesim.proto.v3 import from_message

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Collection, Mapping
    from types import TracebackType

    from bookiesim.metadata.store import MetadataStore

__all__ = ["BookKeeper", "ClientConfig", "ClientStats", "EnsembleProposal"]

log = logging.getLogger(__name__)


class BookKeeper:
    """A BookKeeper client on a metadata store; use as ``async with BookKeeper(store)``
    or :meth:`open` with a URI."""

    def __init__(
        self,
        metadata_store: MetadataStore,
        *,
        bookie_connector: BookieConnector | None = None,
        config: ClientConfig | None = None,
        ledgers_root: str | None = None,
    ) -> None:
        self.store = metadata_store
        self.config = config if config is not None else ClientConfig()
        self.ledgers_root = metadata_store.ledgers_root if ledgers_root is None else ledgers_root
        self.ledger_manager = LedgerManager(metadata_store, self.ledgers_root)
        self.stats = ClientStats()
        self.rng = random.Random(self.config.seed)
        # By default a bookie id is resolved through its registration's bookie-rpc endpoint,
        # as upstream's client does, so upstream bookies (whose ids need not be their
        # address) are reached where they say; tests pass connectors of their own.
        self._connector = self._connect_registered
        if bookie_connector is not None:
            self._connector = partial(self._connect_given, bookie_connector)
        tls = self.config.tls
        self._tls = (
            RefreshingContext(tls, client_context) if tls is not None and tls.enabled else None
        )
        self._stack: AsyncExitStack | None = None
        self._nursery: trio.Nursery | None = None
        self._pool: BookiePool | None = None
        self._write_closes_in_flight = 0
        self._write_closes_done = trio.Event()

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        uri: str,
        *,
        bookie_connector: BookieConnector | None = None,
        config: ClientConfig | None = None,
        ledgers_root: str | None = None,
    ) -> AsyncIterator[BookKeeper]:
        """Open the metadata store ``uri`` names and a client on it, for the block. A URI in
        the previous version's form (``MovedLedgersRootError``) is refused here."""
        async with open_store(uri) as store:
            await refuse_previous_uri_form(store, ledgers_root)
            async with cls(
                store, bookie_connector=bookie_connector, config=config, ledgers_root=ledgers_root
            ) as bk:
                yield bk

    async def __aenter__(self) -> Self:
        if self._stack is not None:
            raise RuntimeError("this BookKeeper client is already running")
        stack = AsyncExitStack()
        self._nursery = await stack.enter_async_context(trio.open_nursery())
        self._pool = BookiePool(
            self._nursery,
            self._connector,
            request_timeout=self.config.request_timeout,
            connect_timeout=self.config.connect_timeout,
            v2=self.config.use_v2_wire_protocol,
        )
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, self._stack = self._stack, None
        assert stack is not None
        assert self._nursery is not None
        try:
            if exc_type is None:
                with trio.move_on_after(self.config.write_close_grace):
                    await self.wait_write_closes()
        finally:
            if self._pool is not None:
                self._pool.close()
            self._nursery.cancel_scope.cancel()
            result = await stack.__aexit__(exc_type, exc, tb)
        return result

    @property
    def nursery(self) -> trio.Nursery:
        if self._nursery is None:
            raise RuntimeError("use the client inside 'async with'")
        return self._nursery

    @property
    def pool(self) -> BookiePool:
        if self._pool is None:
            raise RuntimeError("use the client inside 'async with'")
        return self._pool

    # -- bookies -------------------------------------------------------------------------

    async def live_bookies(self) -> dict[str, BookieInfo]:
        """The bookies registered now, by id."""
        return await live_bookies(self.store, self.ledgers_root)

    async def read_only_bookies(self) -> dict[str, BookieInfo]:
        """The bookies registered read-only now, by id."""
        return await read_only_bookies(self.store, self.ledgers_root)

    async def _connect_registered(self, bookie_id: str) -> trio.abc.Stream:
        host, port = await bookie_address(self.store, bookie_id, self.ledgers_root)
        return await self._secure(await trio.open_tcp_stream(host, port), host)

    async def _connect_given(self, connector: BookieConnector, bookie_id: str) -> trio.abc.Stream:
        host = bookie_id.rpartition(":")[0].strip("[]")
        return await self._secure(await connector(bookie_id), host)

    async def _secure(self, stream: trio.abc.Stream, host: str) -> trio.abc.Stream:
        """With TLS configured, START_TLS and the handshake, as upstream's client does
        first on every connection (:mod:`.tls`); else the stream as it is."""
        if self._tls is None:
            return stream
        try:
            with trio.fail_after(self.config.start_tls_timeout):
                return await start_tls(stream, self._tls.context, host)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise

    # -- ledgers ---------------------------------------------------------------------------

    async def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 2,
        ack_quorum: int = 2,
        digest_type: DigestType = DigestType.CRC32C,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        *,
        among: Collection[str] | None = None,
    ) -> LedgerHandle:
        """A new OPEN ledger on ``ensemble_size`` live bookies chosen at random (from
        ``among`` only, when given: the shell's ``bookiesanity`` places on the local bookie,
        as upstream's ``LocalBookieEnsemblePlacementPolicy`` does)."""
        if not ensemble_size >= write_quorum >= ack_quorum >= 1:
            raise ValueError(
                f"need E >= Qw >= Qa >= 1, got E={ensemble_size} Qw={write_quorum} Qa={ack_quorum}"
            )
        live = sorted(await self.live_bookies())
        if among is not None:
            live = [bookie for bookie in live if bookie in among]
        if len(live) < ensemble_size:
            raise NotEnoughBookiesError(
                f"an ensemble of {ensemble_size} needs that many live bookies; "
                f"{len(live)} registered ({live})" + read_only_note(await self.read_only_bookies())
            )
        ensemble = tuple(self.rng.sample(live, ensemble_size))
        metadata = LedgerMetadata(
            ensemble_size=ensemble_size,
            write_quorum_size=write_quorum,
            ack_quorum_size=ack_quorum,
            ensembles={0: ensemble},
            digest_type=MetaDigestType(int(digest_type)),
            password=password,
            ctime=int(time.time() * 1000),
            custom_metadata=dict(custom_metadata or {}),
        )
        ledger_id = await self.ledger_manager.create(metadata)
        log.info("created ledger %d on %s", ledger_id, ensemble)
        return LedgerHandle(self, ledger_id, metadata, 0)

    async def read_metadata(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        try:
            return await self.ledger_manager.read(ledger_id)
        except MetaNoSuchLedgerError:
            raise NoSuchLedgerError("no metadata", ledger_id=ledger_id) from None

    async def open_ledger(
        self, ledger_id: int, *, recovery: bool = False, password: bytes | None = None
    ) -> ReadOnlyLedgerHandle:
        """A read-only handle.

        With ``recovery=True`` an open ledger is fenced, its tail recovered and the ledger
        closed first (:mod:`.recovery`), so the handle sees its final content. Without, an
        open ledger's handle starts at the LAC the bookies report now (no fencing: the
        writer goes on); if their answers cannot cover the last ensemble, the open fails
        (:class:`BookieUnavailableError`). ``password``, if given, must be the ledger's.
        """
        metadata, version = await self.read_metadata(ledger_id)
        if password is not None and password != metadata.password:
            raise UnauthorizedError("wrong password", ledger_id=ledger_id)
        if recovery and not metadata.is_closed:
            return await recover_ledger(self, ledger_id)
        handle = ReadOnlyLedgerHandle(self, ledger_id, metadata, version)
        if not metadata.is_closed:
            # As upstream's open without recovery: a LAC that cannot be learnt (too few
            # bookies of the last ensemble answer) fails the open, rather than a handle that
            # reads as an empty ledger.
            await handle.read_last_add_confirmed()
        return handle

    async def resume_ledger(self, ledger_id: int, *, password: bytes | None = None) -> LedgerHandle:
        """A writer for an OPEN ledger whose previous writer has gone without closing it,
        e.g. an earlier ``bookiesim ledger write`` process: new adds continue after the
        entries the bookies hold.

        The end is found as recovery finds it, by quorum coverage (:mod:`.read_handle`): the
        LAC the last ensemble reports (raised to the entry before that ensemble's first, as
        recovery does), then each entry past it is read until ``Qw - Qa + 1`` bookies of its
        write set say they lack one, so a bookie that is down leaves nothing undecided that
        the others can decide. Entries found past the LAC (a writer that stopped mid-add) are
        re-added to their whole write set first, so they are kept, in order, as recovery
        would keep them; a bookie of the ensemble that fails them, or the first new add, is
        replaced by an ensemble change. Raises when the end cannot be told (too few bookies
        answer).

        Upstream has no such call: nothing in the metadata says whether the old writer is
        still alive, so resuming a ledger that another process still writes to makes two
        writers of one ledger. When unsure, use ``open_ledger(recovery=True)``, which fences
        the old writer out.
        """
        metadata, _ = await self.read_metadata(ledger_id)
        if password is not None and password != metadata.password:
            raise UnauthorizedError("wrong password", ledger_id=ledger_id)
        if metadata.state is LedgerState.CLOSED:
            raise LedgerClosedError(
                f"closed at entry {metadata.last_entry_id}; cannot write more", ledger_id=ledger_id
            )
        if metadata.state is LedgerState.IN_RECOVERY:
            raise LedgerFencedError("a recovery is in progress", ledger_id=ledger_id)
        reader = ReadOnlyLedgerHandle(self, ledger_id, metadata, 0)
        lac = await reader.read_last_add_confirmed()
        length = reader.length
        first, _ = reader.metadata.last_ensemble
        if lac < first - 1:
            # The last ensemble started after an ensemble change at its writer's LAC + 1:
            # everything before it was acknowledged (and the bookies' LAC lags by one).
            lac = first - 1
            length = (await reader.read_entry_unconfirmed(lac)).length
        tail: list[LedgerEntry] = []
        while (entry := await reader.read_past_lac(lac + len(tail) + 1)) is not None:
            tail.append(entry)
        writer = LedgerHandle(
            self,
            ledger_id,
            reader.metadata,
            reader.version,
            last_add_confirmed=lac,
            length=length,
        )
        if tail:
            log.info(
                "ledger %d: re-adding %d entries past LAC %d before resuming",
                ledger_id,
                len(tail),
                lac,
            )
            for entry in tail:
                writer._append_recovered(entry.entry_id, entry.payload, entry.length)
            await writer.wait_for_pending()
            if writer.error is not None:
                raise writer.error
        return writer

    async def delete_ledger(self, ledger_id: int) -> None:
        """Remove the ledger's metadata; the bookies' garbage collectors reclaim its data."""
        try:
            await self.ledger_manager.delete(ledger_id)
        except MetaNoSuchLedgerError:
            raise NoSuchLedgerError("no metadata", ledger_id=ledger_id) from None

    async def list_ledgers(self) -> list[int]:
        return await self.ledger_manager.list_ledgers()

    # -- write-close (BP-32) -----------------------------------------------------------------

    def send_write_close(self, ledger_id: int, metadata: LedgerMetadata, master_key: bytes) -> None:
        """Tell every bookie of the ledger's ensembles that advertises ``writeClose`` that
        the writer is done, in the background: the caller does not wait, and a lost
        WriteClose changes only when the bookie rotates the ledger's log (on expiry)."""
        self._write_closes_in_flight += 1
        self.nursery.start_soon(self._write_close, ledger_id, metadata.bookies(), master_key)

    async def _write_close(self, ledger_id: int, bookies: set[str], master_key: bytes) -> None:
        try:
            live = await self.live_bookies()
            done = trio.Event()
            waiting = 0

            def on_outcome(bookie: str, outcome: Outcome) -> None:
                nonlocal waiting
                waiting -= 1
                if isinstance(outcome, BKError):
                    self.stats.write_close_failed += 1
                    log.info("WriteClose of ledger %d: %s", ledger_id, outcome)
                elif outcome.status == pb.EOK:
                    self.stats.write_close_ok += 1
                    log.debug("WriteClose of ledger %d acknowledged by %s", ledger_id, bookie)
                else:
                    self.stats.write_close_failed += 1
                    log.info(
                        "WriteClose of ledger %d: bookie %s answered %s",
                        ledger_id,
                        bookie,
                        pb.StatusCode.Name(outcome.status),
                    )
                if waiting == 0:
                    done.set()

            for bookie in sorted(bookies):
                info = live.get(bookie)
                if info is None or not info.supports_write_close or self.pool.v2:
                    # Over v2 too: WriteClose has no v2 form, and a bookie's connection that
                    # switched to v2 cannot decode a v3 frame any more.
                    self.stats.write_close_skipped += 1
                    continue
                request = from_message(
                    pb.Request(
                        writeCloseRequest=pb.WriteCloseRequest(
                            ledgerId=ledger_id, masterKey=master_key
                        )
                    )
                )
                waiting += 1
                self.stats.write_close_sent += 1
                self.pool.submit(bookie, request, partial(on_outcome, bookie))
            if waiting:
                await done.wait()
        except Exception as exc:  # advisory: never let it take the client down
            log.warning("WriteClose of ledger %d not sent: %s", ledger_id, exc)
        finally:
            self._write_closes_in_flight -= 1
            if self._write_closes_in_flight == 0:
                self._write_closes_done.set()
                self._write_closes_done = trio.Event()

    async def wait_write_closes(self) -> None:
        """Until every WriteClose sent so far has been answered, failed or timed out."""
        while self._write_closes_in_flight:
            await self._write_closes_done.wait()
