"""When the managed ledger's open ledger is full: upstream's rollover rules, without I/O.

Upstream's ``currentLedgerIsFull`` (reference/pulsar.md §5.2): a ledger is full when it holds
``max_entries_per_ledger`` entries or ``max_size_per_ledger_mb``, or is older than
``maximum_rollover_time_ms`` (spread by up to :data:`ROLLOVER_JITTER` so ledgers do not roll
together); and, when ``minimum_rollover_time_ms`` is set, only once it is older than that.
:class:`~bookiesim.mledger.managed_ledger.ManagedLedger` asks these functions and does the
closing and creating; tests ask them directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from bookiesim.mledger.seek import EntryBounds

if TYPE_CHECKING:
    import random
    from collections.abc import Iterable, Sequence

    from bookiesim.mledger.config import ManagedLedgerConfig

__all__ = [
    "ROLLOVER_JITTER",
    "LedgerFill",
    "entries_that_fit",
    "is_full",
    "is_idle",
    "rollover_after_ms",
]

ROLLOVER_JITTER: Final = 0.05
"""Upstream spreads the max-rollover timer by up to 5% so ledgers do not roll together."""


def rollover_after_ms(config: ManagedLedgerConfig, rng: random.Random) -> float:
    """The age at which a new ledger is full by time alone (jittered)."""
    return config.maximum_rollover_time_ms * (1 + rng.uniform(0, ROLLOVER_JITTER))


def is_full(
    config: ManagedLedgerConfig, entries: int, size: int, age_ms: int, after_ms: float
) -> bool:
    """Upstream's ``currentLedgerIsFull`` for a ledger of ``entries`` entries, ``size``
    bytes and ``age_ms`` (``after_ms``: :func:`rollover_after_ms` of that ledger)."""
    space = entries >= config.max_entries_per_ledger or size >= config.max_size_per_ledger_bytes
    if not (space or age_ms >= after_ms):
        return False
    return config.minimum_rollover_time_ms <= 0 or age_ms > config.minimum_rollover_time_ms


def is_idle(config: ManagedLedgerConfig, idle_ms: int) -> bool:
    """No add for ``inactive_ledger_rollover_time_ms`` (when that rule is on)."""
    inactive = config.inactive_ledger_rollover_time_ms
    return inactive > 0 and idle_ms >= inactive


def entries_that_fit(
    config: ManagedLedgerConfig,
    entries: int,
    size: int,
    age_ms: int,
    after_ms: float,
    payload_sizes: Iterable[int],
) -> int:
    """How many of the next payloads go into the current ledger: up to and including the
    add that makes it full (1 at least, when there is one)."""
    sizes = list(payload_sizes)
    if config.minimum_rollover_time_ms > 0 and age_ms <= config.minimum_rollover_time_ms:
        return len(sizes)  # cannot roll yet: writes continue past the maximum
    if age_ms >= after_ms:
        return 1
    for n, payload_size in enumerate(sizes, start=1):
        entries += 1
        size += payload_size
        if entries >= config.max_entries_per_ledger or size >= config.max_size_per_ledger_bytes:
            return n
    return len(sizes)


@dataclass
class LedgerFill:
    """How full the ledger being written is — what the rules above look at — and the
    PIP-345 bounds of what it holds (they become its properties when it is closed)."""

    created_ms: int = 0
    after_ms: float = 0.0
    """:func:`rollover_after_ms` of this ledger."""
    entries: int = 0
    size: int = 0
    last_add_ms: int = 0
    bounds: EntryBounds = field(default_factory=EntryBounds)

    @classmethod
    def new(cls, config: ManagedLedgerConfig, now: int, rng: random.Random) -> LedgerFill:
        """A ledger created at ``now``."""
        return cls(created_ms=now, after_ms=rollover_after_ms(config, rng), last_add_ms=now)

    def add(self, payload: bytes) -> None:
        self.entries += 1
        self.size += len(payload)
        self.bounds.observe(payload)

    def is_full(self, config: ManagedLedgerConfig, now: int) -> bool:
        return is_full(config, self.entries, self.size, now - self.created_ms, self.after_ms)

    def is_idle(self, config: ManagedLedgerConfig, now: int) -> bool:
        return is_idle(config, now - self.last_add_ms)

    def fits(self, config: ManagedLedgerConfig, now: int, payloads: Sequence[bytes]) -> int:
        """:func:`entries_that_fit` for these payloads."""
        sizes = (len(payload) for payload in payloads)
        age = now - self.created_ms
        return entries_that_fit(config, self.entries, self.size, age, self.after_ms, sizes)
