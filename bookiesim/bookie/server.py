"""The bookie's TCP server on trio: framing, pipelining and ordered writes per connection.

Each connection has a reader (this task) and a writer task. The reader splits frames
(sans-IO :class:`~bookiesim.proto.frames.FrameDecoder`), parses them and hands them to the
:class:`~bookiesim.bookie.handlers.RequestProcessor`; responses are appended to the
connection's outgoing buffer whenever they are ready — possibly out of request order, which
the txnId makes safe — and the writer sends whatever has accumulated in one ``send_all``.
Batching the writes this way costs one syscall per burst instead of one per response.

Both protocols on one port, as upstream serves them (``BookieProtoEncoding.RequestDecoder``):
a connection starts in v3; the first frame that does not parse as a v3 ``Request`` is
decoded as v2 (:mod:`bookiesim.proto.v2`) and the connection stays v2 for good. The v3 loop
pays nothing for this (a ``try`` around the parse it always did); the switch hands the
connection to a second loop that decodes v2 only.

A frame that is too large or does not parse closes that connection (logged with the reason);
the bookie keeps serving every other connection.

With TLS or authorization configured (``security``), each connection also has a
:class:`~bookiesim.bookie.tls_connection.SecuredConnection`, asked about every request before
it is served (``START_TLS``, refusals before authentication: docs/tls.md); without, the
loops pay one ``is None`` test per frame.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from bookiesim.bookie.connection_security import Verdict
from bookiesim.bookie.listen import open_listeners
from bookiesim.bookie.processor import Processor, V2Processor
from bookiesim.bookie.tls_connection import SecuredConnection, ServerSecurity, SwitchableStream
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import v2
from bookiesim.proto.frames import (
    NEED_DATA,
    FrameDecoder,
    FrameError,
)
from bookiesim.proto.transport import FramedWriter
from bookiesim.proto.v3 import parse_request
from bookiesim.proto.v3_add import parse_add

if TYPE_CHECKING:
    from bookiesim.bookie.handlers import Respond

log = logging.getLogger(__name__)

RECEIVE_CHUNK = 1 << 15
"""Bytes read from a connection per turn: about 30 adds of 1 KiB, under a millisecond of
work. A connection's frames are handled without yielding, so after a stall a 256 KiB chunk
(the size before) kept the journal's commit and the response writer waiting for ~230 adds,
4-5 ms; at half the peak rate this cut the p99 with no disk in the way from 20-28 ms to
13-14 ms (BENCHMARKS.md, session 11), and left the peak where it was."""


async def _write_responses(outgoing: FramedWriter, stream: trio.abc.Stream) -> None:
    try:
        await outgoing.run(stream)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        outgoing.abort()  # the client is gone: later answers have no one to go to


class BookieServer:
    """Serves one :class:`Processor` on a listening socket."""

    def __init__(
        self,
        processor: Processor,
        *,
        max_frame_size: int,
        security: ServerSecurity | None = None,
    ) -> None:
        self.processor = processor
        self.security = security
        self.v2_processor = processor if isinstance(processor, V2Processor) else None
        self.max_frame_size = max_frame_size
        self.connections = 0
        self.v2_connections = 0
        """Connections that switched to v2 so far (for tests and the curious)."""

    async def serve(
        self,
        host: str,
        port: int,
        *,
        key: str = "bookiePort",
        listeners: list[trio.SocketListener] | None = None,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on ``host:port`` (0 = a free port), or on ``listeners`` bound before (a
        bookie that needs its port before it opens its storage), and report the bound port;
        :class:`~bookiesim.bookie.listen.ListenError` naming ``key`` if it cannot listen."""
        if listeners is None:
            listeners = await open_listeners(host, port, key)
        bound = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, self.handle_connection, listeners)
            task_status.started(bound)

    async def handle_connection(self, stream: trio.abc.Stream) -> None:
        self.connections += 1
        secured: SecuredConnection | None = None
        if self.security is None:
            outgoing = FramedWriter()
        else:
            lock = trio.Lock()  # held by the upgrade to TLS (tls_connection)
            outgoing = FramedWriter(lock)
            stream = SwitchableStream(stream)
            secured = SecuredConnection(self.security, stream, lock, outgoing)
        try:
            async with trio.open_nursery() as outer:
                outer.start_soon(_write_responses, outgoing, stream)
                try:
                    async with trio.open_nursery() as waiting:
                        await self._read_loop(stream, outgoing, waiting, secured)
                        # Long polls and fences of a gone client have no one to answer.
                        waiting.cancel_scope.cancel()
                finally:
                    # Let answers already computed go out; do not wait forever for a peer
                    # that stopped reading.
                    outgoing.close()
                    outer.cancel_scope.deadline = trio.current_time() + 5
        finally:
            self.connections -= 1
            await trio.aclose_forcefully(stream)

    async def _read_loop(
        self,
        stream: trio.abc.Stream,
        outgoing: FramedWriter,
        nursery: trio.Nursery,
        secured: SecuredConnection | None = None,
    ) -> None:
        """Read and dispatch until EOF; a broken stream or a bad frame ends it (logged)."""
        decoder = FrameDecoder(self.max_frame_size)
        processor = self.processor
        respond: Respond = outgoing.send
        try:
            while True:
                data = await stream.receive_some(RECEIVE_CHUNK)
                if not data:
                    return
                decoder.receive_data(data)
                while (frame := decoder.next_frame()) is not NEED_DATA:
                    if secured is None and (add := parse_add(frame)) is not None:
                        # The plain add, without a protobuf object (proto/v3_add.py).
                        if (throttled := processor.throttle()) is not None:
                            await throttled()
                        processor.process_add(frame, add, respond)
                        continue
                    try:
                        request = parse_request(frame)
                    except FrameError as exc:
                        if self.v2_processor is None:
                            raise
                        await self._serve_v2(
                            frame, exc, decoder, stream, outgoing, nursery, secured
                        )
                        return
                    if secured is not None and (
                        (verdict := secured.state.v3(request)) is not Verdict.SERVE
                    ):
                        await secured.act_v3(verdict, request, decoder, _peer(stream))
                        continue
                    if (throttled := processor.throttle()) is not None and (
                        request.header.operation == pb.ADD_ENTRY
                    ):
                        await throttled()
                    if processor.needs_task(request):
                        nursery.start_soon(processor.process_waiting, request, respond)
                    else:
                        processor.process(request, respond)
        except FrameError as exc:
            log.warning("closing connection from %s: %s", _peer(stream), exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            log.debug("connection from %s broke", _peer(stream))

    async def _serve_v2(
        self,
        first: bytes,
        v3_error: FrameError,
        decoder: FrameDecoder,
        stream: trio.abc.Stream,
        outgoing: FramedWriter,
        nursery: trio.Nursery,
        secured: SecuredConnection | None,
    ) -> None:
        """The rest of a connection whose frame ``first`` was not v3: decode it and every
        later frame as v2. Raises :class:`FrameError` for a frame that is not v2 either."""
        processor = self.v2_processor
        assert processor is not None
        respond: Respond = outgoing.send
        try:
            request = v2.decode_request(first)
        except v2.V2FrameError as exc:
            raise FrameError(f"first frame is neither v3 ({v3_error}) nor v2 ({exc})") from None
        self.v2_connections += 1
        log.debug("connection from %s speaks v2", _peer(stream))
        while True:
            if secured is not None and (verdict := secured.state.v2(request)) is not Verdict.SERVE:
                secured.act_v2(verdict, request)
            else:
                if (throttled := self.processor.throttle()) is not None and isinstance(
                    request, v2.AddRequest
                ):
                    await throttled()
                if processor.needs_task_v2(request):
                    nursery.start_soon(processor.process_waiting_v2, request, respond)
                else:
                    processor.process_v2(request, respond)
            while (frame := decoder.next_frame()) is NEED_DATA:
                data = await stream.receive_some(RECEIVE_CHUNK)
                if not data:
                    return
                decoder.receive_data(data)
            request = v2.decode_request(frame)


def _peer(stream: trio.abc.Stream) -> str:
    sock = getattr(stream, "socket", None)
    try:
        return str(sock.getpeername()) if sock is not None else "?"
    except OSError:
        return "?"
