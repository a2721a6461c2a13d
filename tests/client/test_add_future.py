"""An add in flight (:class:`bookiesim.client.add_future.AddFuture`), without a cluster."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from bookiesim.client.add_future import AddFuture
from bookiesim.client.errors import BKError, LedgerFencedError


async def test_result_waits_for_the_ack_and_says_how_it_ended() -> None:
    op = AddFuture(4, 10, b"body")
    assert repr(op) == "AddFuture(entry_id=4, pending)"
    async with trio.open_nursery() as nursery:
        got: list[int] = []

        async def wait() -> None:
            got.append(await op.result())

        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        op._finish(None)
    assert got == [4]
    assert (op.done, op.body, repr(op)) == (True, b"", "AddFuture(entry_id=4, acked)")
    assert await op.result() == 4  # already done: no waiting


async def test_a_failed_add_raises_its_error() -> None:
    op = AddFuture(5, 11, b"body")
    op._finish(LedgerFencedError("fenced", ledger_id=1))
    assert repr(op) == "AddFuture(entry_id=5, failed)"
    with pytest.raises(BKError, match="fenced"):
        await op.result()
