"""Under-replicated ledgers, their locks, the enable flag and the auditor election, in the store.

Theory of operation
-------------------
Auto-recovery is two roles sharing state through the metadata store, as upstream's
``ZkLedgerUnderreplicationManager`` and ``ZkLedgerAuditorManager`` have them (the records and
paths are in :mod:`.underreplication_format`):

* The **auditor** (one at a time) *marks* a ledger under-replicated when some of its
  bookies are lost: a persistent node per ledger naming the missing replicas and when it was
  marked. Marking a ledger that is already marked merges the new replicas into the mark by
  compare-and-set; when a replica is added the mark time becomes now (upstream's
  ``storeSystemTimeAsLedgerUnderreplicatedMarkTime``, on by default), when none is the mark
  is left alone.
* **Workers** take a mark under its **lock**: an *ephemeral* node of the worker's store
  session, so a worker that dies or stalls past its session timeout leaves the mark to
  another. The lock remembers the mark's version when it was taken. When the ledger is
  replicated, :meth:`UnderReplicationManager.mark_replicated` deletes the mark *only at that
  version*: if the auditor re-marked the ledger meanwhile (another bookie lost) the mark
  stays, so the ledger is looked at again. Then the mark's now empty parent directories are
  pruned, and the lock released.

The rest — the layout, the ``disable`` flag, ``lostBookieRecoveryDelay``, the auditor
election, the time of the last check of all ledgers — is the base class's, in
:mod:`.underreplication_control`.

Nothing is kept in memory between calls but a view of the marks and locks last scanned, which
:meth:`UnderReplicationManager.wait_for_marks` compares with to close the race between a scan
that found nothing and the wait that follows it. A :class:`LedgerLock` is a token: it names
the ledger, the mark version seen, and which owner and session took it, so releasing a lock
that expired and was taken by someone else leaves theirs in place.

Works on every :class:`~.store.MetadataStore`; every write first makes sure the layout exists.
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from bookiesim.metadata.errors import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    StoreUnavailableError,
)
from bookiesim.metadata.store import MetadataStore, Versioned, join_path, parent_path
from bookiesim.metadata.underreplication_control import (
    UnderReplicationControl,
)
from bookiesim.metadata.underreplication_format import (
    MARK_DEPTH,
    UnderReplicationFormatError,
    decode_lock,
    decode_mark,
    encode_lock,
    encode_mark,
    ledger_id_of_mark,
    lock_name,
    lock_path,
    mark_dirs,
    mark_path,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable

__all__ = ["LedgerLock", "UnderReplicatedLedger", "UnderReplicationManager"]


@dataclass(frozen=True)
class UnderReplicatedLedger:
    """One mark: the ledger, its missing replicas (bookie ids) and when it was marked (ms
    since the epoch; None when the marker did not say)."""

    ledger_id: int
    replicas: tuple[str, ...]
    ctime_ms: int | None


@dataclass(frozen=True)
class LedgerLock:
    """A held lock on a ledger's mark (see the module docstring)."""

    ledger_id: int
    mark_version: int
    """The mark's version when the lock was taken: only that version is deleted."""
    owner: str = ""
    session_id: int = 0
    """The store session whose ephemeral node the lock is."""


@dataclass(frozen=True)
class _Scan:
    marks: frozenset[int]
    locks: frozenset[str]

    def news_since(self, before: _Scan) -> bool:
        """Whether someone who scanned ``before`` has something new to look at: marks came
        or went, or a mark locked then is free now. A lock another worker took is no news:
        waking for it made idle workers rescan for every lock taken anywhere."""
        if self.marks != before.marks:
            return True
        freed = before.locks - self.locks
        return any(lock_name(i) in freed for i in self.marks)


class _Wake:
    """What :meth:`UnderReplicationManager.wait_for_marks`'s watches tell its loop: the
    event of this round, and whether the tree must be walked again (first round: yes)."""

    def __init__(self) -> None:
        self.event = trio.Event()
        self.tree = True


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class UnderReplicationManager(UnderReplicationControl):
    """Upstream's under-replication manager (and, by its base, the auditor election) on any
    metadata store.

    ``store_mark_time`` is upstream's ``storeSystemTimeAsLedgerUnderreplicatedMarkTime``;
    ``now_ms`` (wall-clock milliseconds) and ``rng`` (which mark a worker tries first, as
    upstream shuffles) are there for deterministic runs.
    """

    def __init__(
        self,
        store: MetadataStore,
        root: str | None = None,
        *,
        store_mark_time: bool = True,
        now_ms: Callable[[], int] = _wall_clock_ms,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(store, root)
        self._store_mark_time = store_mark_time
        self._now_ms = now_ms
        self._rng = rng or random.Random()
        self._last_scan: _Scan | None = None

    # --- marks --------------------------------------------------------------------------

    async def mark_under_replicated(self, ledger_id: int, missing_replicas: Iterable[str]) -> None:
        """Mark the ledger, or merge replicas not yet named into its mark (compare-and-set;
        the mark time becomes now when a replica is added, if marks carry times)."""
        missing = list(dict.fromkeys(missing_replicas))
        path = mark_path(self._root, ledger_id)
        await self._writable()
        while True:
            now = self._now_ms() if self._store_mark_time else None
            try:
                await self._store.create(path, encode_mark(missing, now), make_parents=True)
                return
            except (NodeExistsError, NoNodeError):
                pass  # already marked; or a parent was pruned under us: look again
            node = await self._store.get(path)
            if node is None:
                continue
            replicas, ctime = decode_mark(node.value, path)
            added = [r for r in missing if r not in replicas]
            if not added:
                return
            ctime = now if self._store_mark_time else ctime
            try:
                await self._store.set(path, encode_mark((*replicas, *added), ctime), node.version)
                return
            except (BadVersionError, NoNodeError):
                continue

    async def get(self, ledger_id: int) -> UnderReplicatedLedger | None:
        """The ledger's mark, or None if it is not marked."""
        path = mark_path(self._root, ledger_id)
        node = await self._store.get(path)
        if node is None:
            return None
        replicas, ctime = decode_mark(node.value, path)
        return UnderReplicatedLedger(ledger_id, replicas, ctime)

    async def under_replicated(self) -> list[UnderReplicatedLedger]:
        """Every mark, by ledger id."""
        marks, _, _ = await self._walk()
        self._last_scan = _Scan(frozenset(marks), frozenset(await self._lock_names()))
        found = [m for m in [await self.get(ledger_id) for ledger_id in sorted(marks)] if m]
        return found

    async def count(self) -> int:
        """How many ledgers are marked (without reading the marks)."""
        marks, _, _ = await self._walk()
        return len(marks)

    async def _walk(self) -> tuple[list[int], list[str], list[str]]:
        """The marked ledger ids; the directories whose child lists a new mark changes
        (``ledgers/`` and the hex levels above the innermost, plus innermost directories
        that hold no mark); and the directories with no child at all: transient (a mark
        being made or pruned) or left by a pruning cut short by a lost reply."""
        marks: list[int] = []
        dirs: list[str] = []
        empty: list[str] = []
        level = [self._ledgers]
        for depth in range(MARK_DEPTH + 1):
            below: list[str] = []
            for path in level:
                try:
                    names = await self._store.children(path)
                except NoNodeError:
                    continue  # pruned while we walked
                if depth and not names:
                    empty.append(path)
                if depth < MARK_DEPTH:
                    dirs.append(path)
                    below.extend(join_path(path, name) for name in names)
                    continue
                ids = [ledger_id_of_mark(name) for name in names]
                # A mark counts only in its own directory (the walk's hot spot: no full path).
                held = [i for i in ids if i is not None and path.endswith(mark_dirs(i))]
                marks.extend(held)
                if not held:
                    dirs.append(path)
            level = below
        return marks, dirs, empty

    # --- locks --------------------------------------------------------------------------

    async def _lock_names(self) -> list[str]:
        try:
            return await self._store.children(self._locks)
        except NoNodeError:
            return []

    async def try_lock(self, ledger_id: int, owner: str) -> LedgerLock | None:
        """Lock the ledger's mark for ``owner``; None if another holds the lock or the ledger
        is not marked."""
        mark = mark_path(self._root, ledger_id)
        if await self._store.get(mark) is None:
            return None
        await self._writable()
        path = lock_path(self._root, ledger_id)
        try:
            await self._store.create(path, encode_lock(owner), ephemeral=True, make_parents=True)
        except NodeExistsError:
            return None
        except StoreUnavailableError:
            # ZooKeeper may have made the lock before the reply was lost: unless it is ours,
            # let the caller retry; if it is, give it back rather than leak it for a session.
            if await self._held(LedgerLock(ledger_id, -1, owner, self._store.session_id)) is None:
                raise
        lock = LedgerLock(ledger_id, -1, owner, self._store.session_id)
        node = await self._store.get(mark)  # read after locking: replicated meanwhile?
        if node is None:
            await self.release(lock)
            return None
        return LedgerLock(ledger_id, node.version, owner, lock.session_id)

    async def lock_next(self, owner: str, *, skip: Collection[int] = ()) -> LedgerLock | None:
        """Lock some marked ledger that nobody holds and that is not in ``skip`` (tried in
        random order, so that workers spread); None if there is none now."""
        marks, _, empty = await self._walk()
        for path in empty:  # workers tidy up what a pruning cut short left behind
            await self._prune(path)
        locks = await self._lock_names()
        held = set(locks)
        free = [i for i in marks if i not in skip and lock_name(i) not in held]
        self._rng.shuffle(free)
        taken: set[str] = set()
        try:
            for ledger_id in free:
                lock = await self.try_lock(ledger_id, owner)
                if lock is not None:
                    return lock
                taken.add(lock_name(ledger_id))
            return None
        finally:
            # A mark another worker locked between the scan and our try counts as locked
            # then: its release is news for wait_for_marks.
            self._last_scan = _Scan(frozenset(marks), frozenset(locks) | taken)

    async def wait_for_marks(self) -> None:
        """Return when there is news since this manager's last scan (:meth:`lock_next`,
        :meth:`under_replicated`): marks came or went, or a mark locked then is free now; at
        once if there was no scan or the tree already differs so. May still return with
        nothing a caller can lock (a freed mark locked again at once): scan again and loop.

        Each directory stays watched until the news comes (ZooKeeper-style watches on the
        mark tree's directories and on the locks): a lock taken or given up elsewhere
        re-reads the locks alone, and only a change of the tree walks it again. Walking and
        re-arming every watch on each such wake-up made every lock any worker took cost
        each idle worker a walk of the tree."""
        wake = _Wake()
        async with trio.open_nursery() as nursery:
            watched: set[str] = set()
            marks: list[int] = []
            while True:
                wake.event = trio.Event()  # changes from here on wake the wait below
                while wake.tree:  # walk, and watch what the walk found, until it holds still
                    wake.tree = False
                    marks, dirs, _ = await self._walk()
                    for path in [*dirs, self._locks]:
                        if path not in watched:
                            watched.add(path)
                            await nursery.start(self._watch, path, wake, path != self._locks)
                now = _Scan(frozenset(marks), frozenset(await self._lock_names()))
                if self._last_scan is None or now.news_since(self._last_scan):
                    nursery.cancel_scope.cancel()
                    return
                await wake.event.wait()

    async def _watch(
        self,
        path: str,
        wake: _Wake,
        in_tree: bool,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Until cancelled: each change of ``path`` after the first reading sets
        ``wake.event``, and ``wake.tree`` for a directory of the mark tree (the walk must
        be done again)."""
        async with self._store.watch(path) as changes:
            await anext(changes)  # the state now: from here on, any change is news
            task_status.started()
            async for _ in changes:
                if in_tree:
                    wake.tree = True
                wake.event.set()

    async def mark_replicated(self, lock: LedgerLock) -> bool:
        """The ledger is replicated: delete its mark if still at the version seen when locked
        (a re-mark since then stays, to be looked at again), prune its empty parents, and
        release the lock. True if the mark was deleted. A lock no longer held (released, or
        expired with its session) deletes nothing: the mark is its new holder's."""
        held = await self._held(lock)
        if held is None:
            return False
        path = mark_path(self._root, lock.ledger_id)
        try:
            try:
                await self._store.delete(path, lock.mark_version)
            except BadVersionError:
                return False
            except NoNodeError:
                # Gone already (a retry after a lost reply?): its parents may still be there.
                await self._prune(parent_path(path))
                return False
            await self._prune(parent_path(path))
            return True
        finally:
            await self._unlock(lock, held)

    async def _prune(self, directory: str) -> None:
        """Delete ``directory`` and then each parent below ``ledgers/`` while empty."""
        while directory != self._ledgers:
            node = await self._store.get(directory)
            if node is not None:
                try:
                    await self._store.delete(directory, node.version)
                except NoNodeError:
                    pass
                except (NotEmptyError, BadVersionError):
                    return  # another ledger's mark lives below: the rest is not empty either
            directory = parent_path(directory)

    async def release(self, lock: LedgerLock) -> None:
        """Give the lock up without touching the mark. Does nothing if the lock is no longer
        this one (expired with its session, and maybe taken by another owner since)."""
        held = await self._held(lock)
        if held is not None:
            await self._unlock(lock, held)

    async def _held(self, lock: LedgerLock) -> Versioned | None:
        """The lock's node if it is still this lock: same session, same owner."""
        path = lock_path(self._root, lock.ledger_id)
        node = await self._store.get(path)
        if node is None or (lock.session_id and node.ephemeral_owner != lock.session_id):
            return None
        try:
            return node if decode_lock(node.value, path) == lock.owner else None
        except UnderReplicationFormatError:
            return None  # not a lock we wrote

    async def _unlock(self, lock: LedgerLock, held: Versioned) -> None:
        with contextlib.suppress(NoNodeError, BadVersionError):
            await self._store.delete(lock_path(self._root, lock.ledger_id), held.version)

    async def lock_owner(self, ledger_id: int) -> str | None:
        """Who holds the ledger's lock ("" if the lock names nobody), None if unlocked."""
        path = lock_path(self._root, ledger_id)
        node = await self._store.get(path)
        if node is None:
            return None
        return decode_lock(node.value, path) or ""
