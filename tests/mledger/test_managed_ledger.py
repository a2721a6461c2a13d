"""The managed ledger on real bookies: rollover rules, the stored record, reopen, fencing,
compression across restarts, corrupt records.

Why: a topic's ledgers are only found again through ManagedLedgerInfo; if rollover or the
compare-and-set record is wrong, entries are lost on the next restart even though the
bookies hold them. Scenarios follow upstream's (reference/pulsar.md §5, §6.3, §6.7).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from bookiesim.mledger.compression import (
    CompressionType,
    CorruptManagedInfoError,
    MetadataCompressionConfig,
    decode_cursor_info,
    decode_ledger_info,
)
from bookiesim.mledger.config import ManagedLedgerConfig
from bookiesim.mledger.errors import ManagedLedgerFencedError
from bookiesim.mledger.managed_ledger import ManagedLedger, open_managed_ledger
from bookiesim.mledger.position import Position
from bookiesim.mledger.publishing import Message
from bookiesim.proto.pulsar_entry import decode_pulsar_entry

if TYPE_CHECKING:
    from bookiesim.client import BookKeeper
    from bookiesim.proto import MLDataFormats_pb2 as ml_pb

    from .conftest import FakeClock

SMALL = ManagedLedgerConfig(max_entries_per_ledger=2, minimum_rollover_time_ms=0)


async def _stored(bk: BookKeeper, name: str) -> ml_pb.ManagedLedgerInfo:
    found = await bk.store.get(f"/managed-ledgers/{name}")
    assert found is not None
    return decode_ledger_info(found.value)[0]


async def test_a_ledger_holds_exactly_max_entries(bk: BookKeeper, clock: FakeClock) -> None:
    async with open_managed_ledger(bk, "t", SMALL, clock=clock) as ml:
        positions = []
        for i in range(3):
            positions.append(await ml.add_entry(b"e%d" % i))
            ml._check()
        ledgers = ml.ledger_list().ledgers
        assert [info.entries for info in ledgers] == [2, 1]
        assert positions == [
            Position(ledgers[0].ledger_id, 0),
            Position(ledgers[0].ledger_id, 1),
            Position(ledgers[1].ledger_id, 0),
        ]
        await ml.add_entry(b"e3")  # fills the second: closed, and a new empty one opened
        ml._check()
        assert [info.entries for info in ml.ledger_list().ledgers] == [2, 2, 0]
        stored = await _stored(bk, "t")
        assert [li.entries for li in stored.ledgerInfo[:2]] == [2, 2]
        assert not stored.ledgerInfo[2].HasField("entries")
        assert stored.ledgerInfo[2].timestamp == 0
        assert stored.ledgerInfo[0].timestamp == clock.now
        read = await ml.read_entries(positions[0], 10)
        assert [payload for _, payload in read] == [b"e0", b"e1", b"e2", b"e3"]


async def test_size_and_time_rules(bk: BookKeeper, clock: FakeClock) -> None:
    config = ManagedLedgerConfig(
        max_entries_per_ledger=100,
        max_size_per_ledger_mb=0,  # every add fills it
        minimum_rollover_time_ms=1000,
        maximum_rollover_time_ms=60_000,
    )
    async with open_managed_ledger(
        bk, "t", config, clock=clock, rollover_check_interval=None
    ) as ml:
        for i in range(3):  # younger than the minimum: writes go on past the maximum
            await ml.add_entry(b"x%d" % i)
            ml._check()
        assert [info.entries for info in ml.ledger_list().ledgers] == [3]
        clock.advance(1001)
        await ml.add_entry(b"x3")
        assert [info.entries for info in ml.ledger_list().ledgers] == [4, 0]


async def test_maximum_and_inactive_rollover_times(bk: BookKeeper, clock: FakeClock) -> None:
    config = ManagedLedgerConfig(
        minimum_rollover_time_ms=0,
        maximum_rollover_time_ms=10_000,
        inactive_ledger_rollover_time_ms=3_000,
    )
    async with open_managed_ledger(
        bk, "t", config, clock=clock, rollover_check_interval=None
    ) as ml:
        assert not await ml.check_rollover()  # no entries: nothing to roll
        await ml.add_entry(b"a")
        clock.advance(2_000)
        assert not await ml.check_rollover()
        clock.advance(1_000)
        assert await ml.check_rollover()  # idle 3 s
        ml._check()
        await ml.add_entry(b"b")
        for _ in range(5):
            clock.advance(2_000)
            await ml.add_entry(b"c")  # never idle, but 10.5 s old at most (jitter)
        clock.advance(600)
        assert await ml.check_rollover() or len(ml.ledger_list()) == 3
        assert [info.entries for info in ml.ledger_list().ledgers] == [1, 6, 0]
        ml._check()
    ml._check()
    assert ml.stats()["state"] == "closed"


async def test_reopen_recovers_the_last_ledger_and_fences_the_old_owner(
    bk: BookKeeper, clock: FakeClock
) -> None:
    old = await ManagedLedger.open(bk, "t", SMALL, clock=clock, rollover_check_interval=None)
    await old.publish([Message(b"m%d" % i) for i in range(5)])
    old.abandon()  # a crash: the last ledger stays open with one entry
    old._check()
    clock.advance(5)
    async with open_managed_ledger(bk, "t", SMALL, clock=clock) as new:
        new._check()
        assert [info.entries for info in new.ledger_list().ledgers] == [2, 2, 1, 0]
        assert new.last_index == 4  # the index continues
        with pytest.raises(ManagedLedgerFencedError):
            await old.add_entry(b"late")
        old._check()
        assert old.is_fenced
        assert not old.is_closed
        positions = await new.publish([Message(b"m5")])
        entry = decode_pulsar_entry(await new.read_entry(positions[0]))
        assert entry.index == 5
        stored = await _stored(bk, "t")  # as of the open's write: the next write updates it
        assert [kv.value for kv in stored.properties if kv.key == "index"] == ["4"]


async def test_a_lost_compare_and_set_fences(bk: BookKeeper, clock: FakeClock) -> None:
    async with open_managed_ledger(bk, "t", SMALL, clock=clock) as ml:
        await ml.add_entry(b"a")
        found = await bk.store.get("/managed-ledgers/t")
        assert found is not None
        await bk.store.set("/managed-ledgers/t", found.value, found.version)  # someone else
        with pytest.raises(ManagedLedgerFencedError):
            await ml.add_entry(b"b")  # the rollover's write loses
        assert ml.is_fenced
        ml._check()
        with pytest.raises(ManagedLedgerFencedError):
            await ml.add_entry(b"c")
    ml._check()  # closed by its owner after the fence: both facts stay
    assert ml.is_fenced
    assert ml.is_closed
    assert ml.stats()["state"] == "fenced"


async def test_empty_ledgers_are_dropped_on_reopen(bk: BookKeeper, clock: FakeClock) -> None:
    async with open_managed_ledger(bk, "t", SMALL, clock=clock) as ml:
        await ml.add_entry(b"a")
    async with open_managed_ledger(bk, "t", SMALL, clock=clock) as ml:
        empty = ml.ledger_list().ledgers[-1].ledger_id
    async with open_managed_ledger(bk, "t", SMALL, clock=clock) as ml:
        ids = [info.ledger_id for info in ml.ledger_list().ledgers]
        assert empty not in ids
        assert [info.entries for info in ml.ledger_list().ledgers] == [1, 0]
    assert empty not in await bk.list_ledgers()


def _config(kind: str) -> ManagedLedgerConfig:
    compression = MetadataCompressionConfig.from_names(kind, 0)
    return ManagedLedgerConfig(
        max_entries_per_ledger=10,
        minimum_rollover_time_ms=0,
        ledger_info_compression=compression,
        cursor_info_compression=compression,
    )


async def test_restart_with_another_compression_type(bk: BookKeeper) -> None:
    """ManagedLedgerCompressionTest: NONE → ZSTD → LZ4 → NONE, 100 messages per phase
    produced and consumed, everything readable after each restart."""
    produced: list[bytes] = []
    for phase, kind in enumerate(["NONE", "ZSTD", "LZ4", "NONE"]):
        async with open_managed_ledger(bk, "tenant/ns/persistent/topic", _config(kind)) as ml:
            cursor = await ml.open_cursor("sub", earliest=True)
            batch = [b"phase %d message %d" % (phase, i) for i in range(100)]
            await ml.publish([Message(payload) for payload in batch])
            produced.extend(batch)
            entries = await cursor.read_entries(1000)
            assert [decode_pulsar_entry(p).payload for _, p in entries] == batch
            await cursor.mark_delete(entries[-1][0])
            everything = await ml.read_entries(ml.ledger_list().position_at(0), 10_000)
            assert [decode_pulsar_entry(p).payload for _, p in everything] == produced
        found = await bk.store.get("/managed-ledgers/tenant/ns/persistent/topic")
        assert found is not None
        assert decode_ledger_info(found.value)[1].name == kind
        cursor_node = await bk.store.get("/managed-ledgers/tenant/ns/persistent/topic/sub")
        assert cursor_node is not None
        assert decode_cursor_info(cursor_node.value)[1].name == kind


def test_an_invalid_type_stops_the_start() -> None:
    with pytest.raises(ValueError, match=r"No enum constant .*CompressionType\.INVALID"):
        ManagedLedgerConfig.from_broker_keys({"managedLedgerInfoCompressionType": "INVALID"})


def test_broker_keys() -> None:
    config = ManagedLedgerConfig.from_broker_keys(
        {
            "managedLedgerMaxEntriesPerLedger": "7",
            "managedLedgerMinLedgerRolloverTimeMinutes": "0",
            "managedCursorInfoCompressionType": "ZSTD",
            "managedCursorInfoCompressionThresholdInBytes": "0",
        }
    )
    assert config.max_entries_per_ledger == 7
    assert config.minimum_rollover_time_ms == 0
    assert config.cursor_info_compression == MetadataCompressionConfig(CompressionType.ZSTD, 0)
    assert config.ledger_info_compression.compression_type is CompressionType.NONE
    with pytest.raises(ValueError, match="managedLedgerFoo"):
        ManagedLedgerConfig.from_broker_keys({"managedLedgerFoo": "1"})


@pytest.mark.parametrize("node", ["/managed-ledgers/t", "/managed-ledgers/t/sub"])
async def test_a_corrupt_record_names_its_node_and_stays(bk: BookKeeper, node: str) -> None:
    """readMalformedML / readMalformedCursorNode: the open fails, nothing is overwritten."""
    async with open_managed_ledger(bk, "t", SMALL) as ml:
        await ml.open_cursor("sub")
    bad = b"\x47\x78\x00\x00\x00\x05\x08\x01\x10\xba\x79broken"
    found = await bk.store.get(node)
    assert found is not None
    await bk.store.set(node, bad, found.version)
    with pytest.raises(CorruptManagedInfoError, match=node) as caught:
        await ManagedLedger.open(bk, "t", SMALL, rollover_check_interval=None)
    assert caught.value.node == node
    after = await bk.store.get(node)
    assert after is not None
    assert (after.value, after.version) == (bad, found.version + 1)


async def test_a_concurrently_created_node_is_read(bk: BookKeeper) -> None:
    """createMLNodeConcurrently: created empty by someone else first → an empty info."""
    await bk.store.create("/managed-ledgers/t", b"", make_parents=True)
    async with open_managed_ledger(bk, "t", SMALL) as ml:
        assert [info.entries for info in ml.ledger_list().ledgers] == [0]
