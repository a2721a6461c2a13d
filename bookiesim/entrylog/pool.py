"""The preallocation pool: empty entry log files created ahead of need.

``entryLogPreallocationPoolSize`` (bookiesim) says where the preallocated log comes from.
Under churn (10,000 ledgers, 500 active) nearly every add needs a new log, and creating a
file (``O_CREAT`` plus the ``lastId`` rewrite: 25 us to over 1 ms on these disks) on the add
path capped the bookie at a few thousand adds/s. So files are created ahead of need, off the
owner thread: :meth:`PreallocationPool.fill` (blocking, thread-safe) allocates a batch of
ids — one ``lastId`` write for the batch — registers them unflushed, and creates each file
empty with ``mknod`` (never opened): pooled logs hold no descriptor and no buffer, so the
bound on write descriptors stays ``maximumNumberOfActiveEntryLogs + 1``. Taking one costs an
``open`` of an existing file. The bookie runs ``preallocate_some`` in a worker thread from a
trio task that :meth:`~PreallocationPool.notify_when_needed` wakes when the pool falls to
half its size. With no pooled log at hand the owner creates the log itself, as before
(correctness first): under an id of the batch being made if there is one (no ``lastId``
write then), else under a new one. Nobody refilling is fine too (pool size 0, tests).
Pooled and reserved logs are registered unflushed like upstream's single preallocated log,
so they pin leastUnflushedLogId the same way: the pointer stays at or below the oldest of
them, up to ``pool size + 1`` ids behind the newest log even on an idle bookie. Closing the
file set deletes the pooled files. After a crash they stay behind as empty ``.log`` files;
restart never reuses their ids (the allocator skips existing files, and ``lastId`` named the
whole batch before any file of it was made).

What the pool cannot do: raise the file system's creation rate (on these VMs it swings
between ~1,000 and ~50,000 files/s, and sustained churn needs one file per add), or give the
worker thread the GIL while the trio thread is saturated (CPython hands it over at most
every switch interval, 5 ms, so a busy bookie still creates most logs on the add path). It
takes creation latency off adds when the trio thread has slack, and overlaps creations that
block in the kernel.

In life-cycle terms (:mod:`bookiesim.entrylog.lifecycle`) the pool holds the RESERVED logs
(:attr:`PreallocationPool.reserved`, plus those whose file is being made) and the POOLED
ones; it moves them through its owner, which keeps the one state map.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections import deque
from typing import TYPE_CHECKING, Protocol

from bookiesim.entrylog.format import log_file_name

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Sequence

__all__ = ["PoolOwner", "PreallocationPool"]

_log = logging.getLogger(__name__)


class PoolOwner(Protocol):
    """What the pool needs of the file set (:class:`~bookiesim.entrylog.log_files.LogFiles`).

    Every method is called with the shared io lock held.
    """

    look_ahead: bool
    """Whether the allocator stats every dir for an id's file before handing it out."""

    @property
    def closed(self) -> bool: ...

    def reserve_ids(self, count: int) -> list[int]:
        """Allocate ``count`` ids and register them unflushed (RESERVED). Raises
        ``OSError`` or ``RuntimeError`` if no id can be had."""
        ...

    def give_up(self, log_id: int, *, unused_file: bool = False) -> None:
        """DISCARD a reserved or pooled id: its file could not be made or is not ours
        (``unused_file`` False), or it is ours but nobody will use it (True)."""
        ...

    def file_created(self, dir_index: int, log_id: int) -> None:
        """A reserved id's file now exists in the dir (RESERVED -> POOLED)."""
        ...


class PreallocationPool:
    """Per ledger dir, the ids of created, empty, closed logs, oldest first; and the ids
    reserved for it whose files do not exist yet."""

    def __init__(
        self, owner: PoolOwner, dirs: Sequence[str], size: int, lock: threading.Lock
    ) -> None:
        if size < 0:
            raise ValueError(f"pool_size must be at least 0, not {size}")
        self.size = size
        """Target number of pooled logs (0: no pool, only upstream's preallocated log)."""
        self._owner = owner
        self._dirs = tuple(dirs)
        self._lock = lock
        self._pool: tuple[deque[int], ...] = tuple(deque() for _ in self._dirs)
        self._in_flight = [0] * len(self._dirs)
        self.reserved: deque[int] = deque()
        """Registered, ``lastId`` written, no file yet. Touch only under the io lock."""
        self._listener: Callable[[], None] | None = None
        self._paused = False

    # ---------------------------------------------------------------- queries

    def log_ids(self) -> list[int]:
        """Ids in the pool, per dir in order of use, dirs in order."""
        with self._lock:
            return [log_id for pool in self._pool for log_id in pool]

    def __contains__(self, log_id: int) -> bool:
        with self._lock:
            return any(log_id in pool for pool in self._pool)

    def has_log_in(self, dir_index: int) -> bool:
        return bool(self._pool[dir_index])

    def level(self) -> int:
        """Pooled, in-flight and reserved logs. Under the io lock."""
        return sum(map(len, self._pool)) + sum(self._in_flight) + len(self.reserved)

    def needs_filling(self) -> bool:
        """True if :meth:`fill` would create logs now (the pool is below its size, and the
        last attempt did not fail since a log was last taken)."""
        if self.size == 0 or self._owner.closed or self._paused:
            return False
        with self._lock:
            return self.level() < self.size

    # ---------------------------------------------------------------- the owner thread

    def notify_when_needed(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, on the owner thread, as soon as the pool runs low: at or
        below half its size after a log is taken (at once if it is already needed).
        Replaces a callback given before. It must not raise."""
        if self.needs_filling():
            self._listener = None
            callback()
        else:
            self._listener = callback

    def taken(self) -> None:
        """After a log was taken from the pool or created for want of one."""
        self._paused = False
        listener = self._listener
        if listener is not None and self.level() <= self.size // 2:
            self._listener = None
            listener()

    def take(self, dir_index: int) -> int | None:
        """The oldest pooled id of the dir (still POOLED: the caller opens it)."""
        pool = self._pool[dir_index]
        with self._lock:
            return pool.popleft() if pool else None

    def put_back(self, dir_index: int, log_id: int) -> None:
        """Return an id to the front of its dir's pool (its file is still empty)."""
        with self._lock:
            self._pool[dir_index].appendleft(log_id)

    def take_reserved(self) -> int | None:
        with self._lock:
            return self.reserved.popleft() if self.reserved else None

    def reserve(self, count: int) -> None:
        """Reserve ``count`` more ids for the pool. Under the io lock."""
        self.reserved.extend(self._owner.reserve_ids(count))

    def drain(self) -> list[tuple[int, int]]:
        """Empty the pool for closing; give up the reserved ids (no files yet; ``lastId``
        names them, so they are never reused). Returns (dir, id) of the pooled files, still
        POOLED: the caller deletes them. Under the io lock."""
        pooled = [(d, log_id) for d, pool in enumerate(self._pool) for log_id in pool]
        for pool in self._pool:
            pool.clear()
        while self.reserved:
            self._owner.give_up(self.reserved.popleft())
        self._listener = None
        return pooled

    # ---------------------------------------------------------------- any thread

    def fill(self, count: int | None = None) -> int:
        """Create up to ``count`` pooled logs (default: as many as the pool lacks); return
        how many were created. Blocking I/O, safe on any thread.

        The ids are allocated (``lastId`` written once for all), registered unflushed and
        queued as *reserved* under the io lock. Then, one at a time, an id is taken off that
        queue under the lock, its file created without it (``mknod``: exclusively, and never
        opened, so pooled logs hold no descriptor), and the log joins the pool under the lock
        again. The owner thread may take reserved ids too, when it needs a log and the pool
        is empty: it then creates the file itself, but is spared the ``lastId`` write. An id
        whose file exists already is given up. An ``OSError`` is logged, not raised, gives
        up the rest of the batch and pauses preallocation until a log is next taken
        (:meth:`needs_filling` is False meanwhile), so a full disk costs one attempt per new
        log, not a busy loop. If the owner closes meanwhile, files made after that are
        removed again.
        """
        owner = self._owner
        limit = self.size if count is None else count
        with self._lock:
            if owner.closed or self.size == 0 or limit <= 0:
                return 0
            self._paused = False  # asked explicitly: try again
            want = min(self.size - self.level(), limit)
            if want > 0:
                try:
                    self.reserve(want)
                except (OSError, RuntimeError):
                    self._paused = True
                    _log.warning("could not allocate ids to preallocate logs", exc_info=True)
                    return 0
        # Ids reserved by an earlier call still under way are made by whichever gets them.
        reserved = self.reserved
        created = 0
        while created < limit:
            with self._lock:
                if not reserved:
                    break
                log_id = reserved.popleft()
                # Spread over the dirs: to the one with the fewest pooled logs.
                loads = [len(p) + n for p, n in zip(self._pool, self._in_flight, strict=True)]
                dir_index = loads.index(min(loads))
                self._in_flight[dir_index] += 1
            path = self._dirs[dir_index] + os.sep + log_file_name(log_id)
            try:
                # mknod: created (exclusively, as O_CREAT|O_EXCL) without being opened, so
                # one syscall rather than open + close, and no descriptor at any time.
                os.mknod(path, stat.S_IFREG | 0o644)
            except OSError as e:
                with self._lock:
                    self._in_flight[dir_index] -= 1
                    owner.give_up(log_id)
                    if isinstance(e, FileExistsError):
                        owner.look_ahead = True
                        continue  # someone else's file; its id is given up
                    self._paused = True
                    while reserved:  # give up the rest of the batch
                        owner.give_up(reserved.popleft())
                _log.warning("could not preallocate entry log %s", path, exc_info=True)
                break
            with self._lock:
                self._in_flight[dir_index] -= 1
                # (Another thread may have closed the owner since the check above.)
                closed = self._owner.closed
                if closed:
                    owner.give_up(log_id, unused_file=True)
                else:
                    self._pool[dir_index].append(log_id)
                    owner.file_created(dir_index, log_id)
                    created += 1
            if closed:  # closed while we were creating it: nobody will use it
                with contextlib.suppress(OSError):
                    os.unlink(path)
        return created

    # ---------------------------------------------------------------- checking

    def _check(self) -> tuple[set[int], set[int], int]:
        """Assert the pool's own invariants (every pooled file exists and is empty); return
        (pooled ids, reserved ids, ids in flight). Under the io lock."""
        pooled = [(d, log_id) for d, pool in enumerate(self._pool) for log_id in pool]
        pooled_ids = {log_id for _, log_id in pooled}
        assert len(pooled_ids) == len(pooled), "a log is pooled twice"
        reserved = set(self.reserved)
        assert len(reserved) == len(self.reserved), "an id is reserved twice"
        assert not reserved & pooled_ids, "an id is both reserved and pooled"
        assert all(n >= 0 for n in self._in_flight), self._in_flight
        for dir_index, log_id in pooled:
            path = os.path.join(self._dirs[dir_index], log_file_name(log_id))
            assert os.stat(path).st_size == 0, f"pooled log {path} is not empty"
        return pooled_ids, reserved, sum(self._in_flight)
