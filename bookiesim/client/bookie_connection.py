"""One pipelined v3 connection to one bookie, on trio.

Requests carry a connection-unique ``txnId``; the bookie echoes it, and may answer out of
order (a slow fencing read does not hold back a fast add). A single reader task matches
responses to waiters by txnId. Writes are serialised by a lock so frames never interleave.

This is the layer both the bookie's black-box tests and the BookKeeper client build on; it
knows nothing about ledgers, quorums or digests.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.frames import NEED_DATA, FrameDecoder, encode_frame, parse_response

log = logging.getLogger(__name__)

RECEIVE_CHUNK = 1 << 16


class ConnectionClosedError(ConnectionError):
    """The bookie closed the connection (or it broke) before answering."""


@dataclass
class _Waiter:
    event: trio.Event = field(default_factory=trio.Event)
    response: pb.Response | None = None


class BookieConnection:
    """Send v3 requests and await their responses; use :func:`connect` to open one."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self._send_lock = trio.Lock()
        self._txn_ids = itertools.count(1)
        self._waiters: dict[int, _Waiter] = {}
        self._closed: BaseException | None = None

    def next_txn_id(self) -> int:
        return next(self._txn_ids)

    @staticmethod
    def header(operation: pb.OperationType.ValueType, txn_id: int) -> pb.BKPacketHeader:
        return pb.BKPacketHeader(version=pb.VERSION_THREE, operation=operation, txnId=txn_id)

    async def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (tests use this to send garbage or hand-built frames)."""
        async with self._send_lock:
            await self._stream.send_all(data)

    async def send(self, request: pb.Request) -> None:
        """Send without waiting for the answer (write-close is fire-and-forget)."""
        await self.send_raw(encode_frame(request.SerializeToString()))

    async def call(self, request: pb.Request) -> pb.Response:
        """Send ``request`` and wait for the response with the same txnId."""
        if self._closed is not None:
            raise ConnectionClosedError("connection already closed") from self._closed
        txn_id = request.header.txnId
        waiter = _Waiter()
        self._waiters[txn_id] = waiter
        try:
            await self.send(request)
            await waiter.event.wait()
        finally:
            self._waiters.pop(txn_id, None)
        if waiter.response is None:
            raise ConnectionClosedError(f"closed before txnId {txn_id} was answered")
        return waiter.response

    async def reader_loop(self) -> None:
        """Dispatch responses until the stream ends; wakes every waiter when it does."""
        decoder = FrameDecoder()
        try:
            while True:
                data = await self._stream.receive_some(RECEIVE_CHUNK)
                if not data:
                    raise ConnectionClosedError("bookie closed the connection")
                decoder.receive_data(data)
                while (frame := decoder.next_frame()) is not NEED_DATA:
                    response = parse_response(frame)
                    waiter = self._waiters.get(response.header.txnId)
                    if waiter is None:
                        log.debug("response for unknown txnId %d", response.header.txnId)
                        continue
                    waiter.response = response
                    waiter.event.set()
        except (ConnectionClosedError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._closed = exc
        finally:
            if self._closed is None:
                self._closed = ConnectionClosedError("reader stopped")
            for waiter in self._waiters.values():
                waiter.event.set()

    async def aclose(self) -> None:
        await self._stream.aclose()


@asynccontextmanager
async def connect(host: str, port: int) -> AsyncIterator[BookieConnection]:
    """Open a connection whose reader runs for the duration of the ``async with`` block."""
    stream = await trio.open_tcp_stream(host, port)
    conn = BookieConnection(stream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.reader_loop)
        try:
            yield conn
        finally:
            await conn.aclose()
            nursery.cancel_scope.cancel()
