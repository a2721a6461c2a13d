"""Managed-ledger and cursor records as JSON, keyed by their protobuf field names.

Why not ``json_format.MessageToDict``: it writes int64 fields as strings (proto3 JSON) and
KeyValue lists as lists of pairs, which makes the output awkward to read and to compare
(``tests/mledger/vectors/pip146/mlinfo.expect.json`` has numbers and property objects). Here
integers stay integers, enums are their names, and a repeated ``KeyValue`` (``key``,
``value``) or ``LongProperty`` / ``StringProperty`` (``name``, ``value``) becomes one
object; with duplicate keys the last one wins, as upstream's HashMap rebuild does.
Unset optional fields are left out; empty repeated fields too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.protobuf.descriptor import FieldDescriptor

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = ["info_to_json"]

_PAIR_KEYS = ({"key", "value"}, {"name", "value"})


def _is_pair(descriptor: Any) -> str | None:
    names = {f.name for f in descriptor.fields}
    for keys in _PAIR_KEYS:
        if names == keys:
            return "key" if "key" in keys else "name"
    return None


def _value(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return info_to_json(value)
    if field.type == FieldDescriptor.TYPE_ENUM and field.enum_type is not None:
        known = field.enum_type.values_by_number.get(value)
        return value if known is None else known.name
    if field.type == FieldDescriptor.TYPE_BYTES:
        return value.hex()
    return value


def info_to_json(message: Message) -> dict[str, Any]:
    """The set fields of ``message`` (see the module docstring for the mapping)."""
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        if field.is_repeated:
            pair_key = _is_pair(field.message_type) if field.message_type else None
            if pair_key is not None:
                out[field.name] = {getattr(item, pair_key): item.value for item in value}
            else:
                out[field.name] = [_value(field, item) for item in value]
        else:
            out[field.name] = _value(field, value)
    return out
