"""One pipelined v3 connection to one bookie, on trio.

Requests carry a connection-unique ``txnId``; the bookie echoes it, and may answer out of
order (a slow fencing read does not hold back a fast add). A single reader task matches
responses to waiters by txnId.

Two ways to send:

* :meth:`BookieConnection.call` awaits the answer (one task per request in flight) — simple,
  what tests and tools use. Frames are written under a lock so they never interleave.
* :meth:`BookieConnection.submit` queues the frame and returns at once; the answer (or
  ``None`` if the connection ends first) is handed to a callback from the reader task. A
  writer task sends whatever accumulated in one ``send_all``. The BookKeeper client's write
  path uses this: thousands of adds in flight cost no task each and one syscall per burst,
  as the bookie's own server does for its responses.

This is the layer both the bookie's black-box tests and the BookKeeper client build on; it
knows nothing about ledgers, quorums or digests.

A connection opened with ``v2=True`` (the client's ``useV2WireProtocol``) sends v2 packets
(:func:`~bookiesim.client.wire.to_v2`) and reads v2 answers. v2 has no txnId, so, as
upstream's ``PerChannelBookieClient`` does, an answer is matched by (operation, ledger,
entry); requests with the same key are answered first come, first served. Each request
still gets a connection-local txnId, never sent: waiters, timeouts and :meth:`forget` work
the same in both protocols, and callbacks get the answer as a v3 ``Response``.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from bookiesim.client.tls import start_tls
from bookiesim.client.wire import V2Key, response_from_v2, v2_key
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import v2 as v2_codec
from bookiesim.proto.frames import (
    NEED_DATA,
    FrameDecoder,
    FrameError,
    encode_frame,
)
from bookiesim.proto.transport import FramedWriter
from bookiesim.proto.v3 import parse_response

if TYPE_CHECKING:
    import ssl

log = logging.getLogger(__name__)

RECEIVE_CHUNK = 1 << 16

ResponseCallback = Callable[[pb.Response | None], None]
"""Receives the response, or ``None`` when the connection ended before it arrived."""


class ConnectionClosedError(ConnectionError):
    """The bookie closed the connection (or it broke) before answering."""


class BookieConnection:
    """Send v3 requests and await their responses; use :func:`connect` to open one."""

    def __init__(self, stream: trio.abc.Stream, *, v2: bool = False) -> None:
        self._stream = stream
        self.v2 = v2
        self._by_key: dict[V2Key, deque[int]] = {}
        """v2: the txnIds waiting for an answer with each key, oldest first."""
        self._send_lock = trio.Lock()
        self._txn_ids = itertools.count(1)
        self._waiters: dict[int, ResponseCallback] = {}
        self._closed: BaseException | None = None
        self._writer = FramedWriter(self._send_lock)

    def next_txn_id(self) -> int:
        return next(self._txn_ids)

    @staticmethod
    def header(operation: pb.OperationType.ValueType, txn_id: int) -> pb.BKPacketHeader:
        return pb.BKPacketHeader(version=pb.VERSION_THREE, operation=operation, txnId=txn_id)

    @property
    def closed(self) -> bool:
        """True once the reader saw the stream end (or fail); nothing will be answered."""
        return self._closed is not None

    @property
    def in_flight(self) -> int:
        """Requests sent (or queued) and not answered yet."""
        return len(self._waiters)

    async def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (tests use this to send garbage or hand-built frames)."""
        async with self._send_lock:
            await self._stream.send_all(data)

    async def send(self, request: pb.Request) -> None:
        """Send without waiting for the answer (write-close is fire-and-forget)."""
        await self.send_raw(encode_frame(request.SerializeToString()))

    async def call(self, request: pb.Request) -> pb.Response:
        """Send ``request`` and wait for the response with the same txnId (v3 only)."""
        if self.v2:
            raise ValueError("call() sends a v3 Request; a v2 connection takes submit() packets")
        if self._closed is not None:
            raise ConnectionClosedError("connection already closed") from self._closed
        txn_id = request.header.txnId
        done = trio.Event()
        box: list[pb.Response | None] = [None]

        def on_response(response: pb.Response | None) -> None:
            box[0] = response
            done.set()

        self._waiters[txn_id] = on_response
        try:
            try:
                await self.send(request)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                # The peer went away (a killed bookie) before the reader saw the stream end.
                raise ConnectionClosedError(f"closed before txnId {txn_id} was sent") from exc
            await done.wait()
        finally:
            self._waiters.pop(txn_id, None)
        response = box[0]
        if response is None:
            raise ConnectionClosedError(f"closed before txnId {txn_id} was answered")
        return response

    def submit(
        self,
        request: pb.Request | bytes,
        txn_id: int,
        callback: ResponseCallback,
        v2_key: V2Key | None = None,
    ) -> None:
        """Queue ``request`` (or its already serialized bytes) without waiting.

        ``callback`` runs in the reader task with the response, or with ``None`` if the
        connection ends first (also at once, if it already has). It must not block or raise.
        Needs :meth:`writer_loop` running, which :func:`connect` does. On a v2 connection
        ``request`` is a v2 packet and ``v2_key`` the key its answer will carry.
        """
        if self._closed is not None:
            callback(None)
            return
        self._waiters[txn_id] = callback
        if self.v2:
            if v2_key is None:
                raise ValueError("a request on a v2 connection needs the key of its answer")
            queue = self._by_key.get(v2_key)
            if queue is None:
                queue = self._by_key[v2_key] = deque()
            queue.append(txn_id)
        self._writer.send_message(
            request if isinstance(request, bytes) else request.SerializeToString()
        )

    def pending(self) -> list[tuple[int, ResponseCallback]]:
        """A snapshot of the requests still waiting for an answer (txnId, callback)."""
        return list(self._waiters.items())

    def forget(self, txn_id: int) -> ResponseCallback | None:
        """Stop waiting for ``txn_id`` (a timed-out request); returns its callback if it
        was still pending. A late answer is then dropped."""
        return self._waiters.pop(txn_id, None)

    async def writer_loop(self) -> None:
        """Send what :meth:`submit` queued, one ``send_all`` per burst, until closed."""
        try:
            await self._writer.run(self._stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            # The reader notices too (and fails the waiters); make sure it does soon.
            if self._closed is None:
                self._closed = exc
            self._fail_waiters()
            await trio.aclose_forcefully(self._stream)

    async def reader_loop(self) -> None:
        """Dispatch responses until the stream ends; wakes every waiter when it does."""
        decoder = FrameDecoder()
        waiters = self._waiters
        try:
            while True:
                data = await self._stream.receive_some(RECEIVE_CHUNK)
                if not data:
                    raise ConnectionClosedError("bookie closed the connection")
                decoder.receive_data(data)
                while (frame := decoder.next_frame()) is not NEED_DATA:
                    if self.v2:
                        self._dispatch_v2(frame)
                        continue
                    response = parse_response(frame)
                    callback = waiters.pop(response.header.txnId, None)
                    if callback is None:
                        log.debug("response for unknown txnId %d", response.header.txnId)
                        continue
                    _run_callback(callback, response)
        except FrameError as exc:
            # A bookie that answers garbage: nothing more on this connection can be trusted.
            log.warning("closing connection: %s", exc)
            self._closed = exc
            await trio.aclose_forcefully(self._stream)
        except (ConnectionClosedError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._closed = exc
        finally:
            if self._closed is None:
                self._closed = ConnectionClosedError("reader stopped")
            self._writer.abort()
            self._fail_waiters()

    def _dispatch_v2(self, frame: bytes) -> None:
        """Hand a v2 answer to the oldest request still waiting with its key."""
        answer = v2_codec.decode_response(frame)
        key = v2_key(answer)
        queue = self._by_key.get(key) if key is not None else None
        if key is None or queue is None:
            log.debug("v2 answer nobody waits for: %s", answer)
            return
        while queue:
            txn_id = queue.popleft()
            callback = self._waiters.pop(txn_id, None)
            if callback is not None:  # else forgotten (timed out): try the next one
                if not queue:
                    del self._by_key[key]
                _run_callback(callback, response_from_v2(answer, txn_id))
                return
        del self._by_key[key]
        log.debug("v2 answer for a request that timed out: %s", answer)

    def _fail_waiters(self) -> None:
        waiters = list(self._waiters.values())
        self._waiters.clear()
        self._by_key.clear()
        for callback in waiters:
            _run_callback(callback, None)

    async def aclose(self) -> None:
        await self._stream.aclose()


def _run_callback(callback: ResponseCallback, response: pb.Response | None) -> None:
    # A failing callback is a bug in its owner; it must not take the connection down with it.
    try:
        callback(response)
    except Exception:
        log.exception("response callback failed")


@asynccontextmanager
async def connect(
    host: str, port: int, *, v2: bool = False, tls: ssl.SSLContext | None = None
) -> AsyncIterator[BookieConnection]:
    """Open a connection whose reader and writer run for the duration of the block; with
    ``tls``, START_TLS and the handshake first (:mod:`.tls`)."""
    stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
    if tls is not None:
        try:
            stream = await start_tls(stream, tls, host)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
    conn = BookieConnection(stream, v2=v2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.reader_loop)
        nursery.start_soon(conn.writer_loop)
        try:
            yield conn
        finally:
            await conn.aclose()
            nursery.cancel_scope.cancel()
