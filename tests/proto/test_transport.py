"""The framed writer (:mod:`bookiesim.proto.transport`): bursts, close, abort, a broken peer."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.frames import NEED_DATA, FrameDecoder, encode_frame
from bookiesim.proto.transport import FramedWriter


async def _received(stream: trio.abc.ReceiveStream) -> list[bytes]:
    decoder = FrameDecoder()
    while data := await stream.receive_some():
        decoder.receive_data(data)
    frames = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        frames.append(frame)
    return frames


@pytest.mark.parametrize("with_lock", [False, True])
async def test_a_burst_goes_out_in_one_send_and_close_drains(with_lock: bool) -> None:
    send, receive = trio.testing.memory_stream_pair()
    sends = 0
    original = send.send_stream.send_all_hook

    async def count() -> None:
        nonlocal sends
        sends += 1
        if original is not None:
            await original()

    send.send_stream.send_all_hook = count
    writer = FramedWriter(trio.Lock() if with_lock else None)
    header = pb.BKPacketHeader(version=pb.VERSION_THREE, operation=pb.ADD_ENTRY, txnId=1)
    message = pb.Response(header=header, status=pb.EOK)
    writer.send(encode_frame(b"one"))
    writer.send_message(b"two")
    writer.send(message)
    writer.close()
    assert writer.closed
    writer.send(encode_frame(b"late"))  # ignored once closed
    writer.send_message(b"late")
    await writer.run(send)
    await send.aclose()
    assert await _received(receive) == [b"one", b"two", message.SerializeToString()]
    assert sends == 1


async def test_abort_drops_what_is_queued() -> None:
    send, receive = trio.testing.memory_stream_pair()
    writer = FramedWriter()
    writer.send_message(b"dropped")
    writer.abort()
    await writer.run(send)
    await send.aclose()
    assert await _received(receive) == []


async def test_the_writer_waits_for_frames_and_a_broken_stream_raises() -> None:
    send, receive = trio.testing.memory_stream_pair()
    writer = FramedWriter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.run, send)
        await trio.testing.wait_all_tasks_blocked()
        writer.close()  # nothing queued: run returns
    await receive.aclose()
    writer = FramedWriter()
    writer.send_message(b"x")
    with pytest.raises(trio.BrokenResourceError):
        await writer.run(send)
