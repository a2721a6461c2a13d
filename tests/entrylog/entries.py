"""Entry bodies and hypothesis strategies shared by the entry log tests."""

from __future__ import annotations

import random
import struct
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from hypothesis import strategies as st

if TYPE_CHECKING:
    from collections.abc import Iterator

MAX_LONG = 2**63 - 1


def make_entry(ledger_id: int, entry_id: int, payload: bytes = b"") -> bytes:
    """A body as the bookie stores it: ``long ledgerId, long entryId`` then the rest."""
    return struct.pack(">qq", ledger_id, entry_id) + payload


def upstream_entry(ledger_id: int, entry_id: int) -> bytes:
    """Upstream ``DefaultEntryLogTest.generateEntry``: ids + ``"ledger-L-E"`` (26 bytes for
    one-digit ids, so 30 bytes per entry in a ledger's count)."""
    return make_entry(ledger_id, entry_id, f"ledger-{ledger_id}-{entry_id}".encode())


def seeded_entry(ledger_id: int, entry_id: int, size: int, seed: int) -> bytes:
    """A ``size``-byte body with pseudo-random payload (cheap for hypothesis to describe)."""
    return make_entry(ledger_id, entry_id, random.Random(seed).randbytes(size - 16))


ledger_ids = st.one_of(
    st.integers(0, 20),
    st.integers(MAX_LONG - 20, MAX_LONG),
    st.integers(0, MAX_LONG),
)
entry_ids = st.one_of(st.integers(-1, 100), st.integers(-(2**63), MAX_LONG))
body_sizes = st.one_of(st.integers(16, 300), st.integers(16, 70_000))


@st.composite
def entry_bodies(draw: st.DrawFn) -> bytes:
    """One entry body: any non-negative ledger id (incl. near 2^63-1), 16 B .. ~70 KiB."""
    return seeded_entry(
        draw(ledger_ids), draw(entry_ids), draw(body_sizes), draw(st.integers(0, 2**32))
    )


@contextmanager
def scratch_dir() -> Iterator[Path]:
    """A fresh directory per hypothesis example (function fixtures are shared by examples)."""
    with tempfile.TemporaryDirectory(prefix="entrylog-") as d:
        yield Path(d)


def write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
