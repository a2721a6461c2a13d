"""PIP-404 per-ledger properties: upstream's ManagedLedgerTest scenarios (reference §6.6)
and one regression test for each of the three ways upstream lost them (§4, §8):

* #26227 — closing a ledger rebuilt its LedgerInfo and dropped the properties;
* #26228 — a property write finishing after a concurrent close put back the open ledger's
  (missing) entries, size and close time;
* #26509 — reopening rebuilt the *last* ledger's LedgerInfo and dropped its properties.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.mledger.compression import decode_ledger_info
from bookiesim.mledger.config import ManagedLedgerConfig
from bookiesim.mledger.errors import LedgerNotFoundError, ManagedLedgerFencedError
from bookiesim.mledger.ledger_properties import properties_of
from bookiesim.mledger.managed_ledger import ManagedLedger, open_managed_ledger
from tests.client.helpers import wait_until

if TYPE_CHECKING:
    from bookiesim.client import BookKeeper
    from bookiesim.proto import MLDataFormats_pb2 as ml_pb

    from .conftest import FakeClock

CONFIG = ManagedLedgerConfig(max_entries_per_ledger=2, minimum_rollover_time_ms=0)


async def _stored_ledger(
    bk: BookKeeper, name: str, ledger_id: int
) -> ml_pb.ManagedLedgerInfo.LedgerInfo:
    found = await bk.store.get(f"/managed-ledgers/{name}")
    assert found is not None
    info, _ = decode_ledger_info(found.value)
    return next(li for li in info.ledgerInfo if li.ledgerId == ledger_id)


async def _two_ledgers(ml: ManagedLedger) -> tuple[int, int]:
    """testSetLedgerProperty's set-up: e1, key1 on the (open) first ledger, e2 and e3."""
    first = (await ml.add_entry(b"e1")).ledger_id
    await ml.add_ledger_property(first, "key1", "value1")
    await ml.add_entry(b"e2")
    last = (await ml.add_entry(b"e3")).ledger_id
    await ml.add_ledger_property(last, "key2", "value2")
    return first, last


async def test_set_ledger_property(bk: BookKeeper, clock: FakeClock) -> None:
    async with open_managed_ledger(bk, "t", CONFIG, clock=clock) as ml:
        first, last = await _two_ledgers(ml)
        assert first != last
        assert ml.ledger_info(first).entries == 2
        await ml.add_ledger_property(first, "key3", "value3")
        await ml.add_ledger_property(last, "key4", "value4")
        for ledger_id, key in [(first, "key1"), (last, "key2"), (first, "key3"), (last, "key4")]:
            assert ml.get_ledger_property(ledger_id, key) == "value" + key[-1]
        stored = await _stored_ledger(bk, "t", first)
        assert properties_of(stored)["key1"] == "value1"
        assert ml.get_ledger_property(first, "absent") is None


async def test_remove_ledger_property(bk: BookKeeper, clock: FakeClock) -> None:
    async with open_managed_ledger(bk, "t", CONFIG, clock=clock) as ml:
        first, last = await _two_ledgers(ml)
        await ml.add_ledger_property(first, "key3", "value3")
        await ml.add_ledger_property(last, "key4", "value4")
        await ml.remove_ledger_property(first, "key1")
        await ml.remove_ledger_property(last, "key2")
        user = {"key1", "key2", "key3", "key4"}
        assert {k for k in properties_of(ml.ledger_info(first)) if k in user} == {"key3"}
        assert {k for k in properties_of(ml.ledger_info(last)) if k in user} == {"key4"}
        await ml.remove_ledger_property(first, "key3")
        await ml.remove_ledger_property(last, "key4")
        await ml.remove_ledger_property(last, "never-there")  # still a (no-op) write
        assert not {k for k in properties_of(ml.ledger_info(first)) if k in user}
        assert not properties_of(await _stored_ledger(bk, "t", last))


async def test_unknown_ledger_and_fenced_managed_ledger(bk: BookKeeper, clock: FakeClock) -> None:
    async with open_managed_ledger(bk, "t", CONFIG, clock=clock) as ml:
        with pytest.raises(LedgerNotFoundError, match="ledger 999999 not found"):
            await ml.add_ledger_property(999_999, "k", "v")
        with pytest.raises(LedgerNotFoundError):
            ml.get_ledger_property(999_999, "k")
        current = (await ml.add_entry(b"e")).ledger_id
        found = await bk.store.get("/managed-ledgers/t")
        assert found is not None
        await bk.store.set("/managed-ledgers/t", found.value, found.version)  # a new owner
        with pytest.raises(ManagedLedgerFencedError):
            await ml.add_ledger_property(current, "k", "v")  # loses the compare-and-set
        with pytest.raises(ManagedLedgerFencedError):
            await ml.add_ledger_property(current, "k", "v")  # fenced from now on


async def test_unset_fields_stay_unset_on_the_open_ledger(bk: BookKeeper) -> None:
    """testLedgerPropertyWritePreservesUnsetFieldPresenceOnOpenLedger."""
    async with open_managed_ledger(bk, "t", CONFIG) as ml:
        current = (await ml.add_entry(b"e")).ledger_id
        await ml.add_ledger_property(current, "k", "v")
        stored = await _stored_ledger(bk, "t", current)
        assert not stored.HasField("entries")
        assert not stored.HasField("size")
        assert ml.get_ledger_property(current, "k") == "v"


async def test_regression_26227_property_survives_close(bk: BookKeeper, clock: FakeClock) -> None:
    async with open_managed_ledger(bk, "t", CONFIG, clock=clock) as ml:
        first = (await ml.add_entry(b"e1")).ledger_id
        await ml.add_ledger_property(first, "key1", "value1")
        await ml.add_entry(b"e2")  # closes it (2 entries) and writes the record
        assert ml.ledger_info(first).entries == 2
        assert ml.get_ledger_property(first, "key1") == "value1"
        stored = await _stored_ledger(bk, "t", first)
        assert stored.entries == 2
        assert properties_of(stored)["key1"] == "value1"


async def test_regression_26228_concurrent_close_is_not_undone(
    bk: BookKeeper, clock: FakeClock
) -> None:
    """The property write's metadata put is held back while the ledger fills and closes."""
    async with open_managed_ledger(bk, "t", CONFIG, clock=clock) as ml:
        first = (await ml.add_entry(b"e1")).ledger_id
        release, held = trio.Event(), trio.Event()
        real_put = ml.meta.put_ledger_info

        async def held_put(name: str, info: ml_pb.ManagedLedgerInfo, version: int) -> int:
            if not held.is_set():
                held.set()
                await release.wait()
            return await real_put(name, info, version)

        ml.meta.put_ledger_info = held_put  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ml.add_ledger_property, first, "key", "value")
            await held.wait()
            nursery.start_soon(ml.add_entry, b"e2")  # fills and closes the ledger
            await wait_until(lambda: ml.ledger_info(first).HasField("entries"))
            closed = ml.ledger_info(first)
            release.set()
        after = ml.ledger_info(first)
        assert (after.entries, after.size, after.timestamp) == (2, closed.size, closed.timestamp)
        assert ml.get_ledger_property(first, "key") == "value"
        stored = await _stored_ledger(bk, "t", first)
        assert (stored.entries, stored.size, stored.timestamp) == (2, closed.size, closed.timestamp)
        assert properties_of(stored)["key"] == "value"

    # testLedgerPropertyWriteCorrectedValuesSurviveReopen
    async with open_managed_ledger(bk, "t", CONFIG, clock=clock) as ml:
        again = ml.ledger_info(first)
        assert (again.entries, again.size, again.timestamp) == (2, closed.size, closed.timestamp)
        assert ml.get_ledger_property(first, "key") == "value"


async def test_regression_26509_last_ledger_property_survives_reopen(
    bk: BookKeeper, clock: FakeClock
) -> None:
    old = await ManagedLedger.open(bk, "t", CONFIG, clock=clock, rollover_check_interval=None)
    last = (await old.add_entry(b"e1")).ledger_id
    await old.add_ledger_property(last, "kafka.base.offset", "0")
    old.abandon()  # crash: the last ledger is still open, recovery closes it on reopen
    async with open_managed_ledger(bk, "t", CONFIG, clock=clock) as ml:
        assert ml.ledger_info(last).entries == 1
        assert ml.get_ledger_property(last, "kafka.base.offset") == "0"
        stored = await _stored_ledger(bk, "t", last)  # "saved back" with the property
        assert properties_of(stored)["kafka.base.offset"] == "0"
        assert stored.entries == 1
