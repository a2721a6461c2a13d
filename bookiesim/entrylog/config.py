"""The configuration keys the entry logger reads, as a protocol (``bookie.config.BookieConfig``
has them; nothing in ``entrylog/`` depends on ``bookie/``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

__all__ = ["DEFAULT_LOG_SIZE_LIMIT", "EntryLogConfig"]

DEFAULT_LOG_SIZE_LIMIT = 1 << 30
"""Upstream ``logSizeLimit`` default (1 GiB)."""


class EntryLogConfig(Protocol):
    """The configuration keys the entry logger reads; ``bookie.config.BookieConfig`` has them.

    A protocol rather than an import because nothing in ``entrylog/`` depends on ``bookie/``.
    """

    @property
    def ledger_directories(self) -> Sequence[Path]: ...
    @property
    def entry_log_per_ledger_enabled(self) -> bool: ...
    @property
    def log_size_limit(self) -> int: ...
    @property
    def entrylog_map_access_expiry_time_in_seconds(self) -> int: ...
    @property
    def maximum_number_of_active_entry_logs(self) -> int: ...
    @property
    def entry_log_max_open_read_files(self) -> int: ...
    @property
    def write_buffer_size_bytes(self) -> int: ...
    @property
    def flush_entrylog_bytes(self) -> int: ...
    @property
    def entry_log_writeback_bytes(self) -> int: ...
    @property
    def entry_log_file_preallocation_enabled(self) -> bool: ...
    @property
    def entry_log_preallocation_pool_size(self) -> int: ...
    @property
    def upstream_behaviour(self) -> bool: ...
    @property
    def unsafe_gc_below_least_unflushed_only(self) -> bool: ...
    @property
    def unsafe_entry_log_garbage_header(self) -> bool: ...
