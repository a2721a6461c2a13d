"""Protobuf text format as upstream prints it (protobuf-java's ``TextFormat``), without I/O.

Cookies and the auto-recovery records are stored as text protos, and upstream's tools compare
them as bytes, so we print exactly what protobuf-java prints: fields in field-number order,
unset optionals left out, each ``name: value`` on its own line; strings in double quotes,
their UTF-8 bytes printable ASCII as is, ``\\a \\b \\f \\n \\r \\t \\v \\\\ \\' \\"`` named and
every other byte as three octal digits. (Python's ``text_format`` differs: it writes some of
the named ones in octal.) Reading needs no such care: ``google.protobuf.text_format`` parses
both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from google.protobuf.descriptor import FieldDescriptor

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = ["print_text", "quote"]

_NAMED_ESCAPES: Final = {
    0x07: "\\a",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
    0x5C: "\\\\",
    0x27: "\\'",
    0x22: '\\"',
}
_ESCAPED: Final = tuple(
    _NAMED_ESCAPES.get(b, chr(b) if 0x20 <= b < 0x7F else f"\\{b:03o}") for b in range(256)
)
_INTEGERS: Final = frozenset(
    {
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SINT64,
    }
)


def quote(value: str) -> str:
    """A string as protobuf-java's text format writes it, quotes included."""
    return '"' + "".join(_ESCAPED[b] for b in value.encode("utf-8")) + '"'


def print_text(message: Message) -> bytes:
    """``message`` in upstream's text format. Only string and integer fields occur in the
    records we write; any other kind is refused rather than printed differently."""
    lines = []
    for field, value in message.ListFields():  # set fields, in field-number order
        repeated = field.is_repeated
        for item in value if repeated else (value,):
            if field.type == FieldDescriptor.TYPE_STRING:
                lines.append(f"{field.name}: {quote(item)}\n")
            elif field.type in _INTEGERS:
                lines.append(f"{field.name}: {item}\n")
            else:
                raise TypeError(f"{field.full_name}: no text printer for field type {field.type}")
    return "".join(lines).encode("ascii")
