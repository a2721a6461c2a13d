"""Storage, metadata and GC set up for the GC tests, without a server.

Entries are written straight into a :class:`LedgerStorage` (as upstream's
GarbageCollectorThreadTest drives its ledger storage), ledgers "exist in the metadata store"
while they are in a :class:`FakeLedgers`, and the collector is the bookie's own, over the
bookie's adapter.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import trio

from bookiesim.bookie.gc_storage import BookieGcStorage
from bookiesim.bookie.ledger_storage import LedgerStorage, entry_header
from bookiesim.cluster.testing import bookie_config
from bookiesim.gc.collector import GarbageCollector
from bookiesim.gc.policy import CompactionSettings, Throttle
from bookiesim.metadata.errors import NoSuchLedgerError

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from bookiesim.bookie.config import BookieConfig

FORCE_BOTH = CompactionSettings(
    minor_threshold=0.2,
    minor_interval=3600,
    minor_max_time=None,
    major_threshold=0.8,
    major_interval=86400,
    major_max_time=None,
    force_allow=True,
)


def body(ledger_id: int, entry_id: int, size: int = 100) -> bytes:
    """A packaged entry: ledger id, entry id, LAC, then ``size`` bytes of filler."""
    head = struct.pack(">qqq", ledger_id, entry_id, entry_id - 1)
    return head + bytes((ledger_id + entry_id + i) % 251 for i in range(size))


class FakeLedgers:
    """The metadata store's ledger list, as a set."""

    def __init__(self, ids: Iterable[int] = ()) -> None:
        self.ids = set(ids)

    async def list_ledgers(self) -> list[int]:
        return sorted(self.ids)

    async def read(self, ledger_id: int) -> object:
        if ledger_id not in self.ids:
            raise NoSuchLedgerError(ledger_id, f"/ledgers/{ledger_id}")
        return ledger_id


def config(root: Path, **overrides: object) -> BookieConfig:
    return bookie_config(root, **overrides)


def open_storage(cfg: BookieConfig) -> LedgerStorage:
    for d in (*cfg.ledger_directories, *cfg.effective_index_directories):
        (d / "current").mkdir(parents=True, exist_ok=True)
    return LedgerStorage.from_config(cfg, clock=trio.current_time)


def write(storage: LedgerStorage, ledger_id: int, entries: int, size: int = 100) -> range:
    """Append ``entries`` entries after the ledger's last (creating it if need be); returns
    their ids."""
    if not storage.ledger_exists(ledger_id):
        storage.create_ledger(ledger_id, b"key")
    start = storage.last_entry_id(ledger_id) + 1
    for entry_id in range(start, start + entries):
        b = body(ledger_id, entry_id, size)
        storage.add_entry(entry_header(b), b)
    return range(start, start + entries)


def collector(
    storage: LedgerStorage,
    ledgers: FakeLedgers | None,
    settings: CompactionSettings = FORCE_BOTH,
    **kwargs: object,
) -> GarbageCollector:
    gc = GarbageCollector(
        BookieGcStorage(storage, trio.Lock()),
        settings,
        gc_wait_time=1.0,
        throttle=Throttle(1e12, by_bytes=True),
        ledger_source=ledgers,
        **kwargs,  # type: ignore[arg-type]
    )
    return gc


def crash(storage: LedgerStorage) -> None:
    """kill -9: buffers not yet handed to the OS are lost, nothing is flushed or closed
    cleanly (what reached the OS stays, as after a process crash)."""
    logger = storage.entry_logger
    for writer in logger._files.open_writers():
        writer.close(discard_buffer=True)
    for reader in logger._readers.values():
        reader.close()
    storage.index.release()  # its descriptors close; pages it never wrote are gone
    for index_file in list(storage.index._open.values()):
        index_file._close_fd()


def assert_readable(storage: LedgerStorage, ledger_id: int, entries: int, size: int = 100) -> None:
    for entry_id in range(entries):
        assert storage.read_entry(ledger_id, entry_id) == body(ledger_id, entry_id, size)
