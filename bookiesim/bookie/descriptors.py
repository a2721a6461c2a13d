"""The bookie's file descriptors: one budget under the process's ``RLIMIT_NOFILE``.

Theory of operation
-------------------
A bookie holds descriptors in three caches whose sizes are configured, and in everything
else, which is not. The caches:

* ``openFileLimit``: ledger index files kept open (:mod:`bookiesim.bookie.ledger_index`);
* ``entryLogMaxOpenReadFiles``: entry-log read handles (:mod:`bookiesim.entrylog.logger`);
* ``maximumNumberOfActiveEntryLogs``: per-ledger logs open for writing
  (:mod:`bookiesim.entrylog.managers`); in single-log mode there is one active log whatever
  it says, so it is no cache then.

Rotated logs awaiting the checkpoint hold none: their descriptor is closed at rotation and
the checkpoint fsyncs them by path (:mod:`bookiesim.entrylog.lifecycle`), so however many
ledgers churn, write descriptors stay at the active logs plus the preallocated one.

Everything else is the *reserve* (:func:`reserve_for`): the process itself (standard
streams, trio's epoll and wake-up descriptors, the worker threads' pipes), the listening
sockets, the metadata store (SQLite's database, WAL and shared-memory files, or a
ZooKeeper session), the journal's current file and the one it rolls to, one preallocated
entry log, the transient ones (``lastMark``, ``lastId``, a checkpoint's fsync by path, the
preallocation pool's file creation, GC's scan and compaction, a directory's fsync), a few
logs kept open after a write error, and the sockets no configuration bounds: clients,
the admin HTTP server's connections, an embedded auto-recovery's connections to other
bookies. Sockets get an eighth of the limit (at least :data:`MIN_SOCKETS`).

Upstream's defaults (20,000 index files, plus read handles and 500 active logs) assume a
limit far above the common ``ulimit -n`` of 1,024; an index file or a log that cannot be
opened fails a write, and the bookie turns read-only. So at start the process first raises
its soft limit to the hard one, as the JVM does for upstream's bookie
(:func:`raise_soft_limit`), and then :func:`plan_descriptors` shares what the reserve leaves
among the caches, max-min fair: each cache gets an equal share, a cache configured below its
share keeps its configured value, and what it leaves over is shared among the others again.
A configured value larger than its share is lowered; the configured values are kept
whenever they fit. A default lowered is the normal sizing (upstream's 20,000 index files
exceed most limits), so it is only named in the INFO line; a value the operator chose and
that was lowered gets a WARNING naming the key. (A value set to its default is taken for
the default: the configuration does not record which keys were written out.) A limit
that cannot give each cache one descriptor beyond the reserve is refused
(:class:`DescriptorLimitError`, one line).

Only :func:`raise_soft_limit` touches the process; the rest is arithmetic, tested with
hypothesis (``tests/bookie/test_descriptors.py``). The budget is for a process running one
bookie (``bookiesim bookie``); in-process clusters of tests share one process and keep
their configuration as given.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from bookiesim.bookie.config import CONFIG_KEYS

if TYPE_CHECKING:
    from bookiesim.bookie.config import BookieConfig

__all__ = [
    "FIXED_RESERVE",
    "MIN_SOCKETS",
    "CacheShare",
    "DescriptorBudget",
    "DescriptorLimitError",
    "NofileLimit",
    "plan_descriptors",
    "raise_soft_limit",
    "reserve_for",
]

FIXED_RESERVE: Final = 40
"""Descriptors of the process and its services that no key sizes: standard streams (3),
trio's epoll and wake-up pair (3), worker threads' wake-ups (about 4), the bookie's and the
admin's listening sockets (2), the metadata store (SQLite's database, WAL, shared memory and
rollback journal, or ZooKeeper's socket: 4), the transient ones (``lastMark``/``lastId``
writes, a checkpoint's fsync by path, an index file reopened by the checkpoint's sync, the
pool creating a log, a directory fsync, GC's scanner and compaction: about 8), up to 8 logs
kept open after a write error (their buffered bytes cannot be dropped), and slack."""
PER_JOURNAL_DIR: Final = 2
"""A journal's current file and the next one while it rolls over."""
MIN_SOCKETS: Final = 32
"""Least headroom for sockets (clients, admin HTTP connections, auto-recovery's client)."""
SOCKET_SHARE: Final = 8
"""Sockets get ``limit // SOCKET_SHARE`` (at least :data:`MIN_SOCKETS`)."""

_DEFAULTS: Final = {spec.key: spec.default for spec in CONFIG_KEYS}
_INDEX = ("openFileLimit", "open_file_limit")
_READ = ("entryLogMaxOpenReadFiles", "entry_log_max_open_read_files")
_ACTIVE = ("maximumNumberOfActiveEntryLogs", "maximum_number_of_active_entry_logs")


class DescriptorLimitError(ValueError):
    """The descriptor limit is too small to run a bookie at all (the message says how
    small, and what it needs)."""


@dataclass(frozen=True, slots=True)
class NofileLimit:
    """``RLIMIT_NOFILE`` after :func:`raise_soft_limit`: the soft limit in force, the hard
    one, and the soft limit before (equal to ``soft`` when nothing was raised)."""

    soft: int
    hard: int | None
    """None: unlimited."""
    before: int


@dataclass(frozen=True, slots=True)
class CacheShare:
    """One cache's size: configured and given (``given < configured``: lowered)."""

    key: str
    """Upstream's key."""
    attr: str
    """The :class:`~bookiesim.bookie.config.BookieConfig` attribute."""
    configured: int
    given: int

    @property
    def lowered(self) -> bool:
        return self.given < self.configured

    @property
    def is_default(self) -> bool:
        """Configured at its default (not a value the operator chose)."""
        return self.configured == _DEFAULTS[self.key]


@dataclass(frozen=True, slots=True)
class DescriptorBudget:
    """How ``limit`` descriptors are shared: the reserve and each cache."""

    limit: int
    reserve: int
    sockets: int
    """The part of ``reserve`` left for sockets."""
    caches: tuple[CacheShare, ...]

    @property
    def used(self) -> int:
        """Descriptors the bookie may hold at most: reserve plus every cache."""
        return self.reserve + sum(c.given for c in self.caches)

    def lowered(self) -> list[CacheShare]:
        return [c for c in self.caches if c.lowered]

    def apply(self, cfg: BookieConfig) -> BookieConfig:
        """``cfg`` with each lowered cache set to its share (the same object if none is)."""
        changes = {c.attr: c.given for c in self.lowered()}
        return cfg.replace(**changes) if changes else cfg

    def warnings(self) -> list[str]:
        """One line per lowered cache the operator configured (not at its default), naming
        its key (the process logs them as WARNINGs); a lowered default is normal sizing, told
        by :meth:`describe`."""
        return [
            f"{c.key}={c.configured} lowered to {c.given} to stay within the open-file limit "
            f"of {self.limit}"
            for c in self.lowered()
            if not c.is_default
        ]

    def describe(self, raised_from: int | None = None) -> str:
        """The one INFO line: the limit (and the soft limit it was raised from) and what each
        cache got, with the default of each default sized down."""
        raised = "" if raised_from is None else f" (soft limit raised from {raised_from})"
        caches = ", ".join(
            f"{c.key}={c.given}"
            + (
                f" (default {c.configured}, sized to the limit)"
                if c.lowered and c.is_default
                else ""
            )
            for c in self.caches
        )
        return (
            f"descriptor budget: limit {self.limit}{raised}: {caches}; {self.reserve} kept "
            f"for the journal, sockets ({self.sockets}), the metadata store, the admin and "
            f"the rest"
        )

    def _check(self) -> None:
        """Assert the budget's invariants (tests call it)."""
        assert self.used <= self.limit, (self.used, self.limit)
        assert self.sockets <= self.reserve
        for c in self.caches:
            assert 1 <= c.given <= c.configured, c


def reserve_for(limit: int, *, journal_dirs: int, per_ledger: bool) -> tuple[int, int]:
    """(descriptors kept out of the caches, the part of them for sockets) under ``limit``.

    One preallocated entry log is counted here; in single-log mode the one active log too,
    since ``maximumNumberOfActiveEntryLogs`` does not bound it then.
    """
    sockets = max(MIN_SOCKETS, limit // SOCKET_SHARE)
    logs = 1 if per_ledger else 2
    return FIXED_RESERVE + PER_JOURNAL_DIR * max(1, journal_dirs) + logs + sockets, sockets


def _fair_shares(available: int, demands: dict[str, int]) -> dict[str, int]:
    """Max-min fair integer shares of ``available`` (at least one per demand): a demand at or
    below the equal share is met, the rest share what is left; rounding gives the first
    ones (in order) one more."""
    shares: dict[str, int] = {}
    waiting = dict(demands)
    while waiting:
        fair = available // len(waiting)
        met = {name: d for name, d in waiting.items() if d <= fair}
        if not met:
            extra = available - fair * len(waiting)
            for i, name in enumerate(waiting):
                shares[name] = fair + (1 if i < extra else 0)
            break
        for name, demand in met.items():
            shares[name] = demand
            available -= demand
            del waiting[name]
    return shares


def plan_descriptors(
    limit: int,
    *,
    open_file_limit: int,
    entry_log_max_open_read_files: int,
    maximum_number_of_active_entry_logs: int,
    per_ledger: bool,
    journal_dirs: int = 1,
) -> DescriptorBudget:
    """Share ``limit`` descriptors (see the module docstring). Configured values must be at
    least 1 (the configuration's own ranges). :class:`DescriptorLimitError` when the limit
    cannot give every cache one descriptor beyond the reserve."""
    configured = {_INDEX: open_file_limit, _READ: entry_log_max_open_read_files}
    if per_ledger:
        configured[_ACTIVE] = maximum_number_of_active_entry_logs
    for (key, _), value in configured.items():
        if value < 1:
            raise ValueError(f"{key} must be at least 1, not {value}")
    reserve, sockets = reserve_for(limit, journal_dirs=journal_dirs, per_ledger=per_ledger)
    available = limit - reserve
    if available < len(configured):
        raise DescriptorLimitError(
            f"the open-file limit ({limit}) is too small for a bookie: it needs at least "
            f"{_minimum(journal_dirs=journal_dirs, per_ledger=per_ledger)} descriptors "
            f"(journal, sockets, metadata store, admin, and one per cache); raise `ulimit -n`"
        )
    names = {key: (key, attr) for key, attr in configured}
    shares = _fair_shares(available, {key: value for (key, _), value in configured.items()})
    caches = tuple(
        CacheShare(key, names[key][1], value, shares[key]) for (key, _), value in configured.items()
    )
    return DescriptorBudget(limit, reserve, sockets, caches)


def _minimum(*, journal_dirs: int, per_ledger: bool) -> int:
    """The smallest limit :func:`plan_descriptors` accepts."""
    caches = 3 if per_ledger else 2
    limit = caches
    while True:
        reserve, _ = reserve_for(limit, journal_dirs=journal_dirs, per_ledger=per_ledger)
        if limit - reserve >= caches:
            return limit
        limit = reserve + caches


def plan_for_config(limit: int, cfg: BookieConfig) -> DescriptorBudget:
    """:func:`plan_descriptors` with ``cfg``'s values."""
    return plan_descriptors(
        limit,
        open_file_limit=cfg.open_file_limit,
        entry_log_max_open_read_files=cfg.entry_log_max_open_read_files,
        maximum_number_of_active_entry_logs=cfg.maximum_number_of_active_entry_logs,
        per_ledger=cfg.entry_log_per_ledger_enabled,
        journal_dirs=len(cfg.effective_journal_directories),
    )


_UNLIMITED_TARGET: Final = 1 << 20
"""Soft limit asked for when the hard one is unlimited (Linux's default ``nr_open``)."""


def raise_soft_limit() -> NofileLimit:
    """Raise ``RLIMIT_NOFILE``'s soft limit to the hard one, as the JVM does at start (an
    unlimited hard limit: to :data:`_UNLIMITED_TARGET`). The one function here with a side
    effect; if the system refuses, the limit stays as it was."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = hard == resource.RLIM_INFINITY
    before = _UNLIMITED_TARGET if soft == resource.RLIM_INFINITY else soft
    target = _UNLIMITED_TARGET if unlimited else hard
    now = before
    if before < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            now = target
        except (ValueError, OSError):
            pass
    return NofileLimit(soft=now, hard=None if unlimited else hard, before=before)
