"""A frame relay between load clients and a bookie: the toll of forwarding, measured alone.

A bookie made of shard processes (issue 35) accepts a connection in whichever shard the
kernel hands it to (``SO_REUSEPORT``). A frame whose ledger lives in the other shard must be
forwarded there and its response carried back; with upstream's default of one channel per
bookie, every other frame of a two-shard bookie is such a frame, whatever the client does.
``bench shards``'s ``relay`` layout puts this process between the load clients and one
bookie, relaying *every* frame, so that its CPU per add is what the accepting shard would pay
per forwarded add: each request frame split from the stream, decoded far enough to know its
ledger (a v3 request parsed whole, as routing by ledger needs), written to the owner; each
response frame split from the owner's stream and written back to the client. One connection
to the bookie per client connection, as a shard would keep one per (client, peer), so
responses need no renumbering.

Run as ``python -m bookiesim.bench.relay --to PORT``: prints ``{"port": N}`` once it listens
on 127.0.0.1, relays until SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from typing import TYPE_CHECKING

import trio

from bookiesim.proto.frames import FrameDecoder, encode_frame
from bookiesim.proto.v3 import parse_request

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["main", "relay_connection"]

HOST = "127.0.0.1"
RECEIVE_SIZE = 256 * 1024


def ledger_of(frame: bytes) -> int:
    """The ledger a v3 request frame names (0 for requests that name none)."""
    request = parse_request(frame)
    for field in ("addRequest", "readRequest", "readLacRequest", "writeLacRequest"):
        if request.HasField(field):
            return int(getattr(request, field).ledgerId)
    return 0


async def _frames(
    source: trio.SocketStream, sink: trio.SocketStream, route: Callable[[bytes], int] | None
) -> None:
    """Whole frames from ``source`` to ``sink`` (a shard interleaves its own responses with
    forwarded ones, so it must write whole frames), each first given to ``route``: a shard's
    routing decision for a request (one owner here, so the answer goes unused)."""
    decoder = FrameDecoder()
    while data := await source.receive_some(RECEIVE_SIZE):
        decoder.receive_data(data)
        out = bytearray()
        for frame in decoder.next_frames():
            if route is not None:
                route(frame)
            out += encode_frame(frame)
        if out:
            await sink.send_all(out)


async def _requests(client: trio.SocketStream, owner: trio.SocketStream) -> None:
    await _frames(client, owner, ledger_of)
    await owner.send_eof()


async def relay_connection(client: trio.SocketStream, to_port: int) -> None:
    """Relay one client connection to the bookie on ``to_port`` until either side closes."""
    async with (
        client,
        await trio.open_tcp_stream(HOST, to_port) as owner,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(_requests, client, owner)
        await _frames(owner, client, None)
        nursery.cancel_scope.cancel()


async def _serve(to_port: int) -> None:
    listeners = await trio.open_tcp_listeners(0, host=HOST)
    port = listeners[0].socket.getsockname()[1]
    print(json.dumps({"port": port}), flush=True)
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def handle(stream: trio.SocketStream) -> None:
                # A side that went away ends this connection's run, nothing more.
                with contextlib.suppress(
                    trio.BrokenResourceError, trio.ClosedResourceError, OSError
                ):
                    await relay_connection(stream, to_port)

            nursery.start_soon(trio.serve_listeners, handle, listeners)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--to", type=int, required=True, help="the bookie's port")
    args = parser.parse_args(argv)
    trio.run(_serve, args.to)
    return 0


if __name__ == "__main__":
    sys.exit(main())
