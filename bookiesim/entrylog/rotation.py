"""When an entry log is rotated, and why: one pure policy for both managers.

Every rule that decides a rotation lives here, and nothing else: no files, no clock (the
caller passes ``now``), no managers. Both managers of :mod:`bookiesim.entrylog.managers`
ask :class:`RotationPolicy`, and so does the bookie (through the entry logger), so the
upstream-behaviour gate — which of BP-32's rotations exist at all — is written once, in
:meth:`RotationPolicy.on_signal` and :attr:`RotationPolicy.timer_expiry`.

The facts and the reasons they give:

=============================================  ==================================  ========
fact                                           reason                              modes
=============================================  ==================================  ========
next entry would pass ``logSizeLimit``         :attr:`RotationReason.SIZE`         both
a new ledger while the active logs are full    :attr:`RotationReason.MAX_ACTIVE`   per-ledger
no add for the expiry time                     :attr:`RotationReason.EXPIRY`       per-ledger
a write to the log failed                      :attr:`RotationReason.WRITE_ERROR`  both
write-close, fencing read, replication done    the signal's own reason             per-ledger
=============================================  ==================================  ========

With ``upstream_behaviour`` the last row gives nothing (upstream has no such rotations) and
expiry happens only lazily, on the next add, as Guava's cache cleans up; a bookie that stops
writing then never rotates its logs (:attr:`RotationPolicy.timer_expiry` is False). In
single-log mode one log holds every ledger, so a signal about one ledger never rotates it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["BP32_SIGNALS", "RotationEvent", "RotationPolicy", "RotationReason"]


class RotationReason(enum.Enum):
    """Why a log stopped being written (the ``reason`` label of the rotation metrics)."""

    SIZE = "size"
    """The next entry would take the log past ``logSizeLimit`` (upstream "roll")."""
    EXPIRY = "expiry"
    """No write for ``entrylogMapAccessExpiryTimeInSeconds`` (per-ledger mode)."""
    MAX_ACTIVE = "max_active"
    """Evicted to make room: ``maximumNumberOfActiveEntryLogs`` were active (per-ledger)."""
    WRITE_CLOSE = "write_close"
    """BP-32: the client closed its write handle and told us so."""
    FENCE = "fence"
    """BP-32: a fencing read (recovery) — nobody will write this ledger again."""
    WRITE_ERROR = "write_error"
    """BP-32: a write to the log failed; the next entry goes to a fresh log."""
    REPLICATION = "replication"
    """BP-32: the replicator finished re-replicating a fragment of the ledger."""


BP32_SIGNALS = frozenset(
    {RotationReason.WRITE_CLOSE, RotationReason.FENCE, RotationReason.REPLICATION}
)
"""The rotations BP-32 adds and upstream lacks: ignored with ``upstream_behaviour``."""


@dataclass(frozen=True, slots=True)
class RotationEvent:
    """One rotation: ``ledger_id`` is None in single-log mode (the log holds many ledgers)."""

    log_id: int
    ledger_id: int | None
    reason: RotationReason


@dataclass(frozen=True, slots=True)
class RotationPolicy:
    """The rotation rules of one entry logger's configuration. Pure; cheap on the add path.

    ``max_active_logs`` and ``expiry_seconds`` only matter in per-ledger mode.
    """

    per_ledger: bool
    upstream_behaviour: bool
    log_size_limit: int
    expiry_seconds: float = 300
    max_active_logs: int = 500

    def __post_init__(self) -> None:
        if self.per_ledger and self.max_active_logs < 1:
            raise ValueError(f"max_active_logs must be at least 1, not {self.max_active_logs}")

    def on_add(self, position: int, body_size: int) -> RotationReason | None:
        """SIZE if an entry of ``body_size`` bytes appended at ``position`` would pass the
        limit (upstream's ``position + size + 4 > logSizeLimit``: 4 for the length)."""
        return RotationReason.SIZE if position + body_size + 4 > self.log_size_limit else None

    def room(self, position: int) -> int:
        """Bytes of records (each a body and its 4-byte size) a log at ``position`` still
        takes: :meth:`on_add` says SIZE for an ``n``-byte body exactly when ``n + 4 >
        room(position)``. For a run of entries, which fits while its records' cumulative
        size is at most this (the sorted storage's flush writes runs)."""
        return self.log_size_limit - position

    def on_new_ledger(self, active_logs: int) -> RotationReason | None:
        """MAX_ACTIVE if a ledger needing a log must evict another's first (per-ledger)."""
        if self.per_ledger and active_logs >= self.max_active_logs:
            return RotationReason.MAX_ACTIVE
        return None

    def on_idle(self, last_write: float, now: float) -> RotationReason | None:
        """EXPIRY if a per-ledger log last written at ``last_write`` has expired by ``now``.

        Compared as :meth:`expiry_deadline` computes it, so that a timer woken exactly at
        the deadline always finds the log expired (``now - last_write`` could come out an
        ulp short of the expiry and leave the timer spinning).
        """
        if self.per_ledger and self.expiry_deadline(last_write) <= now:
            return RotationReason.EXPIRY
        return None

    def expiry_deadline(self, last_write: float) -> float:
        return last_write + self.expiry_seconds

    def on_write_error(self) -> RotationReason:
        """A write failed: the log is rotated (BP-32) before the error reaches the client."""
        return RotationReason.WRITE_ERROR

    def on_signal(self, reason: RotationReason) -> RotationReason | None:
        """Whether a request to rotate one ledger's log (BP-32's write-close, fence,
        replication; or anyone who knows the ledger is done) rotates anything.

        None in single-log mode (the shared log serves other ledgers too) and, with
        ``upstream_behaviour``, for BP-32's signals. The one upstream-behaviour gate.
        """
        if not self.per_ledger:
            return None
        if self.upstream_behaviour and reason in BP32_SIGNALS:
            return None
        return reason

    @property
    def timer_expiry(self) -> bool:
        """Idle logs expire on a timer (ours); else only lazily on the next add (upstream's
        Guava cache) or never (single-log mode). The bookie runs its expiry loop on this."""
        return self.per_ledger and not self.upstream_behaviour

    @property
    def lazy_expiry(self) -> bool:
        """Idle per-ledger logs expire when an add touches the map (upstream behaviour)."""
        return self.per_ledger and self.upstream_behaviour
