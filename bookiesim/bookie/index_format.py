"""The per-ledger index file format, upstream's ``BKLE`` layout (reference §2.8, ``FileInfo``).

Why this module exists: for every entry the bookie must remember where the entry log put it
(``location = (logId << 32) | pos``), plus three facts per ledger that must survive a restart:
the master key (EUA checks), the fenced bit (EFENCED after recovery started) and the explicit
LAC blob of WriteLac. Upstream's interleaved storage keeps them in one file per ledger, and we
write the same files so upstream tools can read ours and the other way round::

    <indexDir>/current/<hex((lid >> 8) & 0xff)>/<hex(lid & 0xff)>/<hex lid>.idx

    offset  size  field (big-endian)
    0       4     b"BKLE"
    4       4     int version (1; version 0 files have no explicit-LAC fields)
    8       4     int masterKey length K
    12      K     master key
    12+K    4     int stateBits (0x1 = fenced)
    16+K    4     int explicitLac length L (version >= 1; 0 = none, else >= 16)
    20+K    L     explicit LAC blob (ledgerId, lac, digest: see client.digest.package_lac)
    ...           zero fill up to 1024
    1024+8e 8     long location of entry e (0 = no entry)

After the header the file holds whole pages of 1024 locations (8192 bytes), zero-filled
where there is no entry, as upstream's ``IndexPersistenceMgr`` writes them: upstream reads an
entry's page whole, so a file that ends inside a page is a short read (EIO) for the entries
of that page. Every write here pads the last page (files of the previous bookiesim, which
ended at the last location, are read as they are and padded by their next write, or by
:func:`pad_index_files` when the bookie adopts their directories).

This module is the format alone, with no I/O: constants, the header codec, file names.
One file's I/O is :mod:`~bookiesim.bookie.index_file`; all ledgers, with the cap on open
descriptors, :mod:`~bookiesim.bookie.ledger_index`.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "FENCED_BIT",
    "HEADER_SIZE",
    "HEADER_VERSION",
    "LAC_METADATA_LENGTH",
    "MAX_LOCATION",
    "PAGE_SIZE",
    "PAGE_SLOTS",
    "SIGNATURE",
    "IndexFormatError",
    "IndexHeader",
    "LedgerExistsError",
    "NoSuchLedgerError",
    "check_header_fits",
    "decode_header",
    "encode_header",
    "index_path",
    "parse_index_file_name",
]

SIGNATURE: Final = b"BKLE"
HEADER_VERSION: Final = 1
HEADER_SIZE: Final = 1024
"""Upstream's ``START_OF_DATA``: entry locations start here."""
FENCED_BIT: Final = 0x1
LAC_METADATA_LENGTH: Final = 16
"""An explicit LAC blob holds at least ledgerId and lac (upstream rejects 1..15 bytes)."""
MAX_LOCATION: Final = 2**63 - 1
PAGE_SLOTS: Final = 1024  # upstream's pageSize of 8192 bytes; our unit for scanning reads
PAGE_SIZE: Final = PAGE_SLOTS * 8
"""Upstream's ``pageSize``: an index file is the header plus a whole number of these."""
_FIXED_HEADER: Final = 4 + 4 + 4 + 4 + 4  # signature, version, key length, state, lac length
_INT = struct.Struct(">i")


# -- errors ---------------------------------------------------------------------------------


class IndexFormatError(ValueError):
    """A file is not a valid BKLE index; says which file, where, and what was found."""

    def __init__(self, path: str | os.PathLike[str], offset: int, reason: str) -> None:
        super().__init__(f"{os.fspath(path)}: {reason} (at offset {offset})")
        self.path = os.fspath(path)
        self.offset = offset
        self.reason = reason


class NoSuchLedgerError(LookupError):
    """The ledger has no index (the bookie answers ENOLEDGER)."""

    def __init__(self, ledger_id: int) -> None:
        super().__init__(f"ledger {ledger_id} has no index on this bookie")
        self.ledger_id = ledger_id


class LedgerExistsError(ValueError):
    """``create_ledger`` for a ledger that already has an index."""

    def __init__(self, ledger_id: int, path: Path) -> None:
        super().__init__(f"ledger {ledger_id} already has an index at {path}")
        self.ledger_id = ledger_id


# -- header (sans-IO) -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexHeader:
    """The decoded first 1024 bytes of an index file."""

    master_key: bytes
    state_bits: int = 0
    explicit_lac: bytes | None = None
    version: int = HEADER_VERSION

    @property
    def fenced(self) -> bool:
        return bool(self.state_bits & FENCED_BIT)


def check_header_fits(master_key: bytes, explicit_lac: bytes | None) -> None:
    used = _FIXED_HEADER + len(master_key) + (len(explicit_lac) if explicit_lac else 0)
    if used > HEADER_SIZE:
        raise ValueError(
            f"master key ({len(master_key)} bytes) and explicit LAC "
            f"({len(explicit_lac) if explicit_lac else 0} bytes) need a {used}-byte header; "
            f"the index header has {HEADER_SIZE}"
        )


def encode_header(header: IndexHeader) -> bytes:
    """The 1024 header bytes, zero-filled, as upstream's ``FileInfo.writeHeader``."""
    check_header_fits(header.master_key, header.explicit_lac)
    parts = [
        SIGNATURE,
        _INT.pack(header.version),
        _INT.pack(len(header.master_key)),
        header.master_key,
        _INT.pack(header.state_bits),
    ]
    if header.version >= 1:
        lac = header.explicit_lac or b""
        parts += [_INT.pack(len(lac)), lac]
    data = b"".join(parts)
    return data + bytes(HEADER_SIZE - len(data))


def decode_header(data: bytes, path: str | os.PathLike[str] = "<index>") -> IndexHeader:
    """Decode a header from the first ``min(file size, 1024)`` bytes of an index file.

    Like upstream's ``FileInfo.readHeader``, a file shorter than 1024 bytes is accepted if
    every field fits in it; a field that runs past the end is an :class:`IndexFormatError`
    naming the field and its offset (upstream would rewrite the header from memory, which
    hides the damage; we refuse and say so).
    """
    size = len(data)

    def take_int(offset: int, what: str) -> int:
        if offset + 4 > size:
            raise IndexFormatError(
                path,
                offset,
                f"truncated header: {what} needs 4 bytes but the file ends at {size}",
            )
        value: int = _INT.unpack_from(data, offset)[0]
        return value

    if data[:4] != SIGNATURE:
        found = data[:4].hex() if data else "an empty file"
        raise IndexFormatError(path, 0, f"not a BKLE index file: signature {found}")
    version = take_int(4, "version")
    if not 0 <= version <= HEADER_VERSION:
        raise IndexFormatError(path, 4, f"unsupported index header version {version}")
    key_length = take_int(8, "master key length")
    if key_length < 0 or 12 + key_length > size:
        raise IndexFormatError(
            path,
            8,
            f"master key length {key_length} is invalid: the header has {size - 12} bytes left",
        )
    master_key = bytes(data[12 : 12 + key_length])
    pos = 12 + key_length
    state_bits = take_int(pos, "state bits")
    pos += 4
    explicit_lac = None
    if version >= 1:
        lac_length = take_int(pos, "explicit LAC length")
        if lac_length != 0 and (lac_length < LAC_METADATA_LENGTH or pos + 4 + lac_length > size):
            raise IndexFormatError(
                path,
                pos,
                f"explicit LAC length {lac_length} is invalid (must be 0 or at least "
                f"{LAC_METADATA_LENGTH}; {size - pos - 4} header bytes left)",
            )
        if lac_length:
            explicit_lac = bytes(data[pos + 4 : pos + 4 + lac_length])
    return IndexHeader(master_key, state_bits, explicit_lac, version)


def index_path(index_dir: str | os.PathLike[str], ledger_id: int) -> Path:
    """Where upstream (``IndexPersistenceMgr.getLedgerName``) puts a ledger's index file."""
    if not 0 <= ledger_id <= MAX_LOCATION:
        raise ValueError(f"ledger id {ledger_id} is not a non-negative 64-bit long")
    # One Path built from all its parts (each ``/`` would parse a new one): the simulator's
    # check of every bookie's index compares every ledger's path with this after each step.
    return Path(
        index_dir,
        "current",
        f"{(ledger_id >> 8) & 0xFF:x}",
        f"{ledger_id & 0xFF:x}",
        f"{ledger_id:x}.idx",
    )


def parse_index_file_name(name: str) -> int | None:
    """The ledger id of an index file name (``<lower-case hex id>.idx``), or None.

    Only names upstream writes count (no leading zeros, signs or upper case).
    """
    if not name.endswith(".idx"):
        return None
    stem = name[:-4]
    if not stem or len(stem) > 16 or stem != stem.lower():
        return None
    try:
        ledger_id = int(stem, 16)
    except ValueError:
        return None
    if f"{ledger_id:x}" != stem or not 0 <= ledger_id <= MAX_LOCATION:
        return None  # leading zeros, signs, underscores: not a name upstream writes
    return ledger_id
