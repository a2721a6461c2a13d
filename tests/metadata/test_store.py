"""The MetadataStore contract, run unchanged against SQLite and a real ZooKeeper.

Why one parametrized suite: code above the store (ledger manager, registration, the client)
is written once against the interface, so both backends must agree on every behaviour it
relies on — ZooKeeper's, which the SQLite backend imitates: versions, compare-and-set,
sequential names, ephemerals and their liveness, non-recursive deletes, watches.
"""

from __future__ import annotations

import subprocess

import pytest
import trio

from bookiesim.metadata import (
    ANY_VERSION,
    BadVersionError,
    Change,
    MetadataStore,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Versioned,
)
from bookiesim.metadata.sqlite_store import SqliteStore
from bookiesim.metadata.store import validate_path
from bookiesim.metadata.zk_store import ZkStore
from tests.metadata.helpers import REPO_ROOT, Backend
from tests.metadata.worker import increment


async def test_get_missing_is_none(store: MetadataStore) -> None:
    assert await store.get("/nope") is None


async def test_create_then_get(store: MetadataStore) -> None:
    assert await store.create("/a", b"hello") == "/a"
    assert await store.get("/a") == Versioned(b"hello", 0, 0)
    assert await store.create("/a/b") == "/a/b"
    assert await store.get("/a/b") == Versioned(b"", 0, 0)


async def test_create_existing_names_the_path(store: MetadataStore) -> None:
    await store.create("/a", b"1")
    with pytest.raises(NodeExistsError, match=r"^/a: ") as info:
        await store.create("/a", b"2")
    assert info.value.path == "/a"
    assert (await store.get("/a")) == Versioned(b"1", 0, 0)


async def test_create_needs_parent_unless_make_parents(store: MetadataStore) -> None:
    with pytest.raises(NoNodeError, match=r"/x/y/z: .*parent /x/y does not exist"):
        await store.create("/x/y/z", b"v")
    assert await store.create("/x/y/z", b"v", make_parents=True) == "/x/y/z"
    assert await store.get("/x/y") == Versioned(b"", 0, 0)
    assert await store.children("/x") == ["y"]


async def test_set_is_compare_and_set(store: MetadataStore) -> None:
    await store.create("/n", b"0")
    assert await store.set("/n", b"1", 0) == 1
    with pytest.raises(BadVersionError) as info:
        await store.set("/n", b"stale", 0)
    assert (info.value.path, info.value.expected, info.value.actual) == ("/n", 0, 1)
    assert "/n" in str(info.value)
    assert await store.get("/n") == Versioned(b"1", 1, 0)
    assert await store.set("/n", b"2", ANY_VERSION) == 2
    assert await store.set("/n", b"3", 2) == 3
    assert await store.get("/n") == Versioned(b"3", 3, 0)


async def test_set_missing_node(store: MetadataStore) -> None:
    with pytest.raises(NoNodeError, match=r"^/missing: "):
        await store.set("/missing", b"v", ANY_VERSION)


async def test_delete_semantics(store: MetadataStore) -> None:
    await store.create("/p/c", b"", make_parents=True)
    with pytest.raises(NotEmptyError, match=r"^/p: "):
        await store.delete("/p")
    await store.set("/p/c", b"x", 0)
    with pytest.raises(BadVersionError) as info:
        await store.delete("/p/c", 0)
    assert info.value.actual == 1
    await store.delete("/p/c", 1)
    await store.delete("/p")
    with pytest.raises(NoNodeError, match=r"^/p: "):
        await store.delete("/p")
    assert await store.get("/p") is None


async def test_children_sorted_and_missing(store: MetadataStore) -> None:
    await store.create("/d")
    for name in ["b", "c", "a"]:
        await store.create(f"/d/{name}")
    assert await store.children("/d") == ["a", "b", "c"]
    assert await store.children("/d/a") == []
    with pytest.raises(NoNodeError, match=r"^/nope: "):
        await store.children("/nope")


async def test_sequential_names_follow_the_parent_child_count(store: MetadataStore) -> None:
    await store.create("/q")
    first = await store.create("/q/item-", b"", sequential=True)
    second = await store.create("/q/item-", b"", sequential=True)
    assert first == "/q/item-0000000000"
    assert second == "/q/item-0000000001"
    await store.delete(second)  # the counter never goes back, and deletes do not advance it
    assert await store.create("/q/item-", b"", sequential=True) == "/q/item-0000000002"
    await store.create("/q/plain")  # every create counts, sequential or not
    assert await store.create("/q/item-", b"", sequential=True) == "/q/item-0000000004"


async def test_ephemerals_are_leaves(store: MetadataStore) -> None:
    await store.create("/e", b"", ephemeral=True)
    assert (await store.get("/e")) == Versioned(b"", 0, store.session_id)
    with pytest.raises(NoChildrenForEphemeralsError, match=r"^/e/child: "):
        await store.create("/e/child")


async def test_root_and_bad_paths(store: MetadataStore) -> None:
    root = await store.get("/")
    assert root is not None
    with pytest.raises(NodeExistsError):
        await store.create("/")
    for bad in ["", "a", "/a/", "//a", "/a/./b", "/a/../b"]:
        with pytest.raises(ValueError, match=r"metadata paths|component"):
            await store.get(bad)


def test_validate_path() -> None:
    assert validate_path("/") == "/"
    assert validate_path("/ledgers/available/127.0.0.1:3181") == "/ledgers/available/127.0.0.1:3181"
    with pytest.raises(ValueError, match="NUL"):
        validate_path("/a\x00")


async def test_concurrent_cas_from_tasks(backend: Backend, store: MetadataStore) -> None:
    """Tasks on two clients race to increment one counter; not one increment is lost."""
    await store.create("/counter", b"0")
    conflicts: list[int] = []
    async with backend.open() as other, trio.open_nursery() as nursery:
        for i in range(8):
            client = store if i % 2 else other

            async def work(client: MetadataStore = client) -> None:
                conflicts.append(await increment(client, "/counter", 10))

            nursery.start_soon(work)
    node = await store.get("/counter")
    assert node is not None
    assert int(node.value) == 80
    assert node.version == 80


async def test_concurrent_cas_from_processes(backend: Backend, store: MetadataStore) -> None:
    """Two processes increment with CAS + retry and end at exactly the sum of their work."""
    await store.create("/counter", b"0")
    per_process = 40
    outputs: list[str] = []

    async def run_worker() -> None:
        outputs.append(await backend.run_worker("increment", "/counter", str(per_process)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_worker)
        nursery.start_soon(run_worker)
    node = await store.get("/counter")
    assert node is not None
    assert int(node.value) == 2 * per_process, outputs


async def test_ephemeral_goes_when_its_session_closes(backend: Backend) -> None:
    async with backend.open() as observer:
        async with backend.open() as owner:
            await owner.create("/live", b"")
            await owner.create("/live/me", b"up", ephemeral=True)
            assert (await observer.get("/live/me")) is not None
        # Closing ends the session at once (no waiting for a timeout), in both backends.
        assert await observer.get("/live/me") is None
        assert await observer.children("/live") == []


async def _wait_gone(store: MetadataStore, path: str, limit: float) -> float:
    start = trio.current_time()
    with trio.fail_after(limit):
        async with store.watch(path) as changes:
            async for change in changes:
                if not change.exists:
                    break
    return trio.current_time() - start


async def test_ephemeral_expires_with_its_session(backend: Backend) -> None:
    """A session that stops heartbeating (SQLite) or is expired by the server (ZooKeeper)
    loses its ephemerals; the client carries on with a new session."""
    async with backend.open() as observer, backend.open() as owner:
        await owner.create("/e1", b"", ephemeral=True)
        await owner.create("/persistent", b"stays")
        old_session = owner.session_id
        assert isinstance(owner, SqliteStore | ZkStore)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(owner.expire_session)
            await _wait_gone(observer, "/e1", backend.session_timeout * 5 + 5)
        assert owner.session_id != old_session
        assert await observer.get("/persistent") == Versioned(b"stays", 0, 0)
        # The new session works: ephemerals can be created again and are owned by it.
        await owner.create("/e1", b"", ephemeral=True)
        node = await observer.get("/e1")
        assert node is not None
        assert node.ephemeral_owner == owner.session_id


async def test_ephemeral_goes_when_its_process_is_killed(backend: Backend) -> None:
    """kill -9 a process holding an ephemeral: it disappears within about the timeout."""
    async with backend.open() as observer:
        proc = await trio.lowlevel.open_process(
            backend.worker("register", "127.0.0.1:3181"),
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            with trio.fail_after(30):
                line = await proc.stdout.receive_some(64)
            assert line.strip() == b"ready"
            path = "/ledgers/available/127.0.0.1:3181"
            assert await observer.get(path) is not None
        finally:
            proc.kill()
            await proc.wait()
        took = await _wait_gone(observer, path, backend.session_timeout * 5 + 5)
        assert took <= backend.session_timeout * 3 + 2


async def test_watch_is_level_triggered(store: MetadataStore) -> None:
    async with store.watch("/w") as changes:
        with trio.fail_after(10):
            assert await anext(changes) == Change("/w", False, -1, -1)
            await store.create("/w", b"0")
            assert await anext(changes) == Change("/w", True, 0, 0)
            await store.set("/w", b"1", 0)
            assert await anext(changes) == Change("/w", True, 1, 0)
            await store.create("/w/child")
            assert await anext(changes) == Change("/w", True, 1, 1)
            await store.delete("/w/child")
            await store.delete("/w")
            # Coalesced: the child's removal may or may not be seen on its own.
            change = await anext(changes)
            while change.exists:
                change = await anext(changes)
            assert change == Change("/w", False, -1, -1)


async def test_watch_sees_other_clients(backend: Backend, store: MetadataStore) -> None:
    async with backend.open() as other, store.watch("/shared") as changes:
        with trio.fail_after(10):
            assert not (await anext(changes)).exists
            await other.create("/shared", b"x")
            assert (await anext(changes)).exists
            await other.set("/shared", b"y", 0)
            assert (await anext(changes)).version == 1
