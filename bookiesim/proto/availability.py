"""Upstream's ``AvailabilityOfEntriesOfLedger`` bytes (reference §1.3): the answer to
GET_LIST_OF_ENTRIES_OF_LEDGER, the entry ids a bookie holds of a ledger as sequence groups."""

from __future__ import annotations

import struct

__all__ = ["decode_availability", "encode_availability"]


def encode_availability(entry_ids: list[int]) -> bytes:
    """Upstream's AvailabilityOfEntriesOfLedger bytes (§1.3): a 64-byte header (version 0,
    number of groups) and 24-byte sequence groups of (firstSequenceStart, lastSequenceStart,
    sequenceSize, sequencePeriod). We emit one group per run of consecutive ids (period 0
    for single-entry sequences), which upstream's decoder reads back as the same set."""
    runs: list[tuple[int, int]] = []
    for entry_id in sorted(set(entry_ids)):
        if runs and runs[-1][0] + runs[-1][1] == entry_id:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((entry_id, 1))
    header = struct.pack(">ii", 0, len(runs)) + bytes(56)
    groups = b"".join(struct.pack(">qqii", start, start, size, 0) for start, size in runs)
    return header + groups


def decode_availability(data: bytes) -> list[int]:
    """The entry ids in upstream's AvailabilityOfEntriesOfLedger bytes."""
    version, count = struct.unpack_from(">ii", data)
    if version != 0:
        raise ValueError(f"availability version {version} is not 0")
    out: list[int] = []
    for i in range(count):
        first, last, size, period = struct.unpack_from(">qqii", data, 64 + 24 * i)
        starts = [first] if period == 0 else list(range(first, last + 1, period))
        for start in starts:
            out.extend(range(start, start + size))
    return out
