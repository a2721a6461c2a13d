"""One pipelined connection per bookie, opened on first use and reopened after a failure.

Why a pool between ledger handles and connections: many ledgers share a bookie, and upstream
clients multiplex them over one channel per bookie (``PerChannelBookieClient``), so a bookie
sees one connection per client whatever the number of ledgers. Handles never see a
connection: they :meth:`BookiePool.submit` a request to a *bookie id* and get a callback with
the response or a :class:`~bookiesim.client.errors.BookieUnavailableError` (connection
refused or lost, or no answer within the request timeout). Submitting never blocks: while a
connection is being opened, requests wait in a backlog and go out in submission order.

Requests to a bookie that is down fail fast (its connect fails); the next request tries to
connect again, which is how the pool "reconnects on failure". How a bookie id becomes a
stream is the *connector*'s business: TCP to ``host:port`` by default; tests pass one that
wraps streams to drop, delay or hold frames.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from bookiesim.client.bookie_connection import BookieConnection
from bookiesim.client.errors import BKError, BookieUnavailableError
from bookiesim.client.wire import NotOnV2Error, to_v2
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.v3 import WireRequest, encode_request

__all__ = ["BookieConnector", "BookiePool", "Outcome", "OutcomeCallback", "tcp_connector"]

log = logging.getLogger(__name__)

BookieConnector = Callable[[str], Awaitable[trio.abc.Stream]]
"""Opens a stream to a bookie given its id (``host:port``)."""

Outcome = pb.Response | BKError
OutcomeCallback = Callable[[Outcome], None]


async def tcp_connector(bookie_id: str) -> trio.abc.Stream:
    """TCP to the ``host:port`` a bookie id names (``[v6]:port`` works too)."""
    host, sep, port = bookie_id.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bookie id {bookie_id!r} is not host:port")
    return await trio.open_tcp_stream(host.strip("[]"), int(port))


class _Pending:
    """The connection-level callback of one request: remembers when it was sent (in ticks
    of its channel's expiry clock) and hands the outcome to the caller's callback."""

    __slots__ = ("bookie_id", "callback", "sent_tick")

    def __init__(self, bookie_id: str, callback: OutcomeCallback, sent_tick: int) -> None:
        self.bookie_id = bookie_id
        self.callback = callback
        self.sent_tick = sent_tick

    def __call__(self, response: pb.Response | None) -> None:
        if response is None:
            self.callback(BookieUnavailableError("connection lost", bookie=self.bookie_id))
        else:
            self.callback(response)

    def timed_out(self, timeout: float) -> None:
        self.callback(BookieUnavailableError(f"no answer in {timeout:g} s", bookie=self.bookie_id))


@dataclass
class _Channel:
    bookie_id: str
    conn: BookieConnection | None = None
    connecting: bool = False
    backlog: list[tuple[WireRequest, OutcomeCallback]] = field(default_factory=list)
    connects: int = 0
    tick: int = 0
    """Advanced by the expiry loop: requests are stamped with it instead of reading the
    clock for each one (a clock read cost as much as a third of a submit)."""
    parked: trio.Event | None = None
    """Set while the expiry loop sleeps with nothing to expire; the next send wakes it."""
    grid: tuple[float, int, float] = (0.0, 0, 1.0)
    """The expiry loop's tick grid: (time of tick ``base``, ``base``, tick length). While it
    is parked, a send works out from it which tick it is, as the loop would have counted."""

    def catch_up(self) -> None:
        """Bring :attr:`tick` to where a loop that never parked would have it now."""
        origin, base, length = self.grid
        self.tick = max(self.tick, base + math.floor((trio.current_time() - origin) / length))


class BookiePool:
    """Connections to bookies by id; every background task runs in ``nursery``."""

    def __init__(
        self,
        nursery: trio.Nursery,
        connector: BookieConnector = tcp_connector,
        *,
        request_timeout: float = 10.0,
        connect_timeout: float = 5.0,
        v2: bool = False,
    ) -> None:
        self._nursery = nursery
        self.v2 = v2
        """Speak the v2 protocol to every bookie (``useV2WireProtocol``)."""
        self._connector = connector
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self._channels: dict[str, _Channel] = {}
        self._closed = False

    # -- sending ---------------------------------------------------------------------------

    def submit(self, bookie_id: str, request: WireRequest, callback: OutcomeCallback) -> None:
        """Send ``request`` (with a header and txnId made here) and call ``callback`` once
        with the response or a :class:`BookieUnavailableError`. Never blocks; the callback
        may run before this returns (a closed pool, a connection known to be broken)."""
        if self._closed:
            callback(BookieUnavailableError("client is closed", bookie=bookie_id))
            return
        ch = self._channels.get(bookie_id)
        if ch is None:
            ch = self._channels[bookie_id] = _Channel(bookie_id)
        conn = ch.conn
        if conn is not None and not conn.closed:
            self._send(ch, conn, request, callback)
            return
        ch.conn = None
        ch.backlog.append((request, callback))
        if not ch.connecting:
            ch.connecting = True
            self._nursery.start_soon(self._run_channel, ch)

    def _send(
        self,
        ch: _Channel,
        conn: BookieConnection,
        request: WireRequest,
        callback: OutcomeCallback,
    ) -> None:
        parked = ch.parked
        if parked is not None:
            ch.parked = None
            ch.catch_up()
            parked.set()
        txn_id = conn.next_txn_id()
        if conn.v2:
            try:
                packet, key = to_v2(request)
            except NotOnV2Error as exc:
                callback(BKError(f"not sent over the v2 protocol: {exc}", bookie=ch.bookie_id))
                return
            conn.submit(packet, txn_id, _Pending(ch.bookie_id, callback, ch.tick), key)
            return
        data = encode_request(request, txn_id)
        conn.submit(data, txn_id, _Pending(ch.bookie_id, callback, ch.tick))

    async def call(self, bookie_id: str, request: WireRequest) -> pb.Response:
        """Send and wait; raises :class:`BookieUnavailableError` (never a status error)."""
        done = trio.Event()
        box: list[Outcome] = []

        def on_outcome(outcome: Outcome) -> None:
            box.append(outcome)
            done.set()

        self.submit(bookie_id, request, on_outcome)
        await done.wait()
        outcome = box[0]
        if isinstance(outcome, BKError):
            raise outcome
        return outcome

    # -- connections -----------------------------------------------------------------------

    async def _run_channel(self, ch: _Channel) -> None:
        try:
            with trio.fail_after(self.connect_timeout):
                stream = await self._connector(ch.bookie_id)
        except Exception as exc:  # refused, unreachable, slow, or a connector's own error
            ch.connecting = False
            backlog, ch.backlog = ch.backlog, []
            log.info("cannot connect to bookie %s: %s", ch.bookie_id, exc)
            error = BookieUnavailableError(f"cannot connect: {exc}", bookie=ch.bookie_id)
            for _, callback in backlog:
                callback(error)
            return
        conn = BookieConnection(stream, v2=self.v2)
        ch.connects += 1
        ch.conn = conn
        ch.connecting = False
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn.writer_loop)
                nursery.start_soon(self._expire_loop, ch, conn)
                backlog, ch.backlog = ch.backlog, []
                for request, callback in backlog:
                    self._send(ch, conn, request, callback)
                await conn.reader_loop()
                nursery.cancel_scope.cancel()
        finally:
            ch.parked = None  # the loop that parked is gone with its connection
            if ch.conn is conn:
                ch.conn = None
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
            log.debug("connection to bookie %s ended", ch.bookie_id)

    async def _expire_loop(self, ch: _Channel, conn: BookieConnection) -> None:
        """Fail requests that waited longer than the request timeout (the bookie hangs, or
        the network dropped the frame); a late answer is then ignored. Requests expire
        between one and 1.25 timeouts after they were sent.

        The loop ticks on a fixed grid from the connection's start. While nothing is in
        flight it sleeps until the next send instead of ticking (an idle client would
        otherwise wake once a second per bookie); that send first counts the ticks the
        loop skipped, so every request expires at the tick it would have without parking.
        """
        length = min(1.0, max(0.02, self.request_timeout / 4))
        ticks = math.ceil(self.request_timeout / length)
        origin, base = trio.current_time(), ch.tick
        ch.grid = (origin, base, length)
        while True:
            await trio.sleep_until(origin + (ch.tick - base + 1) * length)
            ch.tick += 1
            for txn_id, callback in conn.pending():
                if isinstance(callback, _Pending) and ch.tick - callback.sent_tick > ticks:
                    conn.forget(txn_id)
                    callback.timed_out(self.request_timeout)
            # Looked at after the expiries: a timed-out callback may have sent again. No
            # await between this check and parking, so a send cannot slip in between.
            if not any(isinstance(callback, _Pending) for _, callback in conn.pending()):
                parked = ch.parked = trio.Event()
                await parked.wait()

    # -- introspection and shutdown ----------------------------------------------------------

    def connects(self, bookie_id: str) -> int:
        """How many connections to this bookie were opened so far."""
        ch = self._channels.get(bookie_id)
        return 0 if ch is None else ch.connects

    def connected(self) -> list[str]:
        """Bookies with an open connection now."""
        return sorted(b for b, ch in self._channels.items() if ch.conn and not ch.conn.closed)

    async def disconnect(self, bookie_id: str) -> None:
        """Close this bookie's connection (in-flight requests fail); the next request
        reconnects."""
        ch = self._channels.get(bookie_id)
        if ch is not None and ch.conn is not None:
            await ch.conn.aclose()

    def close(self) -> None:
        """Refuse new requests; the owner cancels the nursery to end the connections."""
        self._closed = True
