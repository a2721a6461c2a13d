"""A pipelining v3 load client, run as its own process by ``bookiesim bench bookie``.

It keeps up to ``window`` adds outstanding, writes frames in bursts (one ``send_all`` per
burst), and records each add's latency from send to response. Entries are packaged once per
(ledger, entry) with the real CRC32C digest, so the bookie sees exactly what a BookKeeper
client sends. With ``--rate`` it paces sends to a fixed add rate (for latency at a given
load) instead of saturating. With ``--channels N`` it opens N connections and sends each
ledger's adds over the one its id picks (id modulo N), as upstream's client spreads ledgers
over ``numChannelsPerBookie`` channels.

Prints one JSON object: adds, seconds, adds_per_second, mb_per_second, latency percentiles
(ms) and errors.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass

import trio

from bookiesim.client.digest import DigestManager, master_key
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.frames import FrameDecoder, encode_frame

BURST = 64
PACED_BURST = 32
STALL_SECONDS = 60.0
"""With adds outstanding and no answer for this long, the bookie has stopped answering (an
upstream bookie out of file descriptors flushes, fails and retries forever): the run fails
instead of waiting for ever."""


class BookieStalledError(Exception):
    """No answer from the bookie for :data:`STALL_SECONDS` with adds outstanding."""


@dataclass
class LoadResult:
    adds: int
    errors: int
    seconds: float
    entry_size: int
    latencies: list[float]

    def summary(self) -> dict[str, float | int]:
        lat = sorted(self.latencies)

        def pct(p: float) -> float:
            if not lat:
                return math.nan
            return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000

        rate = self.adds / self.seconds if self.seconds else math.nan
        return {
            "adds": self.adds,
            "errors": self.errors,
            "seconds": round(self.seconds, 3),
            "adds_per_second": round(rate, 1),
            "mb_per_second": round(rate * self.entry_size / 1e6, 2),
            "p50_ms": round(pct(0.50), 3),
            "p99_ms": round(pct(0.99), 3),
            "p999_ms": round(pct(0.999), 3),
        }


def build_frames(ledgers: int, first_ledger: int, count: int, size: int) -> list[bytes]:
    """Pre-packaged add frames, round-robin over ledgers (txnId = position in the list)."""
    key = master_key(b"")
    payload = bytes(size)
    digests = [DigestManager(first_ledger + i, b"") for i in range(ledgers)]
    frames = []
    for n in range(count):
        ledger_index = n % ledgers
        entry_id = n // ledgers
        body = digests[ledger_index].package(entry_id, entry_id - 1, (entry_id + 1) * size, payload)
        request = pb.Request(
            header=pb.BKPacketHeader(version=pb.VERSION_THREE, operation=pb.ADD_ENTRY, txnId=n),
            addRequest=pb.AddRequest(
                ledgerId=first_ledger + ledger_index, entryId=entry_id, masterKey=key, body=body
            ),
        )
        frames.append(encode_frame(request.SerializeToString()))
    return frames


def channel_of(ledger_id: int, channels: int) -> int:
    """The connection a ledger's adds go over: its id modulo the connections, as upstream's
    client picks one of ``numChannelsPerBookie`` channels by ledger id."""
    return ledger_id % channels


async def run_load(
    host: str, port: int, frames: list[bytes], window: int, rate: float | None, size: int,
    connections: int = 1, route: list[int] | None = None,
) -> LoadResult:  # fmt: skip
    """Send ``frames`` with at most ``window`` adds outstanding in all, over ``connections``
    connections: frame ``n`` over ``route[n]`` (all over the first when None)."""
    streams = [await trio.open_tcp_stream(host, port) for _ in range(connections)]
    route = route or [0] * len(frames)
    sent_at = [0.0] * len(frames)
    latencies: list[float] = []
    errors = 0
    received = 0
    # The window is a counter plus an event the receiver sets when room frees up: an await
    # per entry (a semaphore) would cost the client more CPU than the bookie spends per add.
    room = trio.Event()
    start = time.perf_counter()

    async def sender() -> None:
        nonlocal room
        n = 0
        total = len(frames)
        # Paced runs measure latency: small bursts keep each add's send time honest.
        burst_size = BURST if rate is None else PACED_BURST
        while n < total:
            burst = min(burst_size, total - n)
            if rate is not None:
                delay = start + n / rate - time.perf_counter()
                if delay > 0:
                    await trio.sleep(delay)
            while n + burst - received > window:
                await room.wait()
                room = trio.Event()
            now = time.perf_counter()
            for i in range(n, n + burst):
                sent_at[i] = now
            if connections == 1:
                await streams[0].send_all(b"".join(frames[n : n + burst]))
            else:  # each connection its share of the burst, in one send
                parts: list[list[bytes]] = [[] for _ in streams]
                for i in range(n, n + burst):
                    parts[route[i]].append(frames[i])
                for stream, part in zip(streams, parts, strict=True):
                    if part:
                        await stream.send_all(b"".join(part))
            n += burst

    async def receiver(stream: trio.SocketStream, expected: int) -> None:
        nonlocal received, errors
        decoder = FrameDecoder()
        parse = pb.Response.FromString
        answered = 0
        while answered < expected:
            with trio.move_on_after(STALL_SECONDS) as waiting:
                data = await stream.receive_some(1 << 18)
            if waiting.cancelled_caught:
                raise BookieStalledError(
                    f"no answer from the bookie for {STALL_SECONDS:.0f} s, "
                    f"{received:,} of {len(frames):,} adds answered"
                )
            if not data:
                raise ConnectionError("bookie closed the connection")
            decoder.receive_data(data)
            now = time.perf_counter()
            for frame in decoder.next_frames():
                response = parse(frame)
                if response.status != pb.EOK:
                    errors += 1
                latencies.append(now - sent_at[response.header.txnId])
                received += 1
                answered += 1
            room.set()

    expected = [0] * connections
    for connection in route:
        expected[connection] += 1
    async with trio.open_nursery() as nursery:
        for stream, count in zip(streams, expected, strict=True):
            nursery.start_soon(receiver, stream, count)
        nursery.start_soon(sender)
    seconds = time.perf_counter() - start
    for stream in streams:
        await stream.aclose()
    return LoadResult(received - errors, errors, seconds, size, latencies)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ledgers", type=int, default=10)
    parser.add_argument("--first-ledger", type=int, default=1)
    parser.add_argument("--adds", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--window", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=None, help="adds per second (paced)")
    parser.add_argument(
        "--channels",
        type=int,
        default=1,
        help="connections to the bookie; a ledger's adds go over the one its id picks",
    )
    args = parser.parse_args(argv)
    frames = build_frames(args.ledgers, args.first_ledger, args.adds, args.size)
    # Frame n is ledger first_ledger + n % ledgers (build_frames' round robin).
    route = [
        channel_of(args.first_ledger + n % args.ledgers, args.channels) for n in range(args.adds)
    ]
    stalled: BaseException | None = None
    try:
        result = trio.run(
            run_load,
            args.host,
            args.port,
            frames,
            args.window,
            args.rate,
            args.size,
            args.channels,
            route,
        )
    except* (BookieStalledError, ConnectionError) as group:
        stalled = group.exceptions[0]
    if stalled is not None:
        # One line on stderr: bench compare reports a failed run by its last line.
        print(f"load client: {stalled}", file=sys.stderr)
        return 2
    json.dump(result.summary(), sys.stdout)
    print()
    return 0 if result.errors == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
