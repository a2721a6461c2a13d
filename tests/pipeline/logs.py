"""Hand-built entry logs for the pipeline tests: real digested bodies, optional ledgers map
and torn tail, in a bookie's directory layout."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bookiesim.client.digest import DigestManager
from bookiesim.entrylog.writer import EntryLogWriter

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path


def body(ledger_id: int, entry_id: int, size: int = 100, lac: int | None = None) -> bytes:
    """An entry as a client sends it (CRC32C), payload ``size`` bytes."""
    payload = f"L{ledger_id}E{entry_id}".encode().ljust(size, b".")[:size]
    last = entry_id - 1 if lac is None else lac
    return DigestManager(ledger_id, b"").package(entry_id, last, (entry_id + 1) * size, payload)


def write_log(
    ledger_dir: Path,
    log_id: int,
    bodies: Iterable[bytes],
    *,
    ledgers_map: bool = True,
    torn: bytes = b"",
) -> Path:
    current = ledger_dir / "current"
    current.mkdir(parents=True, exist_ok=True)
    with EntryLogWriter(current, log_id) as writer:
        for b in bodies:
            writer.append(b)
        if ledgers_map:
            writer.append_ledgers_map()
        writer.flush()
        path = writer.path
    if torn:
        with open(path, "ab") as f:
            f.write(torn)
    return path
