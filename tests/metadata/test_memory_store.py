"""The in-process store keeps the MetadataStore contract that code above it relies on, and
answers without threads, so a cluster on it runs in virtual time with no clock leaps.

The shared contract suite (test_store.py) needs a second client on the same tree, which a
memory store cannot give another process; these are the same behaviours, checked on one
client.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from bookiesim.metadata import (
    ANY_VERSION,
    BadVersionError,
    Change,
    LedgerManager,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Versioned,
)
from bookiesim.metadata.memory_store import SESSION_ID, MemoryStore


async def test_nodes_versions_and_compare_and_set() -> None:
    store = MemoryStore()
    assert await store.get("/a") is None
    assert await store.create("/a", b"1") == "/a"
    with pytest.raises(NodeExistsError, match=r"^/a: "):
        await store.create("/a")
    with pytest.raises(NoNodeError, match=r"parent /x/y does not exist"):
        await store.create("/x/y/z")
    assert await store.create("/x/y/z", b"v", make_parents=True) == "/x/y/z"
    assert await store.children("/x") == ["y"]
    assert await store.set("/a", b"2", 0) == 1
    with pytest.raises(BadVersionError) as info:
        await store.set("/a", b"3", 0)
    assert info.value.actual == 1
    assert await store.set("/a", b"4", ANY_VERSION) == 2
    assert await store.get("/a") == Versioned(b"4", 2, 0)
    with pytest.raises(NotEmptyError):
        await store.delete("/x/y")
    with pytest.raises(BadVersionError):
        await store.delete("/a", 0)
    await store.delete("/a", 2)
    with pytest.raises(NoNodeError):
        await store.delete("/a")
    with pytest.raises(NoNodeError):
        await store.children("/nope")


async def test_sequential_names_follow_the_parent_child_count() -> None:
    store = MemoryStore()
    await store.create("/s")
    first = await store.create("/s/n-", sequential=True)
    await store.delete(first)
    assert first == "/s/n-0000000000"
    assert await store.create("/s/n-", sequential=True) == "/s/n-0000000001"


async def test_ephemerals_are_leaves_and_go_with_the_store() -> None:
    store = MemoryStore()
    await store.create("/e", ephemeral=True)
    assert (await store.get("/e")) == Versioned(b"", 0, SESSION_ID)
    with pytest.raises(NoChildrenForEphemeralsError):
        await store.create("/e/child")
    await store.create("/p")
    await store.close()
    other_view = store._nodes
    assert "/e" not in other_view
    assert "/p" in other_view


async def test_watch_is_level_triggered() -> None:
    store = MemoryStore()
    seen: list[Change] = []
    async with store.watch("/w") as changes:
        seen.append(await changes.__anext__())
        await store.create("/w")
        seen.append(await changes.__anext__())
        await store.create("/w/c")
        seen.append(await changes.__anext__())
    assert [(c.exists, c.children_version) for c in seen] == [(False, -1), (True, 0), (True, 1)]


async def test_ledger_manager_works_in_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No thread, no leap: a thousand metadata operations take no virtual time."""
    store = MemoryStore()
    ledgers = LedgerManager(store)
    start = trio.current_time()
    ids = [await ledgers.allocate_ledger_id() for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert trio.current_time() == start
