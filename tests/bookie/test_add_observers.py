"""Bookie add observers: how the simulator watches the add path (invariant A1, "no normal
add lands on a fenced ledger") without subclassing the bookie. Each accepted add is
reported once with its header, whether it was a recovery add, and whether storage had the
ledger fenced before it arrived; refused adds are not reported."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.bookie.bookie import Bookie
from bookiesim.bookie.errors import FencedError
from bookiesim.client.digest import DigestManager
from bookiesim.cluster.testing import bookie_config

if TYPE_CHECKING:
    from pathlib import Path

KEY = b"k" * 20


def body(ledger_id: int, entry_id: int) -> bytes:
    return DigestManager(ledger_id, b"").package(entry_id, entry_id - 1, entry_id + 1, b"x")


async def test_observers_see_accepted_adds_with_the_fence_bit_from_before(
    tmp_path: Path,
) -> None:
    seen: list[tuple[int, int, bool, bool]] = []
    bookie = Bookie(
        bookie_config(tmp_path),
        add_observers=[
            lambda h, recovery, fenced: seen.append((h.ledger_id, h.entry_id, recovery, fenced))
        ],
    )
    done = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(bookie.run)
        bookie.add_entry(body(1, 0), KEY, lambda error: None)
        bookie.add_entry(body(1, 1), KEY, lambda error: done.set())
        await done.wait()
        await bookie.fence(1, KEY)
        with pytest.raises(FencedError):
            bookie.add_entry(body(1, 2), KEY, lambda error: None)
        bookie.add_entry(body(1, 2), KEY, lambda error: None, recovery=True)
        nursery.cancel_scope.cancel()
    assert seen == [(1, 0, False, False), (1, 1, False, False), (1, 2, True, True)]
    bookie.handles._check()
