"""Managed-ledger settings, under upstream's names (reference/pulsar.md §2.5, §3.1, §5.1).

These are broker settings (``ServiceConfiguration`` / ``ManagedLedgerConfig`` /
``ManagedLedgerFactoryConfig`` upstream), not bookie keys, so they live here and not in
:mod:`bookiesim.bookie.config`. Each field's docstring names the broker key it mirrors; the
default is the broker's default, except where the docstring says otherwise and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from bookiesim.mledger.compression import (
    DEFAULT_COMPRESSION_THRESHOLD,
    CompressionType,
    MetadataCompressionConfig,
    parse_compression_type,
)

__all__ = ["BROKER_KEYS", "ManagedLedgerConfig"]

MINUTE_MS: Final = 60_000


@dataclass(frozen=True)
class ManagedLedgerConfig:
    """How a managed ledger rolls its ledgers, stores its metadata and narrows seeks."""

    max_entries_per_ledger: int = 50_000
    """``managedLedgerMaxEntriesPerLedger``: a ledger holds exactly this many entries when
    the minimum rollover time does not hold it open longer."""
    minimum_rollover_time_ms: int = 10 * MINUTE_MS
    """``managedLedgerMinLedgerRolloverTimeMinutes`` (10 min) in ms: a full ledger is only
    rolled over once it is older than this (strictly)."""
    maximum_rollover_time_ms: int = 240 * MINUTE_MS
    """``managedLedgerMaxLedgerRolloverTimeMinutes`` (4 h) in ms: a ledger with entries is
    rolled over once it is this old, by a timer (with up to 5% jitter) or at the next add."""
    max_size_per_ledger_mb: int = 2048
    """``managedLedgerMaxSizePerLedgerMbytes``: full at this many MiB of payload."""
    inactive_ledger_rollover_time_ms: int = 0
    """``managedLedgerInactiveLedgerRolloverTimeSeconds`` in ms; 0: never roll an idle ledger."""

    ensemble_size: int = 2
    """``managedLedgerDefaultEnsembleSize``."""
    write_quorum: int = 2
    """``managedLedgerDefaultWriteQuorum``."""
    ack_quorum: int = 2
    """``managedLedgerDefaultAckQuorum``."""
    password: bytes = b""
    """``managedLedgerPassword`` (upstream's default is an empty string too)."""

    ledger_info_compression: MetadataCompressionConfig = field(
        default_factory=MetadataCompressionConfig
    )
    """``managedLedgerInfoCompressionType`` / ``...ThresholdInBytes``. Defaults NONE and
    16384 as in Pulsar ≤ 4.2; upstream master switched the type to LZ4 (#25992)."""
    cursor_info_compression: MetadataCompressionConfig = field(
        default_factory=MetadataCompressionConfig
    )
    """``managedCursorInfoCompressionType`` / ``...ThresholdInBytes`` (PIP-146); same
    defaults."""

    cursor_reset_max_clock_skew_ms: int = 60_000
    """``managedLedgerCursorResetLedgerCloseTimestampMaxClockSkewMillis`` (#22792): how far
    entry timestamps may be from the broker's ledger close times; negative turns close-time
    narrowing off."""
    broker_entry_metadata: bool = True
    """Whether :meth:`~bookiesim.mledger.managed_ledger.ManagedLedger.publish` adds broker
    entry metadata (timestamp and index), as a broker with
    ``brokerEntryMetadataInterceptors`` = the timestamp and index interceptors does.
    Upstream's default is no interceptors; we default to both, since seek by index needs
    them."""

    def __post_init__(self) -> None:
        if self.max_entries_per_ledger < 1:
            raise ValueError("managedLedgerMaxEntriesPerLedger must be at least 1")
        if not self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1:
            raise ValueError("need ensemble size >= write quorum >= ack quorum >= 1")

    @property
    def max_size_per_ledger_bytes(self) -> int:
        return self.max_size_per_ledger_mb * 1024 * 1024

    @classmethod
    def from_broker_keys(cls, values: dict[str, str]) -> ManagedLedgerConfig:
        """A config from ``broker.conf``-style keys (minutes, seconds and names as upstream
        writes them); unknown keys are an error naming the key."""
        kwargs: dict[str, object] = {}
        ledger_type: CompressionType = CompressionType.NONE
        cursor_type: CompressionType = CompressionType.NONE
        ledger_threshold = cursor_threshold = DEFAULT_COMPRESSION_THRESHOLD
        for key, raw in values.items():
            if key not in BROKER_KEYS:
                raise ValueError(f"unknown managed-ledger setting {key!r}")
            if key == "managedLedgerInfoCompressionType":
                ledger_type = parse_compression_type(raw)
            elif key == "managedCursorInfoCompressionType":
                cursor_type = parse_compression_type(raw)
            elif key == "managedLedgerInfoCompressionThresholdInBytes":
                ledger_threshold = int(raw)
            elif key == "managedCursorInfoCompressionThresholdInBytes":
                cursor_threshold = int(raw)
            else:
                name, scale = BROKER_KEYS[key]
                kwargs[name] = int(raw) * scale
        return cls(
            ledger_info_compression=MetadataCompressionConfig(ledger_type, ledger_threshold),
            cursor_info_compression=MetadataCompressionConfig(cursor_type, cursor_threshold),
            **kwargs,  # type: ignore[arg-type]
        )


BROKER_KEYS: Final[dict[str, tuple[str, int]]] = {
    "managedLedgerMaxEntriesPerLedger": ("max_entries_per_ledger", 1),
    "managedLedgerMinLedgerRolloverTimeMinutes": ("minimum_rollover_time_ms", MINUTE_MS),
    "managedLedgerMaxLedgerRolloverTimeMinutes": ("maximum_rollover_time_ms", MINUTE_MS),
    "managedLedgerMaxSizePerLedgerMbytes": ("max_size_per_ledger_mb", 1),
    "managedLedgerInactiveLedgerRolloverTimeSeconds": ("inactive_ledger_rollover_time_ms", 1000),
    "managedLedgerDefaultEnsembleSize": ("ensemble_size", 1),
    "managedLedgerDefaultWriteQuorum": ("write_quorum", 1),
    "managedLedgerDefaultAckQuorum": ("ack_quorum", 1),
    "managedLedgerCursorResetLedgerCloseTimestampMaxClockSkewMillis": (
        "cursor_reset_max_clock_skew_ms",
        1,
    ),
    "managedLedgerInfoCompressionType": ("", 0),
    "managedLedgerInfoCompressionThresholdInBytes": ("", 0),
    "managedCursorInfoCompressionType": ("", 0),
    "managedCursorInfoCompressionThresholdInBytes": ("", 0),
}
"""Broker keys :meth:`ManagedLedgerConfig.from_broker_keys` reads: field name and the factor
from the key's unit to ours (ms, bytes); the compression keys are handled apart."""
