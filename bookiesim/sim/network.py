"""The simulated network: in-memory connections whose every frame the simulator decides on.

A client's :class:`~bookiesim.client.BookKeeper` gets :meth:`SimNetwork.connector` as its
``bookie_connector``; each connect makes a :class:`SimConnection` of two pipes and hands the
bookie's end to the bookie's own per-connection handler
(:meth:`~bookiesim.bookie.server.BookieServer.handle_connection`), so both sides run their
real code. The pipes carry v3 frames; each frame sent is decoded (sans-IO) and then

* shown to the observers (the history records acks, fences, WriteCloses),
* matched against scenario rules (drop it, or hold the pipe from it on until released),
* held while a partition separates the two ends (TCP would keep retransmitting; the frames
  arrive after the heal, in order), or dropped with the current loss probability (the TLA+
  model's lost message: the sender sees a timeout; TCP would rather stall or reset),
* WriteClose only: lost or duplicated with their own probabilities,
* delivered after a latency — with a chance of a long spike — but never before a frame sent
  earlier on the same pipe: order is kept per connection, and only frames on different
  connections overtake each other.

A crashed bookie's connections are reset (both ends see ``BrokenResourceError``); a connect
to a bookie that is down is refused, one across a partition hangs until the heal or the
client's connect timeout.
"""

from __future__ import annotations

import errno
import hashlib
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.frames import (
    NEED_DATA,
    FrameDecoder,
    encode_frame,
)
from bookiesim.proto.v3 import parse_request, parse_response

if TYPE_CHECKING:
    import random

__all__ = ["Frame", "NetworkFaults", "SimConnection", "SimNetwork", "Verdict"]

Verdict = str
"""What a rule says about a frame: ``"drop"``, ``"hold"`` or ``"deliver"``."""


@dataclass(frozen=True)
class Frame:
    """One frame on the wire, decoded."""

    client: str
    bookie: str
    to_bookie: bool
    message: pb.Request | pb.Response
    connection: int
    answers_fence: int | None = None
    """For a response: the ledger, if it answers a fencing read."""

    @property
    def operation(self) -> str:
        return pb.OperationType.Name(self.message.header.operation)

    @property
    def read_entry_id(self) -> int | None:
        """The entry a read request asks for (-1: a LAC or fencing read), else None."""
        message = self.message
        if isinstance(message, pb.Request) and message.HasField("readRequest"):
            return message.readRequest.entryId
        return None


Rule = Callable[[Frame], Verdict | None]
Observer = Callable[[Frame], None]


@dataclass
class NetworkFaults:
    """The network's current fault settings (the plan changes them over time)."""

    loss: float = 0.0
    spike: float = 0.0
    spike_max: float = 3.0
    write_close_loss: float = 0.0
    write_close_dup: float = 0.0
    latency: tuple[float, float] = (0.0002, 0.002)
    cut: set[tuple[str, str]] = field(default_factory=set)
    """(client, bookie) pairs a partition separates."""
    link_delay: dict[tuple[str, str], float] = field(default_factory=dict)
    """(client, bookie) → extra latency of the requests on that link (a congested uplink;
    the answers come back at the usual speed)."""
    link_loss: dict[tuple[str, str], float] = field(default_factory=dict)
    """(client, bookie) → loss probability of that link (a flaky path)."""


class _Pipe:
    """One direction of a connection: frames in flight, each with its arrival time."""

    def __init__(self) -> None:
        self.queue: deque[tuple[float, bytes]] = deque()
        self.last_at = 0.0
        self.held: list[bytes] | None = None
        self.rule_held = False
        """Held by a scenario rule (only :meth:`SimNetwork.release` lets it go)."""
        self.wake = trio.Event()
        self.eof = False
        self.broken = False

    def deliver(self, data: bytes, delay: float) -> None:
        at = max(self.last_at, trio.current_time() + delay)
        self.last_at = at
        self.queue.append((at, data))
        self.wake.set()

    def break_(self) -> None:
        self.broken = True
        self.queue.clear()
        self.held = None
        self.wake.set()

    async def receive(self, max_bytes: int | None) -> bytes:
        while True:
            if self.broken:
                raise trio.BrokenResourceError("connection reset (simulated)")
            now = trio.current_time()
            if self.queue and self.queue[0][0] <= now:
                chunks = bytearray()
                while self.queue and self.queue[0][0] <= now:
                    chunks += self.queue.popleft()[1]
                if max_bytes is not None and len(chunks) > max_bytes:
                    self.queue.appendleft((now, bytes(chunks[max_bytes:])))
                    del chunks[max_bytes:]
                return bytes(chunks)
            if not self.queue and self.eof:
                return b""
            self.wake = wake = trio.Event()
            if self.queue:
                with trio.move_on_at(self.queue[0][0]):
                    await wake.wait()
            else:
                await wake.wait()


class _End(trio.abc.Stream):
    """One end of a :class:`SimConnection`."""

    def __init__(self, conn: SimConnection, to_bookie: bool) -> None:
        self.conn = conn
        self.to_bookie = to_bookie
        self.out = conn.up if to_bookie else conn.down
        self.inp = conn.down if to_bookie else conn.up
        self.decoder = FrameDecoder()
        self.closed = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.closed:
            raise trio.ClosedResourceError("stream closed")
        if self.out.broken or self.out.eof:
            raise trio.BrokenResourceError("connection reset (simulated)")
        self.decoder.receive_data(bytes(data))
        while (frame := self.decoder.next_frame()) is not NEED_DATA:
            self.conn.net.route(self.conn, self.out, self.to_bookie, bytes(frame))
        await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self.closed:
            raise trio.ClosedResourceError("stream closed")
        return await self.inp.receive(max_bytes)

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            self.out.eof = True
            self.out.wake.set()
            # The peer's later sends would meet a reset, as after a TCP close.
            self.inp.break_()
        await trio.lowlevel.checkpoint()


class SimConnection:
    """A client's connection to a bookie: two pipes and two ends."""

    def __init__(self, net: SimNetwork, number: int, client: str, bookie: str) -> None:
        self.net = net
        self.number = number
        self.client = client
        self.bookie = bookie
        self.up = _Pipe()
        self.down = _Pipe()
        self.client_end = _End(self, to_bookie=True)
        self.bookie_end = _End(self, to_bookie=False)
        self.fence_txns: dict[int, int] = {}
        """txnId → ledger of fencing reads in flight (to see which fences were answered)."""

    def reset(self) -> None:
        self.up.break_()
        self.down.break_()

    @property
    def alive(self) -> bool:
        return not (self.up.broken or self.down.broken or self.up.eof)


BookieAcceptor = Callable[[SimConnection], None]
"""Hands a new connection's bookie end to the bookie (None when it is down)."""


class SimNetwork:
    """Connections between named clients and bookies, under :class:`NetworkFaults`."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.faults = NetworkFaults()
        self.rules: list[Rule] = []
        self.observers: list[Observer] = []
        self.acceptors: dict[str, BookieAcceptor | None] = {}
        self.connections: list[SimConnection] = []
        self.frames = 0
        self.dropped = 0
        self.duplicated = 0
        self._healed = trio.Event()
        self._digest = hashlib.sha256()

    @property
    def digest(self) -> str:
        """A hash of every frame's fate so far: two runs agree on it only if every frame
        went the same way at the same virtual time."""
        return self._digest.hexdigest()[:16]

    # -- connecting ---------------------------------------------------------------------------

    def connector(self, client: str) -> Callable[[str], Awaitable[trio.abc.Stream]]:
        """A ``bookie_connector`` for the client named ``client``."""

        async def connect(bookie_id: str) -> trio.abc.Stream:
            await trio.sleep(self._latency())
            while (client, bookie_id) in self.faults.cut:
                await self._healed.wait()
            accept = self.acceptors.get(bookie_id)
            if accept is None:
                raise OSError(errno.ECONNREFUSED, f"{bookie_id} refused the connection")
            conn = SimConnection(self, len(self.connections), client, bookie_id)
            self.connections.append(conn)
            accept(conn)
            return conn.client_end

        return connect

    def reset_bookie(self, bookie: str) -> int:
        """Reset every connection of ``bookie`` (it crashed); returns how many."""
        n = 0
        for conn in self.connections:
            if conn.bookie == bookie and conn.alive:
                conn.reset()
                n += 1
        self.connections = [c for c in self.connections if c.alive]
        return n

    # -- partitions -------------------------------------------------------------------------

    def partition(self, clients: list[str], bookies: list[str]) -> None:
        self.faults.cut |= {(c, b) for c in clients for b in bookies}

    def heal(self) -> None:
        """End every partition; frames held by them go out now, in order."""
        self.faults.cut.clear()
        for conn in self.connections:
            for pipe in (conn.up, conn.down):
                if pipe.held is not None and not pipe.rule_held:
                    self._flush(pipe)
        self._healed.set()
        self._healed = trio.Event()

    def release(self, match: Callable[[SimConnection, bool], bool] | None = None) -> int:
        """Send the frames scenario rules held on the pipes ``match`` accepts (given the
        connection and whether the pipe goes to the bookie); returns how many."""
        sent = 0
        for conn in self.connections:
            for to_bookie, pipe in ((True, conn.up), (False, conn.down)):
                if pipe.held is not None and (match is None or match(conn, to_bookie)):
                    sent += len(pipe.held)
                    pipe.rule_held = False
                    self._flush(pipe)
        return sent

    def _flush(self, pipe: _Pipe) -> None:
        held, pipe.held = pipe.held or [], None
        for data in held:
            pipe.deliver(data, self._latency())

    # -- frames -------------------------------------------------------------------------------

    def _latency(self) -> float:
        low, high = self.faults.latency
        return self.rng.uniform(low, high)

    def route(self, conn: SimConnection, pipe: _Pipe, to_bookie: bool, frame: bytes) -> None:
        """Decide the fate of one frame sent on ``pipe``."""
        message: pb.Request | pb.Response = (
            parse_request(frame) if to_bookie else parse_response(frame)
        )
        fence_of = None if to_bookie else conn.fence_txns.pop(message.header.txnId, None)
        seen = Frame(conn.client, conn.bookie, to_bookie, message, conn.number, fence_of)
        self.frames += 1
        if to_bookie:
            _note_fence(conn, message)
        for observer in self.observers:
            observer(seen)
        verdict = self._verdict(seen)
        data = encode_frame(frame)
        if verdict == "hold" or pipe.held is not None:
            if pipe.held is None:
                pipe.held = []
            if verdict == "hold":
                pipe.rule_held = True
            pipe.held.append(data)
        elif verdict == "drop":
            self.dropped += 1
        elif (conn.client, conn.bookie) in self.faults.cut:
            pipe.held = [data]
        else:
            extra = (
                self.faults.link_delay.get((conn.client, conn.bookie), 0.0) if to_bookie else 0.0
            )
            pipe.deliver(data, self._delay() + extra)
            if verdict == "dup":
                self.duplicated += 1
                pipe.deliver(data, self._delay() + extra)
        self._digest.update(
            f"{trio.current_time():.6f}|{conn.number}|{int(to_bookie)}|"
            f"{seen.operation}|{message.header.txnId}|{verdict}\n".encode()
        )

    def _verdict(self, frame: Frame) -> Verdict:
        for rule in self.rules:
            answer = rule(frame)
            if answer is not None:
                return answer
        faults = self.faults
        rng = self.rng
        if faults.loss and rng.random() < faults.loss:
            return "drop"
        link_loss = faults.link_loss.get((frame.client, frame.bookie), 0.0)
        if link_loss and rng.random() < link_loss:
            return "drop"
        if frame.to_bookie and frame.message.header.operation == pb.WRITE_CLOSE:
            if faults.write_close_loss and rng.random() < faults.write_close_loss:
                return "drop"
            if faults.write_close_dup and rng.random() < faults.write_close_dup:
                return "dup"
        return "deliver"

    def _delay(self) -> float:
        faults = self.faults
        delay = self._latency()
        if faults.spike and self.rng.random() < faults.spike:
            delay += self.rng.uniform(0.05, faults.spike_max)
        return delay


def _note_fence(conn: SimConnection, message: pb.Request | pb.Response) -> None:
    if isinstance(message, pb.Request) and message.HasField("readRequest"):
        read = message.readRequest
        if read.HasField("flag") and read.flag == pb.ReadRequest.FENCE_LEDGER:
            conn.fence_txns[message.header.txnId] = read.ledgerId
