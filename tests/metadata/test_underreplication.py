"""The under-replication manager on every backend: marks, locks, the flag, the delay, the
election — with upstream's semantics, and the store left tidy.

Why each backend: the manager sees only :class:`~bookiesim.metadata.store.MetadataStore`, but
ephemeral locks and votes live and die with a backend's sessions, and the simulator runs on the
memory store while clusters run on SQLite or ZooKeeper. Tests that need two sessions (a worker
dying with its lock) run where there can be two: SQLite and ZooKeeper.

:func:`check_tree` is the manager's consistency check (it keeps no state of its own to check):
after any quiescent step, no directory under ``ledgers/`` is empty, every mark sits at its
ledger's path and decodes, and every lock names a marked ledger. The hypothesis state machine
calls it after every step.
"""

from __future__ import annotations

import itertools
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from bookiesim.cluster.in_process import TrioThread
from bookiesim.metadata.errors import NoNodeError, StoreUnavailableError
from bookiesim.metadata.forwarding import ForwardingStore
from bookiesim.metadata.memory_store import MemoryStore
from bookiesim.metadata.sqlite_store import SqliteStore
from bookiesim.metadata.store import join_path
from bookiesim.metadata.underreplication import (
    LedgerLock,
    UnderReplicatedLedger,
    UnderReplicationManager,
)
from bookiesim.metadata.underreplication_control import IncompatibleLayoutError
from bookiesim.metadata.underreplication_format import (
    LOCKS,
    UnderReplicationFormatError,
    decode_mark,
    ledger_id_of_mark,
    lock_path,
    mark_path,
)
from bookiesim.metadata.zk_store import ZkStore
from tests.metadata.helpers import Backend, backend_for, opened

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from contextlib import AbstractAsyncContextManager

    from bookiesim.metadata import MetadataStore

ROOT = "/ledgers"
BASE = "/ledgers/underreplication"


class Clock:
    """Wall-clock milliseconds that move only when told (each read is one ms later)."""

    def __init__(self, start: int = 1795529350000) -> None:
        self._next = itertools.count(start)

    def __call__(self) -> int:
        return next(self._next)


@pytest.fixture(params=["memory", "sqlite", "zk"])
def anywhere(request: pytest.FixtureRequest, tmp_path: Path) -> Backend | None:
    """A backend to open clients on (None: the memory store, one client only)."""
    return backend_for(request.param, request, tmp_path)


@pytest.fixture
async def any_store(anywhere: Backend | None) -> AsyncIterator[MetadataStore]:
    async with opened(anywhere) as store:
        yield store


def manager(store: MetadataStore, clock: Clock | None = None) -> UnderReplicationManager:
    return UnderReplicationManager(store, now_ms=clock or Clock(), rng=random.Random(7))


# --- the consistency check ------------------------------------------------------------------


async def check_tree(store: MetadataStore, root: str = ROOT) -> dict[int, bytes]:
    """Assert the manager's invariants on the store; the marks' bytes by ledger id."""
    ledgers = join_path(join_path(root, "underreplication"), "ledgers")
    marks: dict[int, bytes] = {}

    async def visit(path: str, depth: int) -> None:
        names = await store.children(path)
        if depth > 0:
            assert names, f"{path}: an empty directory left behind"
        for name in names:
            child = join_path(path, name)
            if depth < 4:
                assert re.fullmatch("[0-9a-f]{4}", name), child
                await visit(child, depth + 1)
                continue
            ledger_id = ledger_id_of_mark(name)
            assert ledger_id is not None, child
            assert mark_path(root, ledger_id) == child
            node = await store.get(child)
            assert node is not None, child
            assert node.ephemeral_owner == 0, f"{child}: marks are persistent"
            decode_mark(node.value, child)
            marks[ledger_id] = node.value

    if await store.get(ledgers) is not None:
        await visit(ledgers, 0)
    locks = join_path(join_path(root, "underreplication"), LOCKS)
    for name in await store.children(locks) if await store.get(locks) else []:
        ledger_id = ledger_id_of_mark(name)
        assert ledger_id in marks, f"lock {name} names no marked ledger"
        node = await store.get(join_path(locks, name))
        assert node is not None, name
        assert node.ephemeral_owner != 0, f"{name}: locks are ephemeral"
    return marks


# --- layout ---------------------------------------------------------------------------------


async def test_layout_created_once_and_checked(any_store: MetadataStore) -> None:
    urm = manager(any_store)
    await urm.ensure_layout()
    await manager(any_store).ensure_layout()  # a second manager finds it and agrees
    assert await any_store.children(BASE) == ["LAYOUT", "ledgers", "locks"]
    layout = await any_store.get(f"{BASE}/LAYOUT")
    assert layout is not None
    assert layout.value == b'type: "BASIC"\nversion: 1\n'
    await any_store.set(f"{BASE}/LAYOUT", b'type: "FANCY"\nversion: 2\n', layout.version)
    with pytest.raises(IncompatibleLayoutError, match=r"LAYOUT: layout FANCY:2, .* BASIC:1"):
        await manager(any_store).ensure_layout()
    await any_store.set(f"{BASE}/LAYOUT", b"garbage", -1)
    with pytest.raises(UnderReplicationFormatError, match=r"^/ledgers/underreplication/LAYOUT:"):
        await manager(any_store).mark_under_replicated(1, ["a"])  # writers check it first


# --- marks ----------------------------------------------------------------------------------


async def test_marks_merge_replicas_as_upstream(any_store: MetadataStore) -> None:
    clock = Clock(1000)
    urm = manager(any_store, clock)
    await urm.mark_under_replicated(2, ["127.0.0.1:34183"])
    path = mark_path(ROOT, 2)
    node = await any_store.get(path)
    assert node is not None
    assert node.value == b'replica: "127.0.0.1:34183"\nctime: 1000\n'
    # Nothing new: the mark is left alone (same version, same time).
    await urm.mark_under_replicated(2, ["127.0.0.1:34183"])
    assert await any_store.get(path) == node
    # A new replica joins the list, and the mark time becomes now (upstream's default).
    await urm.mark_under_replicated(2, ["b", "127.0.0.1:34183", "b"])
    assert await urm.get(2) == UnderReplicatedLedger(2, ("127.0.0.1:34183", "b"), 1002)
    merged = await any_store.get(path)
    assert merged is not None
    assert merged.version == 1
    # Without mark times (storeSystemTimeAsLedgerUnderreplicatedMarkTime=false) none is written.
    plain = UnderReplicationManager(any_store, store_mark_time=False)
    await plain.mark_under_replicated(3, [])
    assert await plain.get(3) == UnderReplicatedLedger(3, (), None)
    await plain.mark_under_replicated(2, ["c"])
    assert await plain.get(2) == UnderReplicatedLedger(2, ("127.0.0.1:34183", "b", "c"), 1002)
    assert await urm.get(4) is None
    await check_tree(any_store)


async def test_listing_is_by_ledger_id(any_store: MetadataStore) -> None:
    urm = manager(any_store)
    assert await urm.under_replicated() == []
    assert await urm.count() == 0
    ids = [70000, 5, 2**40 + 3, 0, 2**63 - 1]
    for ledger_id in ids:
        await urm.mark_under_replicated(ledger_id, [f"b{ledger_id}"])
    listed = await urm.under_replicated()
    assert [m.ledger_id for m in listed] == sorted(ids)
    assert [m.replicas for m in listed] == [(f"b{i}",) for i in sorted(ids)]
    assert await urm.count() == len(ids)
    assert set(await check_tree(any_store)) == set(ids)
    # A corrupt mark is reported naming its node, not skipped.
    await any_store.set(mark_path(ROOT, 5), b"replica: 5", -1)
    with pytest.raises(UnderReplicationFormatError, match=r"urL0000000005: not an under-repl"):
        await urm.under_replicated()


# --- locks ----------------------------------------------------------------------------------


async def test_lock_and_mark_replicated_prunes_parents(any_store: MetadataStore) -> None:
    urm = manager(any_store)
    assert await urm.try_lock(1, "w1") is None  # not marked: nothing to lock
    assert await urm.lock_owner(1) is None
    for ledger_id in (1, 2):
        await urm.mark_under_replicated(ledger_id, ["gone"])
    lock = await urm.try_lock(1, "w1")
    assert lock == LedgerLock(1, 0, "w1", any_store.session_id)
    assert await urm.try_lock(1, "w2") is None
    assert await urm.lock_owner(1) == "w1"
    assert await urm.lock_owner(2) is None
    node = await any_store.get(lock_path(ROOT, 1))
    assert node is not None
    assert node.value == b'bookieId: "w1"\n'
    assert node.ephemeral_owner == any_store.session_id
    await check_tree(any_store)

    assert await urm.mark_replicated(lock)
    assert await urm.get(1) is None
    assert await urm.lock_owner(1) is None
    # Ledger 1's own directory went; the ones it shares with ledger 2 stay.
    assert await any_store.children(f"{BASE}/ledgers/0000/0000/0000") == ["0002"]
    lock2 = await urm.lock_next("w2")
    assert lock2 is not None
    assert lock2.ledger_id == 2
    assert await urm.mark_replicated(lock2)
    assert await any_store.children(f"{BASE}/ledgers") == []
    assert await check_tree(any_store) == {}
    assert not await urm.mark_replicated(lock2)  # done already: nothing happens


async def test_a_re_mark_while_locked_keeps_the_mark(any_store: MetadataStore) -> None:
    urm = manager(any_store)
    await urm.mark_under_replicated(7, ["b1"])
    lock = await urm.try_lock(7, "w")
    assert lock is not None
    await urm.mark_under_replicated(7, ["b2"])  # another bookie lost while replicating
    assert not await urm.mark_replicated(lock)
    mark = await urm.get(7)
    assert mark is not None
    assert mark.replicas == ("b1", "b2")
    assert await urm.lock_owner(7) is None  # the lock is released all the same
    again = await urm.lock_next("w")
    assert again == LedgerLock(7, 1, "w", any_store.session_id)
    assert await urm.mark_replicated(again)
    assert await check_tree(any_store) == {}


async def test_stale_locks_touch_nothing(any_store: MetadataStore) -> None:
    urm = manager(any_store)
    await urm.mark_under_replicated(3, ["b"])
    first = await urm.try_lock(3, "w1")
    assert first is not None
    await urm.release(first)
    assert await urm.get(3) is not None  # releasing leaves the mark
    second = await urm.try_lock(3, "w2")
    assert second is not None
    # w1's lock is gone: releasing it or reporting it replicated must not undo w2's.
    await urm.release(first)
    assert not await urm.mark_replicated(first)
    assert await urm.lock_owner(3) == "w2"
    assert await urm.get(3) is not None
    await check_tree(any_store)


async def test_lock_next_takes_free_marks_only(any_store: MetadataStore) -> None:
    urm = manager(any_store)
    assert await urm.lock_next("w") is None
    for ledger_id in range(5):
        await urm.mark_under_replicated(ledger_id, ["b"])
    taken = set()
    while (lock := await urm.lock_next("w", skip={3})) is not None:
        taken.add(lock.ledger_id)
    assert taken == {0, 1, 2, 4}
    assert [await urm.lock_owner(i) for i in range(5)] == ["w", "w", "w", None, "w"]
    lock = await urm.lock_next("other")
    assert lock is not None
    assert lock.ledger_id == 3
    await check_tree(any_store)


async def test_a_dead_workers_lock_goes_with_its_session(backend: Backend) -> None:
    async with backend.open() as store, backend.open() as dying:
        urm = manager(store)
        await urm.mark_under_replicated(9, ["b"])
        theirs = await manager(dying).try_lock(9, "dead")
        assert theirs is not None
        assert await urm.lock_next("alive") is None
        await dying.close()  # the process ends: its session's lock with it
        lock = await urm.lock_next("alive")
        assert lock is not None
        assert lock.ledger_id == 9
        assert await urm.mark_replicated(lock)
        assert await check_tree(store) == {}


async def test_an_expired_lock_is_someone_elses_afterwards(backend: Backend) -> None:
    async with backend.open() as store, backend.open() as stalled:
        assert isinstance(stalled, SqliteStore | ZkStore)
        urm, slow = manager(store), manager(stalled)
        await urm.mark_under_replicated(4, ["b"])
        old = await slow.try_lock(4, "w")
        assert old is not None
        await stalled.expire_session()
        with trio.fail_after(15):
            while (new := await urm.lock_next("w")) is None:
                await urm.wait_for_marks()  # the lock's going is news
        # Same owner name, another session: the stalled worker's token is not the lock.
        assert not await slow.mark_replicated(old)
        await slow.release(old)
        assert await urm.lock_owner(4) == "w"
        assert await urm.get(4) is not None
        assert await urm.mark_replicated(new)


# --- races and lost replies, injected ------------------------------------------------------


class Bent(ForwardingStore):
    """A memory store whose next call of one kind, on a path passing ``when``, runs ``hook``
    first (another client acting meanwhile) and/or applies then loses its reply."""

    def __init__(self) -> None:
        super().__init__(MemoryStore())
        self.op = ""
        self.when: Callable[[str], bool] = lambda _path: False
        self.hook: Callable[[], Awaitable[object]] | None = None
        self.fail_before: type[Exception] | None = None
        self.lose_reply = False

    def bend(
        self,
        op: str,
        when: Callable[[str], bool],
        *,
        hook: Callable[[], Awaitable[object]] | None = None,
        fail_before: type[Exception] | None = None,
        lose_reply: bool = False,
    ) -> None:
        self.op, self.when, self.hook = op, when, hook
        self.fail_before, self.lose_reply = fail_before, lose_reply

    async def _bent(self, op: str, path: str) -> bool:
        if op != self.op or not self.when(path):
            return False
        self.op = ""  # once
        if self.hook is not None:
            await self.hook()
        if self.fail_before is not None:
            raise self.fail_before(path)
        return self.lose_reply

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        lose = await self._bent("create", path)
        made = await self.inner.create(
            path, value, ephemeral=ephemeral, sequential=sequential, make_parents=make_parents
        )
        if lose:
            raise StoreUnavailableError(f"{path}: connection lost")
        return made

    async def delete(self, path: str, expected_version: int = -1) -> None:
        lose = await self._bent("delete", path)
        await self.inner.delete(path, expected_version)
        if lose:
            raise StoreUnavailableError(f"{path}: connection lost")


async def test_a_lock_whose_reply_was_lost_is_ours_not_leaked() -> None:
    store = Bent()
    urm = manager(store)
    await urm.mark_under_replicated(1, ["b"])
    store.bend("create", lambda p: "/locks/" in p, lose_reply=True)
    lock = await urm.try_lock(1, "w")
    assert lock == LedgerLock(1, 0, "w", store.session_id)
    assert await urm.mark_replicated(lock)
    assert await check_tree(store) == {}
    # Lost before it was made: the caller hears of it, and nothing is held.
    await urm.mark_under_replicated(1, ["b"])
    store.bend("create", lambda p: "/locks/" in p, fail_before=StoreUnavailableError)
    with pytest.raises(StoreUnavailableError):
        await urm.try_lock(1, "w")
    assert await urm.lock_owner(1) is None


async def test_a_pruning_cut_short_is_finished_by_the_next_scan() -> None:
    store = Bent()
    urm = manager(store)
    await urm.mark_under_replicated(1, ["b"])
    lock = await urm.try_lock(1, "w")
    assert lock is not None
    store.bend("delete", lambda p: p.endswith("urL0000000001"), lose_reply=True)
    with pytest.raises(StoreUnavailableError):
        await urm.mark_replicated(lock)
    assert await urm.lock_owner(1) is None  # released all the same, as upstream does
    assert await urm.get(1) is None
    with pytest.raises(AssertionError, match="empty directory left behind"):
        await check_tree(store)
    assert await urm.lock_next("w") is None  # a worker's scan tidies up
    assert await check_tree(store) == {}
    # A retry of the same token, had the lock still been held, prunes as well.
    await urm.mark_under_replicated(2, ["b"])
    lock = await urm.try_lock(2, "w")
    assert lock is not None
    await store.inner.delete(mark_path(ROOT, 2))
    assert not await urm.mark_replicated(lock)
    assert await check_tree(store) == {}


async def test_a_mark_made_while_its_parents_are_pruned() -> None:
    store = Bent()
    urm, other = manager(store), manager(store.inner)
    await urm.mark_under_replicated(1, ["b"])
    lock = await urm.try_lock(1, "w")
    assert lock is not None
    # Ledger 2 is marked just as ledger 1's replication prunes their shared directories.
    store.bend(
        "delete",
        lambda p: p.endswith("/0000/0000/0000"),
        hook=lambda: other.mark_under_replicated(2, ["b"]),
    )
    assert await urm.mark_replicated(lock)
    assert set(await check_tree(store)) == {2}
    # The other way round: a directory made for a mark is pruned before the mark lands.
    store.bend("create", lambda p: p.endswith("urL0000000003"), fail_before=NoNodeError)
    await urm.mark_under_replicated(3, ["b"])
    assert set(await check_tree(store)) == {2, 3}


# --- waiting for marks -------------------------------------------------------------------------


async def _later(delay: float, fn: object, *args: object) -> None:
    await trio.sleep(delay)
    assert callable(fn)
    await fn(*args)


async def test_wait_for_marks_wakes_on_news_only(any_store: MetadataStore) -> None:
    urm = manager(any_store)
    await urm.wait_for_marks()  # no scan yet: returns at once
    assert await urm.lock_next("w") is None
    with trio.move_on_after(0.3) as idle:
        await urm.wait_for_marks()
    assert idle.cancelled_caught  # nothing changed since the scan
    # A mark made between the scan and the wait is not missed.
    await urm.mark_under_replicated(70000, ["b"])
    with trio.fail_after(5):
        await urm.wait_for_marks()
    lock = await urm.lock_next("w")
    assert lock is not None
    # A mark made during the wait, under directories that exist, and one under new ones.
    for ledger_id in (70001, 2**40):
        assert await urm.lock_next("w") is None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_later, 0.2, urm.mark_under_replicated, ledger_id, ["b"])
            with trio.fail_after(5):
                await urm.wait_for_marks()
        taken = await urm.lock_next("w")
        assert taken is not None
        assert taken.ledger_id == ledger_id
    # A lock released (a worker gave up) is news too.
    assert await urm.lock_next("x") is None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_later, 0.2, urm.release, lock)
        with trio.fail_after(5):
            await urm.wait_for_marks()
    again = await urm.lock_next("x")
    assert again is not None
    assert again.ledger_id == 70000


async def test_a_lock_taken_elsewhere_is_no_news(any_store: MetadataStore) -> None:
    """Idle workers do not rescan for every lock another takes (with many unhealable marks
    that made them spin); the release of a lock they saw taken still wakes them."""
    urm = manager(any_store)
    other = manager(any_store)
    for ledger_id in (1, 2):
        await urm.mark_under_replicated(ledger_id, ["b"])
    first = await other.try_lock(1, "other")
    assert first is not None
    mine = await urm.lock_next("w")
    assert mine is not None
    assert mine.ledger_id == 2
    await urm.release(mine)
    assert await urm.lock_next("w", skip={2}) is None  # as a worker backing off from 2
    async with trio.open_nursery() as nursery:
        # The free mark taken by the other worker: nothing for us to do.
        nursery.start_soon(_later, 0.1, other.try_lock, 2, "other")
        with trio.move_on_after(0.6) as idle:
            await urm.wait_for_marks()
    assert idle.cancelled_caught
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_later, 0.2, other.release, first)
        with trio.fail_after(5):
            await urm.wait_for_marks()
    again = await urm.lock_next("w")
    assert again is not None
    assert again.ledger_id == 1


# --- the flag, the delay, the ctime ----------------------------------------------------------


async def test_disable_and_enable(any_store: MetadataStore) -> None:
    urm = manager(any_store)
    assert await urm.is_enabled()
    await urm.wait_until_enabled()
    assert await urm.disable()
    assert not await urm.disable()  # upstream's shell: "already disabled"
    assert not await urm.is_enabled()
    node = await any_store.get(f"{BASE}/disable")
    assert node is not None
    assert node.value == b""
    assert node.ephemeral_owner == 0
    with trio.move_on_after(0.2) as waited:
        await urm.wait_until_enabled()
    assert waited.cancelled_caught
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_later, 0.1, urm.enable)
        with trio.fail_after(5):
            await urm.wait_until_enabled()
    assert await urm.is_enabled()
    assert not await urm.enable()


async def test_lost_bookie_recovery_delay(any_store: MetadataStore) -> None:
    urm = manager(any_store)
    assert await urm.get_lost_bookie_recovery_delay() is None
    async with urm.watch_lost_bookie_recovery_delay() as values:
        with trio.fail_after(10):
            assert await anext(values) is None
            assert await urm.initialize_lost_bookie_recovery_delay(30)
            assert await anext(values) == 30
            assert not await urm.initialize_lost_bookie_recovery_delay(60)  # the cluster's wins
            await urm.set_lost_bookie_recovery_delay(30)  # triggeraudit: the same value again
            assert await anext(values) == 30
            await urm.set_lost_bookie_recovery_delay(0)
            assert await anext(values) == 0
            await any_store.set(f"{BASE}/lostBookieRecoveryDelay", b"soon", -1)
            assert await anext(values) is None  # unreadable: logged, not fatal to the watcher
    node = await any_store.get(f"{BASE}/lostBookieRecoveryDelay")
    assert node is not None
    assert node.value == b"soon"
    with pytest.raises(UnderReplicationFormatError, match="lostBookieRecoveryDelay: not a"):
        await urm.get_lost_bookie_recovery_delay()
    await urm.set_lost_bookie_recovery_delay(-5)
    assert await urm.get_lost_bookie_recovery_delay() == -5


async def test_check_all_ledgers_ctime(any_store: MetadataStore) -> None:
    urm = manager(any_store)
    assert await urm.get_check_all_ledgers_ctime() is None
    await urm.set_check_all_ledgers_ctime(1795529350202)
    await urm.set_check_all_ledgers_ctime(1795529350203)
    assert await urm.get_check_all_ledgers_ctime() == 1795529350203
    node = await any_store.get(f"{BASE}/checkallledgersctime")
    assert node is not None
    # Binary, as upstream writes it: field 1 as a varint, 7 bits a byte, low bits first.
    n, varint = 1795529350203, b""
    while n >= 0x80:
        varint, n = varint + bytes([n & 0x7F | 0x80]), n >> 7
    assert node.value == b"\x08" + varint + bytes([n])


# --- the election ------------------------------------------------------------------------------


async def test_election_in_one_session(any_store: MetadataStore) -> None:
    urm = manager(any_store)
    assert await urm.auditor() is None
    first = await urm.volunteer("127.0.0.1:3181")
    second = await urm.volunteer("127.0.0.1:3182")
    assert first == f"{BASE}/auditorelection/V_0000000000"
    assert second == f"{BASE}/auditorelection/V_0000000001"
    assert await urm.auditor() == "127.0.0.1:3181"
    assert not await urm.elected(second)
    assert await urm.elected(first)
    election = await any_store.get(f"{BASE}/auditorelection")
    assert election is not None
    assert (election.value, election.version) == (b'bookieId: "127.0.0.1:3181"\n', 1)
    assert await urm.elected(first)  # asked again: not written again
    election = await any_store.get(f"{BASE}/auditorelection")
    assert election is not None
    assert election.version == 1
    async with urm.watch_election() as changes:
        with trio.fail_after(10):
            await anext(changes)
            # The election node's data changes nobody's standing: no news.
            await any_store.set(f"{BASE}/auditorelection", b"", -1)
            with trio.move_on_after(0.3) as quiet:
                await anext(changes)
            assert quiet.cancelled_caught
            await urm.withdraw(first)
            await anext(changes)
    assert await urm.auditor() == "127.0.0.1:3182"
    assert await urm.elected(second)
    election = await any_store.get(f"{BASE}/auditorelection")
    assert election is not None
    assert election.value == b'bookieId: "127.0.0.1:3182"\n'
    with pytest.raises(NoNodeError, match="V_0000000000: auditor vote is gone"):
        await urm.elected(first)
    await urm.withdraw(first)  # twice: nothing


async def test_two_candidates_in_two_sessions(backend: Backend) -> None:
    async with backend.open() as a_store, backend.open() as b_store:
        a, b = manager(a_store), manager(b_store)
        vote_a = await a.volunteer("same:3181")
        vote_b = await b.volunteer("same:3181")  # two auditors started at once, same id
        assert [await a.elected(vote_a), await b.elected(vote_b)] == [True, False]
        node = await a_store.get(vote_a)
        assert node is not None
        assert node.ephemeral_owner == a_store.session_id
        async with b.watch_election() as changes:
            with trio.fail_after(10):
                await anext(changes)
                await a_store.close()  # the auditor's process ends
                while not await b.elected(vote_b):
                    await anext(changes)
        assert await b.auditor() == "same:3181"


# --- the state machine ------------------------------------------------------------------------

LEDGERS = st.sampled_from([0, 1, 2, 65536, 2**40 + 1])
OWNERS = st.sampled_from(["w1", "w2"])
REPLICAS = st.lists(st.sampled_from(["a", "b", "c"]), max_size=3)


class Model:
    """What the store should hold: each mark's replicas, time and version; each held lock."""

    def __init__(self) -> None:
        self.marks: dict[int, tuple[tuple[str, ...], int, int]] = {}
        self.held: dict[int, LedgerLock] = {}


class UnderReplicationMachine(RuleBasedStateMachine):
    """Marks, re-marks, locks from two owners, releases and replications in any order, with
    stale lock tokens thrown in; the store checked against the model after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.driver = TrioThread()
        self.store = self.driver.start(self.open_store)
        self.clock = Clock(0)
        self.urm = UnderReplicationManager(self.store, now_ms=self.clock, rng=random.Random(1))
        self.model = Model()
        self.stale: list[LedgerLock] = []
        self.time = 0

    def open_store(self) -> AbstractAsyncContextManager[MetadataStore]:
        return opened(None)

    def teardown(self) -> None:
        self.driver.stop()

    @rule(ledger_id=LEDGERS, replicas=REPLICAS)
    def mark(self, ledger_id: int, replicas: list[str]) -> None:
        self.driver.run(self.urm.mark_under_replicated, ledger_id, replicas)
        now, self.time = self.time, self.time + 1  # one clock read per call: nothing races
        new = list(dict.fromkeys(replicas))
        if ledger_id not in self.model.marks:
            self.model.marks[ledger_id] = (tuple(new), now, 0)
            return
        old, _, version = self.model.marks[ledger_id]
        added = tuple(r for r in new if r not in old)
        if added:
            self.model.marks[ledger_id] = (old + added, now, version + 1)

    @rule(owner=OWNERS, skip=st.sets(LEDGERS, max_size=2))
    def lock_next(self, owner: str, skip: set[int]) -> None:
        lock = self.driver.run(lambda: self.urm.lock_next(owner, skip=skip))
        free = set(self.model.marks) - set(self.model.held) - skip
        if lock is None:
            assert not free
            return
        assert lock.ledger_id in free
        assert lock.mark_version == self.model.marks[lock.ledger_id][2]
        self.model.held[lock.ledger_id] = lock

    @rule(owner=OWNERS, ledger_id=LEDGERS)
    def try_lock(self, owner: str, ledger_id: int) -> None:
        lock = self.driver.run(self.urm.try_lock, ledger_id, owner)
        expected = ledger_id in self.model.marks and ledger_id not in self.model.held
        assert (lock is not None) == expected
        if lock is not None:
            self.model.held[ledger_id] = lock

    @precondition(lambda self: self.model.held)
    @rule(data=st.data())
    def mark_replicated(self, data: st.DataObject) -> None:
        ledger_id = data.draw(st.sampled_from(sorted(self.model.held)))
        lock = self.model.held.pop(ledger_id)
        removed = self.driver.run(self.urm.mark_replicated, lock)
        assert removed == (self.model.marks[ledger_id][2] == lock.mark_version)
        if removed:
            del self.model.marks[ledger_id]
        self.stale.append(lock)

    @precondition(lambda self: self.model.held)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        ledger_id = data.draw(st.sampled_from(sorted(self.model.held)))
        lock = self.model.held.pop(ledger_id)
        self.driver.run(self.urm.release, lock)
        self.stale.append(lock)

    @precondition(lambda self: self.stale)
    @rule(data=st.data())
    def stale_token(self, data: st.DataObject) -> None:
        # A token whose lock is gone. (The same owner holding the same ledger again in the
        # same session has the same token: that one acts as the holder, by design.)
        lock = data.draw(st.sampled_from(self.stale))
        current = self.model.held.get(lock.ledger_id)
        if current is not None and current.owner == lock.owner:
            return
        assert not self.driver.run(self.urm.mark_replicated, lock)
        self.driver.run(self.urm.release, lock)

    @invariant()
    def store_matches_model(self) -> None:
        marks = self.driver.run(check_tree, self.store)
        assert set(marks) == set(self.model.marks)
        for ledger_id, (replicas, ctime, _) in self.model.marks.items():
            assert decode_mark(marks[ledger_id]) == (replicas, ctime)
        owners = {i: self.driver.run(self.urm.lock_owner, i) for i in self.model.marks}
        held = self.model.held
        assert owners == {i: (held[i].owner if i in held else None) for i in self.model.marks}
        listed = self.driver.run(self.urm.under_replicated)
        assert [m.ledger_id for m in listed] == sorted(self.model.marks)
        assert self.driver.run(self.urm.count) == len(self.model.marks)


TestUnderReplicationMachine = UnderReplicationMachine.TestCase
TestUnderReplicationMachine.settings = settings(stateful_step_count=30)


class UnderReplicationMachineOnSqlite(UnderReplicationMachine):
    def open_store(self) -> AbstractAsyncContextManager[MetadataStore]:
        # Each run starts from an empty tree: its own database file.
        path = Path(tempfile.mkdtemp(prefix="urm-machine-")) / "meta.db"
        return opened(Backend("sqlite", f"sqlite://{path}", session_timeout=5.0))

    def teardown(self) -> None:
        super().teardown()
        shutil.rmtree(Path(self.store.uri.removeprefix("sqlite://")).parent, ignore_errors=True)


TestUnderReplicationMachineOnSqlite = UnderReplicationMachineOnSqlite.TestCase
# Fewer, shorter runs: every step is a few SQLite transactions in a worker thread.
TestUnderReplicationMachineOnSqlite.settings = settings(max_examples=8, stateful_step_count=15)
