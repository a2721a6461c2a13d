"""PIP-345 on real bookies: bounds recorded at close, seek and reset by timestamp and index,
cursors (acks, ranges, persistence), and the message-TTL monitor.

Why: these are what a subscription sees — a seek that lands one entry off redelivers or
skips a message; an expiry that reads the wrong close time drops unexpired messages.
Scenarios follow SubscriptionSeekTest and PersistentMessageFinderTest (reference §6.4, §6.7).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import trio

from bookiesim.mledger.config import ManagedLedgerConfig
from bookiesim.mledger.cursor import acked_ranges
from bookiesim.mledger.expiry import MessageExpiryMonitor
from bookiesim.mledger.managed_ledger import ManagedLedger, open_managed_ledger
from bookiesim.mledger.position import Position
from bookiesim.mledger.publishing import Message
from bookiesim.mledger.seek import SeekStrategy
from bookiesim.proto.pulsar_entry import decode_pulsar_entry

if TYPE_CHECKING:
    from collections.abc import Callable

    from bookiesim.client import BookKeeper

    from .conftest import FakeClock

TEN_PER_LEDGER = ManagedLedgerConfig(max_entries_per_ledger=10, minimum_rollover_time_ms=0)


async def _publish_spaced(
    ml: ManagedLedger, clock: FakeClock, count: int, step: int = 10
) -> list[Position]:
    positions = []
    for i in range(count):
        clock.advance(step)
        positions += await ml.publish([Message(b"m%d" % i)])
    return positions


async def test_bounds_are_recorded_when_a_ledger_closes(bk: BookKeeper, clock: FakeClock) -> None:
    async with open_managed_ledger(bk, "t", TEN_PER_LEDGER, clock=clock) as ml:
        start = clock.now
        await _publish_spaced(ml, clock, 12)
        first = ml.ledger_list().ledgers[0].ledger_id
        assert ml.ledger_info(first).properties  # set at close
        props = {kv.key: kv.value for kv in ml.ledger_info(first).properties}
        assert props == {
            "beginPublishTimestamp": str(start + 10),
            "endPublishTimestamp": str(start + 100),
            "beginIndex": "0",
            "endIndex": "9",
        }
        open_ledger = ml.ledger_list().ledgers[-1]
        assert open_ledger.properties["beginIndex"] == "10"  # known in memory while open


async def test_seek_by_timestamp_lands_on_each_message(bk: BookKeeper, clock: FakeClock) -> None:
    """testSeekByTimestamp: 25 messages 10 ms apart, 10 per ledger; seeking to each
    message's time makes it the next one read."""
    async with open_managed_ledger(bk, "t", TEN_PER_LEDGER, clock=clock) as ml:
        positions = await _publish_spaced(ml, clock, 25)
        cursor = await ml.open_cursor("sub")
        order = list(range(25))
        random.Random(3).shuffle(order)
        for i in order:
            timestamp = decode_pulsar_entry(await ml.read_entry(positions[i])).broker_timestamp
            assert timestamp is not None
            outcome = await cursor.seek_by_timestamp(timestamp)
            assert outcome.strategy is SeekStrategy.PROPERTIES
            assert cursor.read_position == positions[i]
            (read,) = await cursor.read_entries(1)
            assert read[0] == positions[i]
        for strategy in (SeekStrategy.CLOSE_TIME, SeekStrategy.FULL):
            outcome = await ml.seek_by_timestamp(clock.now - 45, strategy)
            assert outcome.reset_to == positions[20]


async def test_seek_by_index(bk: BookKeeper, clock: FakeClock) -> None:
    async with open_managed_ledger(bk, "t", TEN_PER_LEDGER, clock=clock) as ml:
        batches = [Message(b"b%d" % i, num_messages=1 + i % 3) for i in range(30)]
        positions = await ml.publish(batches)
        cursor = await ml.open_cursor("sub", earliest=True)
        index = -1
        for position, message in zip(positions, batches, strict=True):
            first, index = index + 1, index + message.num_messages
            for wanted in range(first, index + 1):  # every message of the batch
                await cursor.seek_by_index(wanted)
                assert cursor.read_position == position
        outcome = await cursor.seek_by_index(index + 1)  # past the end: the next entry
        assert outcome.found == positions[-1]
        assert cursor.backlog() == 0


async def test_seek_survives_reopen_and_uses_properties(bk: BookKeeper, clock: FakeClock) -> None:
    async with open_managed_ledger(bk, "t", TEN_PER_LEDGER, clock=clock) as ml:
        positions = await _publish_spaced(ml, clock, 15)
    async with open_managed_ledger(bk, "t", TEN_PER_LEDGER, clock=clock) as ml:
        target = decode_pulsar_entry(await ml.read_entry(positions[12])).broker_timestamp
        assert target is not None
        outcome = await ml.seek_by_timestamp(target)
        assert outcome.strategy is SeekStrategy.PROPERTIES
        assert outcome.reset_to == positions[12]
        assert outcome.entries_read <= 4 + 2  # ⌈log2 10⌉ + 2


async def test_find_newest_matching(bk: BookKeeper) -> None:
    async with open_managed_ledger(bk, "t", TEN_PER_LEDGER) as ml:
        positions = await ml.add_entries([b"%d" % i for i in range(25)])

        def upto(n: int) -> Callable[[bytes], bool]:
            return lambda payload: int(payload) <= n

        assert await ml.find_newest_matching(upto(13)) == positions[13]
        assert await ml.find_newest_matching(upto(13), positions[2], positions[9]) == positions[9]
        assert await ml.find_newest_matching(upto(-1)) is None


async def test_cursor_acks_ranges_and_persistence(bk: BookKeeper) -> None:
    async with open_managed_ledger(bk, "t", TEN_PER_LEDGER) as ml:
        positions = await ml.add_entries([b"%d" % i for i in range(25)])
        cursor = await ml.open_cursor("sub", earliest=True)
        await cursor.delete([positions[i] for i in (3, 4, 5, 8, 12)])
        assert cursor.backlog() == 20
        assert acked_ranges(cursor.individually_deleted) == [
            (Position(positions[3].ledger_id, 2), positions[5]),
            (Position(positions[8].ledger_id, 7), positions[8]),
            (Position(positions[12].ledger_id, 1), positions[12]),
        ]
        await cursor.mark_delete(positions[2], {"p": 7})
        assert cursor.mark_delete_position == positions[5]  # moved over the acked run
        await cursor.set_cursor_property("owner", "test")
        read = await cursor.read_entries(3)
        assert [p for p, _ in read] == [positions[6], positions[7], positions[9]]
    async with open_managed_ledger(bk, "t", TEN_PER_LEDGER) as ml:
        again = ml.cursors["sub"]
        assert again.mark_delete_position == positions[5]
        assert list(again.individually_deleted) == [positions[8], positions[12]]
        assert again.properties == {"p": 7}
        assert again.cursor_properties == {"owner": "test"}


async def test_expiry_by_entry_timestamp(bk: BookKeeper, clock: FakeClock) -> None:
    async with open_managed_ledger(bk, "t", TEN_PER_LEDGER, clock=clock) as ml:
        positions = await _publish_spaced(ml, clock, 25, step=100)
        cursor = await ml.open_cursor("sub", earliest=True)
        monitor = MessageExpiryMonitor(cursor)
        # Messages at t+0.1 .. t+2.5 s, now t+2.5 s. The first ledger closed at t+1 s is
        # expired whole by its close time; then entries before t+1.45 s by timestamp.
        assert await monitor.expire_messages(ttl_seconds=1.05)
        assert cursor.mark_delete_position == positions[13]
        assert not await monitor.expire_messages(ttl_seconds=1.05)
        clock.advance(10_000)
        assert await monitor.expire_messages(ttl_seconds=1)
        assert cursor.backlog() == 0


async def test_expiry_with_future_client_clocks(bk: BookKeeper, clock: FakeClock) -> None:
    """testIncorrectClientClock: publish times 10 days ahead, one entry per ledger; close
    times expire the ledgers anyway."""
    config = ManagedLedgerConfig(
        max_entries_per_ledger=1, minimum_rollover_time_ms=0, broker_entry_metadata=False
    )
    async with open_managed_ledger(bk, "t", config, clock=clock) as ml:
        future = clock.now + 10 * 86_400_000
        for i in range(3):
            await ml.publish([Message(b"m%d" % i, publish_time=future + i)])
        cursor = await ml.open_cursor("sub", earliest=True)
        clock.advance(2_000)
        monitor = MessageExpiryMonitor(cursor)
        assert await monitor.expire_messages(ttl_seconds=1)
        assert cursor.backlog() == 0


async def test_concurrent_expiry_checks_run_once(bk: BookKeeper, clock: FakeClock) -> None:
    async with open_managed_ledger(bk, "t", TEN_PER_LEDGER, clock=clock) as ml:
        await _publish_spaced(ml, clock, 3, step=1000)
        cursor = await ml.open_cursor("sub", earliest=True)
        clock.advance(5000)
        monitor = MessageExpiryMonitor(cursor)
        results: list[bool] = []

        async def check() -> None:
            results.append(await monitor.expire_messages(1))

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(check)
        assert sorted(results) == [False, False, True]
        assert cursor.backlog() == 0
