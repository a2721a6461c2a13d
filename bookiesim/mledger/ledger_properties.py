"""PIP-404 property lists of a ``LedgerInfo``, edited in place (sans I/O).

Upstream rebuilds the list through a HashMap on every change, so duplicates collapse (the
last one wins) and the order is the map's. Here duplicates collapse the same way but the
order is first appearance, which is deterministic; reads take the first match, as upstream's
``asyncGetLedgerProperty`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bookiesim.proto import MLDataFormats_pb2 as ml_pb

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["get_property", "properties_of", "remove_property", "set_properties"]

LedgerInfo = ml_pb.ManagedLedgerInfo.LedgerInfo


def properties_of(info: LedgerInfo) -> dict[str, str]:
    """The properties as a dict (the last of duplicate keys wins)."""
    return {kv.key: kv.value for kv in info.properties}


def get_property(info: LedgerInfo, key: str) -> str | None:
    for kv in info.properties:
        if kv.key == key:
            return kv.value
    return None


def _rewrite(info: LedgerInfo, props: Mapping[str, str]) -> None:
    del info.properties[:]
    for key, value in props.items():
        info.properties.add(key=key, value=value)


def set_properties(info: LedgerInfo, updates: Mapping[str, str]) -> None:
    props = properties_of(info)
    props.update(updates)
    _rewrite(info, props)


def remove_property(info: LedgerInfo, key: str) -> None:
    props = properties_of(info)
    props.pop(key, None)
    _rewrite(info, props)
