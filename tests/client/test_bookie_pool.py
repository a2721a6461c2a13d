"""The per-bookie connection pool: fast failure, timeouts, reconnection.

Why: a write path that hangs on a dead bookie never changes ensemble, and one that never
reconnects loses a bookie for good after a restart. These are the pool's promises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from bookiesim.client import BKError, BookieUnavailableError, BookKeeper, ClientConfig
from bookiesim.client.bookie_connection import BookieConnection
from bookiesim.client.bookie_pool import BookiePool
from bookiesim.client.wire import to_v2
from bookiesim.cluster.in_process import FaultyConnector, LocalCluster, stable_port
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import v2
from bookiesim.proto.frames import FrameDecoder, encode_frame
from bookiesim.proto.v3 import add_request, from_message, read_request

if TYPE_CHECKING:
    from collections.abc import Callable


async def test_unreachable_bookie_fails_fast() -> None:
    async with trio.open_nursery() as nursery:
        pool = BookiePool(nursery, request_timeout=5, connect_timeout=5)
        with trio.fail_after(2):
            with pytest.raises(BookieUnavailableError, match="cannot connect"):
                await pool.call(f"127.0.0.1:{stable_port()}", read_request(1, 0))
            with pytest.raises(BookieUnavailableError, match="not host:port"):
                await pool.call("no-port", read_request(1, 0))
        nursery.cancel_scope.cancel()


async def test_unanswered_request_times_out(cluster: LocalCluster) -> None:
    connector = FaultyConnector()
    connector.add_rule(lambda b, r: "drop" if r.HasField("readRequest") else None)
    async with BookKeeper(
        cluster.store, bookie_connector=connector, config=ClientConfig(request_timeout=0.2)
    ) as bk:
        bookie = cluster.running_ids()[0]
        started = trio.current_time()
        with pytest.raises(BookieUnavailableError, match=f"bookie {bookie}: no answer in 0.2 s"):
            await bk.pool.call(bookie, read_request(1, 0))
        assert 0.2 <= trio.current_time() - started < 1.0
        # The connection stays up for the next request.
        connector.clear_rules()
        response = await bk.pool.call(bookie, read_request(1, 0))
        assert response.status == pb.ENOLEDGER
        assert bk.pool.connects(bookie) == 1


async def test_request_after_an_idle_spell_still_times_out(cluster: LocalCluster) -> None:
    # The expiry loop sleeps while nothing is in flight; a request sent then wakes it, and
    # times out within the same bounds as on a busy connection.
    connector = FaultyConnector()
    async with BookKeeper(
        cluster.store, bookie_connector=connector, config=ClientConfig(request_timeout=0.2)
    ) as bk:
        bookie = cluster.running_ids()[0]
        assert (await bk.pool.call(bookie, read_request(1, 0))).status == pb.ENOLEDGER
        await trio.sleep(1.0)  # idle: the loop parks
        connector.add_rule(lambda b, r: "drop" if r.HasField("readRequest") else None)
        for _ in range(2):
            started = trio.current_time()
            with (
                trio.fail_after(5),
                pytest.raises(BookieUnavailableError, match=r"no answer in 0\.2 s"),
            ):
                await bk.pool.call(bookie, read_request(1, 0))
            assert 0.2 <= trio.current_time() - started < 1.0
        assert bk.pool.connects(bookie) == 1


async def test_parking_does_not_move_when_a_request_expires(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The expiry loop sleeps while nothing is in flight, but its ticks stay on the grid
    from the connection's start: a request sent mid-tick after an idle spell expires at the
    first tick more than a timeout after it, as with a loop that never slept (the fault
    simulation's schedules, and the runs its bug switches break, depend on these times)."""

    async def silent_bookie(bookie_id: str) -> trio.abc.Stream:
        ours, _theirs = trio.testing.memory_stream_pair()
        return ours

    async with trio.open_nursery() as nursery:
        pool = BookiePool(nursery, silent_bookie, request_timeout=2.0)  # 4 ticks of 0.5 s
        started = trio.current_time()
        with pytest.raises(BookieUnavailableError, match="no answer in 2 s"):
            await pool.call("b1:3181", read_request(1, 0))
        assert trio.current_time() - started == pytest.approx(2.5)  # sent at tick 0, out at 5
        await trio.sleep(7.8)  # idle: nothing in flight, the loop parks; now at 10.3 s
        sent = trio.current_time()
        with pytest.raises(BookieUnavailableError, match="no answer in 2 s"):
            await pool.call("b1:3181", read_request(1, 1))
        # Sent during tick 20 (10.0-10.5 s), out at tick 25: 12.5 s, not 0.5 s after a
        # wake-up at 10.3 s plus 2.0.
        assert trio.current_time() - sent == pytest.approx(2.2)
        assert pool.connects("b1:3181") == 1
        nursery.cancel_scope.cancel()


async def test_in_flight_requests_fail_when_the_bookie_goes(
    cluster: LocalCluster, bk: BookKeeper
) -> None:
    lh = await bk.create_ledger(4, 4, 4)  # on every bookie of the cluster
    await lh.add_entry(b"x")
    bookie = lh.ensemble[0]
    # A long poll keeps a request in flight on the bookie.
    poll = pb.Request(
        readRequest=pb.ReadRequest(
            ledgerId=lh.ledger_id, entryId=-1, previousLAC=100, timeOut=30_000
        )
    )
    errors: list[BookieUnavailableError] = []

    async def wait() -> None:
        try:
            await bk.pool.call(bookie, from_message(poll))
        except BookieUnavailableError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(0.1)
        await cluster.stop_bookie(bookie)
    assert len(errors) == 1
    assert str(errors[0]) == f"bookie {bookie}: connection lost"
    await cluster.start_bookie(bookie)
    response = await bk.pool.call(bookie, read_request(lh.ledger_id, 0))
    assert response.status == pb.EOK
    assert bk.pool.connects(bookie) == 2


# -- v2 connections: answers matched by (operation, ledger, entry) -----------------------------


async def test_v2_answers_go_to_the_oldest_request_with_their_key() -> None:
    """As upstream's PerChannelBookieClient: v2 has no txnId, so two reads of the same
    entry are answered in the order they were sent, a timed-out (forgotten) request is
    skipped, and a bookie answering garbage ends the connection (waiters get None)."""
    client_end, bookie_end = trio.testing.memory_stream_pair()
    conn = BookieConnection(client_end, v2=True)
    got: list[tuple[str, pb.Response | None]] = []

    def track(name: str) -> Callable[[pb.Response | None], None]:
        return lambda response: got.append((name, response))

    key = b"k" * 20
    requests = {
        "forgotten": read_request(5, -1),
        "first": read_request(5, -1, fence_key=key),
        "second": read_request(5, -1),
        "add": add_request(5, 0, key, bytes(40)),
        "orphan": read_request(5, 7),
    }
    ids = {}
    for name, request in requests.items():
        packet, v2_key = to_v2(request)
        ids[name] = conn.next_txn_id()
        conn.submit(packet, ids[name], track(name), v2_key)
    assert conn.forget(ids["forgotten"]) is not None

    async def bookie() -> None:
        frames = FrameDecoder()
        seen = 0
        while seen < 5:
            frames.receive_data(await bookie_end.receive_some())
            seen += len(frames.next_frames())
        answers: list[v2.V2Response] = [
            v2.AddResponse(v2.ErrorCode.EOK, 5, 0),
            v2.ReadResponse(v2.ErrorCode.EOK, 5, -1, b"entry"),
            v2.ReadResponse(v2.ErrorCode.ENOENTRY, 5, -1),
        ]
        for answer in answers:
            await bookie_end.send_all(encode_frame(v2.encode_response(answer)))
        await bookie_end.send_all(encode_frame(b"\x02\x01\x00"))  # a torn v2 answer

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.writer_loop)
            nursery.start_soon(bookie)
            await conn.reader_loop()
    names = [name for name, _ in got]
    assert names == ["add", "first", "second", "orphan"]
    answers = dict(got)
    assert answers["add"] is not None
    assert answers["add"].header.txnId == ids["add"]
    assert answers["first"] is not None
    assert (answers["first"].status, answers["first"].readResponse.body) == (pb.EOK, b"entry")
    assert answers["second"] is not None
    assert answers["second"].status == pb.ENOENTRY
    assert answers["orphan"] is None  # the connection ended first
    assert conn.closed


async def test_a_v2_pool_refuses_what_v2_cannot_carry(cluster: LocalCluster) -> None:
    config = ClientConfig(request_timeout=3, use_v2_wire_protocol=True)
    async with BookKeeper(cluster.store, config=config) as bk:
        bookie = cluster.running_ids()[0]
        wl = from_message(pb.Request(writeLacRequest=pb.WriteLacRequest(ledgerId=1, lac=0)))
        with pytest.raises(BKError, match=f"bookie {bookie}: not sent over the v2 protocol"):
            await bk.pool.call(bookie, wl)
        lh = await bk.create_ledger(3, 2, 2)
        await lh.add_entry(b"x")
        assert await lh.write_lac() == 0  # WriteLac is skipped, not failed
        assert (await bk.pool.call(bookie, read_request(99, 0))).status == pb.ENOLEDGER
