"""Protobuf varints, for the frames :mod:`.v3` writes and :mod:`.v3_add` reads by hand
(sans-IO).

The hot frames (adds, reads, add responses) are concatenations of fields; a field's tag and
every integer in it is a varint. Both the bookie's responses and the client's requests use
this one encoder (:func:`varint`), and everything that reads varints by hand this one reader
(:func:`read_varint`): the bookie's plain adds, the ledger metadata's length prefix.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MASK_64", "read_varint", "varint"]


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_TABLE_BITS: Final = 14
_TABLE_SIZE: Final = 1 << _TABLE_BITS
_TABLE: Final = [_encode_varint(v) for v in range(_TABLE_SIZE)]
"""Every one- and two-byte varint, ready: lengths and small ids are below 16,384, and the
encoding loop cost more than the rest of building a request."""
_LOW_PAIRS: Final = [bytes(((v & 0x7F) | 0x80, (v >> 7) | 0x80)) for v in range(_TABLE_SIZE)]
"""The two bytes that carry 14 low bits of a longer varint (both with the continuation bit):
a busy bookie's txnIds and entry ids pass 16,384 soon, and 14 bits a look-up cost a third
of the bit loop (0.13 against 0.34-0.38 us for a 3- or 4-byte varint, measured here)."""


def varint(value: int) -> bytes:
    """Protobuf varint of an int64/uint64 (negative values take ten bytes)."""
    if 0 <= value < _TABLE_SIZE:
        return _TABLE[value]
    if value < 0:
        value += 1 << 64
    out = b""
    while value >= _TABLE_SIZE:
        out += _LOW_PAIRS[value & (_TABLE_SIZE - 1)]
        value >>= _TABLE_BITS
    return out + _TABLE[value]


MASK_64: Final = 0xFFFFFFFFFFFFFFFF


def read_varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` of ``data`` as protobuf's uint64 reads it, and the position after
    it; position -1 when it runs past ``end`` or over ten bytes (protobuf's DecodeError: the
    caller decides what that means)."""
    value = 0
    shift = 0
    while pos < end and shift < 70:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            # Nine bytes or fewer hold 63 bits, a small int to mypyc; only a tenth byte
            # needs protobuf's cut to 64 bits (a big-int operation, kept off the usual path:
            # on every varint it cost the bookie's add reader two thirds of its time).
            return (value & MASK_64 if shift > 56 else value), pos
        shift += 7
    return 0, -1
