"""A boxed hex dump in the shape upstream's shell prints a stored entry in (``readledger -b
-m``): a header row of column numbers, then 16 bytes a row as an offset, hex and their
printable characters (``.`` for the rest), framed by ``+---+`` rules. Pure function."""

from __future__ import annotations

__all__ = ["pretty_hex_dump"]

_RULE = "+--------+-------------------------------------------------+----------------+"
_HEADER = (
    "         +-------------------------------------------------+\n"
    "         |  0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f |\n" + _RULE
)


def _printable(byte: int) -> str:
    return chr(byte) if 0x20 <= byte < 0x7F else "."


def pretty_hex_dump(data: bytes) -> str:
    """The dump of ``data`` (no trailing newline); an empty body dumps as nothing."""
    if not data:
        return ""
    rows = [_HEADER]
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        hexes = "".join(f" {b:02x}" for b in chunk).ljust(48)
        text = "".join(_printable(b) for b in chunk).ljust(16)
        rows.append(f"|{offset:08x}|{hexes} |{text}|")
    rows.append(_RULE)
    return "\n".join(rows)
