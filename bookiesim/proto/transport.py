"""The one framed writer over a trio stream, for the bookie's connections and the client's.

Both ends queue many small frames (responses to pipelined adds; adds to Qw bookies) from
code that must not wait, and a single task writes whatever accumulated in one
``send_all``: one syscall per burst instead of one per frame, which is most of what a small
add costs. :class:`FramedWriter` is that buffer, its wake-up event and the writing task's
loop; the codecs (:mod:`.frames`, :mod:`.v3`, :mod:`.v2`) stay sans-IO, and this is the one
module of ``proto`` that knows trio.
"""

from __future__ import annotations

from typing import Protocol

import trio

from bookiesim.proto.frames import Buffer, encode_frame

__all__ = ["FramedWriter", "Serializable"]


class Serializable(Protocol):
    """A protobuf message, as far as the writer cares."""

    def SerializeToString(self) -> bytes: ...


class FramedWriter:
    """Frames queued without waiting, written by :meth:`run` one burst at a time.

    :meth:`close` lets what is queued go out, then :meth:`run` returns (a bookie's answers
    already computed still reach a client that is leaving); :meth:`abort` stops at once and
    drops the rest (a client whose connection is gone). After either, queued frames are
    ignored.
    """

    __slots__ = ("_aborted", "_buffer", "_closed", "_lock", "_wake")

    def __init__(self, lock: trio.Lock | None = None) -> None:
        """``lock``, if given, is held around each write, for callers that also write to
        the stream themselves (the client's ``call`` and ``send_raw``)."""
        self._buffer = bytearray()
        self._wake = trio.Event()
        self._closed = False
        self._aborted = False
        self._lock = lock

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, item: bytes | Serializable) -> None:
        """Queue ``item``: ``bytes`` are an already framed message, anything else a message
        to serialize and frame."""
        if self._closed:
            return
        if isinstance(item, bytes):
            self._buffer += item
        else:
            self._buffer += encode_frame(item.SerializeToString())
        self._wake.set()

    def send_message(self, message: Buffer) -> None:
        """Queue a serialized message, framing it."""
        if self._closed:
            return
        self._buffer += encode_frame(message)
        self._wake.set()

    def close(self) -> None:
        """Write what is queued, then stop."""
        self._closed = True
        self._wake.set()

    def abort(self) -> None:
        """Stop now; what is queued is dropped."""
        self._closed = True
        self._aborted = True
        self._wake.set()

    async def run(self, stream: trio.abc.Stream) -> None:
        """Write bursts until closed and drained, or aborted. A broken stream raises
        (``trio.BrokenResourceError``, ``trio.ClosedResourceError``); the caller decides what
        that means for its connection."""
        lock = self._lock
        while True:
            if not self._closed:
                await self._wake.wait()
                self._wake = trio.Event()
            if self._aborted:
                return
            if not self._buffer:
                if self._closed:
                    return
                continue
            data = bytes(self._buffer)
            self._buffer.clear()
            if lock is None:
                await stream.send_all(data)
            else:
                async with lock:
                    await stream.send_all(data)
