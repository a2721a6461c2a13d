"""LedgerManager.list_ledgers reuses its last walk only while the store's exact change
number is unchanged: GC's scan-and-compare must still see every deletion on its next pass."""

from __future__ import annotations

from bookiesim.metadata.forwarding import ForwardingStore
from bookiesim.metadata.ledgers import LedgerManager
from bookiesim.metadata.memory_store import MemoryStore
from bookiesim.metadata.store import store_change_number
from tests.metadata.test_ledgers import simple


class _CountingStore(ForwardingStore):
    def __init__(self, inner: MemoryStore) -> None:
        super().__init__(inner)
        self.children_calls = 0

    async def children(self, path: str) -> list[str]:
        self.children_calls += 1
        return await super().children(path)


async def test_unchanged_store_is_not_walked_again() -> None:
    store = _CountingStore(MemoryStore())
    ledgers = LedgerManager(store)
    ids = [await ledgers.create(simple()) for _ in range(5)]
    assert await ledgers.list_ledgers() == ids
    walked = store.children_calls
    assert await ledgers.list_ledgers() == ids
    assert store.children_calls == walked  # reused


async def test_deleted_and_created_ledgers_are_seen_on_the_next_listing() -> None:
    store = MemoryStore()
    ledgers = LedgerManager(store)
    ids = [await ledgers.create(simple()) for _ in range(5)]
    assert await ledgers.list_ledgers() == ids
    await ledgers.delete(ids[2])
    assert await ledgers.list_ledgers() == ids[:2] + ids[3:]
    new = await ledgers.create(simple())
    assert await ledgers.list_ledgers() == [*ids[:2], *ids[3:], new]
    # Deleted by another manager (another process on the same store): seen too.
    await LedgerManager(store).delete(ids[0])
    assert await ledgers.list_ledgers() == [*ids[1:2], *ids[3:], new]


async def test_a_walk_overlapped_by_a_change_is_not_kept() -> None:
    store = _CountingStore(MemoryStore())
    ledgers = LedgerManager(store)
    ids = [await ledgers.create(simple()) for _ in range(3)]

    class Racing(_CountingStore):
        async def children(self, path: str) -> list[str]:
            out = await super().children(path)
            if self.children_calls == 1:
                await ledgers.delete(ids[1])  # changes the tree while the walk runs
            return out

    racing = Racing(store.inner)  # type: ignore[arg-type]
    mgr = LedgerManager(racing)
    first = await mgr.list_ledgers()
    assert ids[0] in first
    assert ids[2] in first
    assert mgr._listed is None
    assert await mgr.list_ledgers() == [ids[0], ids[2]]


async def test_store_without_change_number_always_walks() -> None:
    class Opaque(_CountingStore):
        def change_number(self) -> int | None:
            return None

    store = Opaque(MemoryStore())
    assert store_change_number(store) is None
    ledgers = LedgerManager(store)
    await ledgers.create(simple())
    await ledgers.list_ledgers()
    walked = store.children_calls
    await ledgers.list_ledgers()
    assert store.children_calls == 2 * walked
