"""A writing handle driven by hand, without bookies: the ClientContext is a stub, the pool
records requests, and each step's answers are made up. The handle's ``_check()`` holds
after every step, and its state follows :mod:`bookiesim.client.handle_state`."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, cast

import pytest
import trio
import trio.testing

from bookiesim.client.context import ClientConfig, ClientContext, ClientStats
from bookiesim.client.errors import BookieUnavailableError, LedgerClosedError, LedgerFencedError
from bookiesim.client.handle_state import HandleState
from bookiesim.client.ledger_handle import LedgerHandle
from bookiesim.metadata.ledgers import LedgerMetadata
from bookiesim.proto import BookkeeperProtocol_pb2 as pb

if TYPE_CHECKING:
    from bookiesim.client.add_future import AddFuture
    from bookiesim.client.bookie_pool import Outcome, OutcomeCallback
    from bookiesim.proto.v3 import WireRequest

ENSEMBLE = ("b0", "b1", "b2")


class _Pool:
    v2 = False

    def __init__(self) -> None:
        self.sent: list[tuple[str, WireRequest, OutcomeCallback]] = []

    def submit(self, bookie: str, request: WireRequest, callback: OutcomeCallback) -> None:
        self.sent.append((bookie, request, callback))

    def answer(self, outcome_for: Any) -> None:
        sent, self.sent = self.sent, []
        for bookie, _, callback in sent:
            outcome: Outcome | None = outcome_for(bookie)
            if outcome is not None:
                callback(outcome)


class _Context:
    def __init__(self, nursery: trio.Nursery, live: dict[str, object]) -> None:
        self.config = ClientConfig(seed=1)
        self.stats = ClientStats()
        self.rng = random.Random(1)
        self.ledger_manager = None
        self.pool = _Pool()
        self.nursery = nursery
        self.live = live

    async def live_bookies(self) -> dict[str, object]:
        return self.live

    async def read_only_bookies(self) -> dict[str, object]:
        return {}

    def send_write_close(self, ledger_id: int, metadata: object, master_key: bytes) -> None:
        raise AssertionError("not in these tests")


def _ok(bookie: str) -> pb.Response:
    return pb.Response(status=pb.EOK)


def _state(lh: LedgerHandle) -> HandleState:
    """The handle's state, read afresh: the change runs in the nursery between two reads,
    which a narrowed attribute would hide from the type checker."""
    return lh._state


def _done(op: AddFuture) -> bool:
    """Read afresh, for the same reason as :func:`_state`."""
    return op.done


def _handle(ctx: _Context, *, recovery: bool = True) -> LedgerHandle:
    # A recovery handle keeps ensemble changes in memory: no metadata store needed.
    metadata = LedgerMetadata(3, 2, 2, {0: ENSEMBLE})
    return LedgerHandle(cast("ClientContext", ctx), 1, metadata, 0, recovery=recovery)


async def test_acks_complete_in_order_and_a_fence_fails_the_rest() -> None:
    async with trio.open_nursery() as nursery:
        ctx = _Context(nursery, {})
        lh = _handle(ctx, recovery=False)
        futures = [lh.append_async(b"x%d" % i) for i in range(4)]
        lh._check()
        ctx.pool.answer(_ok)
        lh._check()
        assert lh.last_add_confirmed == 3
        assert all(f.done for f in futures)
        more = [lh.append_async(b"y") for _ in range(2)]
        ctx.pool.answer(lambda b: pb.Response(status=pb.EFENCED) if b == "b0" else None)
        lh._check()
        assert _state(lh) is HandleState.FAILED
        assert isinstance(lh.error, LedgerFencedError)
        assert all(f.done and f.error is lh.error for f in more)
        with pytest.raises(LedgerFencedError):
            lh.append_async(b"z")
        nursery.cancel_scope.cancel()


async def test_an_ensemble_change_holds_adds_and_resends_them() -> None:
    async with trio.open_nursery() as nursery:
        ctx = _Context(nursery, {b: object() for b in (*ENSEMBLE, "b3")})
        lh = _handle(ctx)
        first = lh._append_recovered(0, b"a", 1)
        failed = BookieUnavailableError("down", bookie="b0")
        ctx.pool.answer(lambda b: failed if b == "b0" else _ok(b))
        assert _state(lh) is HandleState.CHANGING
        lh._check()
        assert not _done(first)  # no add completes during a change
        held = lh._append_recovered(1, b"b", 2)  # made during the change: not sent yet
        assert not held.sent
        lh._check()
        await trio.testing.wait_all_tasks_blocked()
        assert _state(lh) is HandleState.OPEN
        assert lh.ensemble == ("b3", "b1", "b2")
        lh._check()
        assert not _done(first)  # b1 acked it, b0 did not: it waits for its replacement
        ctx.pool.answer(_ok)
        lh._check()
        assert _done(first)
        assert _done(held)
        assert first.error is None
        assert held.error is None
        assert lh.last_add_confirmed == 1
        await lh.wait_for_pending()
        nursery.cancel_scope.cancel()


async def test_no_spare_bookie_fails_the_handle_and_close_is_refused_after() -> None:
    async with trio.open_nursery() as nursery:
        ctx = _Context(nursery, {b: object() for b in ENSEMBLE})
        lh = _handle(ctx)
        op = lh._append_recovered(0, b"a", 1)
        ctx.pool.answer(lambda b: BookieUnavailableError("down", bookie=b))
        assert _state(lh) is HandleState.CHANGING
        await trio.testing.wait_all_tasks_blocked()
        assert _state(lh) is HandleState.FAILED
        assert _done(op)
        assert op.error is lh.error
        lh._check()
        nursery.cancel_scope.cancel()


async def test_check_catches_a_handle_out_of_step_with_its_table() -> None:
    async with trio.open_nursery() as nursery:
        ctx = _Context(nursery, {})
        lh = _handle(ctx, recovery=False)
        lh._state = HandleState.FAILED  # failed, yet no error recorded
        with pytest.raises(AssertionError):
            lh._check()
        lh._state = HandleState.CLOSING
        with pytest.raises(LedgerClosedError):
            lh.append_async(b"x")
        nursery.cancel_scope.cancel()
