"""The ManagedLedgerInfo record from the managed ledger's memory, and back; the ledger list
searches use (no I/O).

The managed ledger always writes the *whole* record, built inside its metadata lock from
what it holds now (see :mod:`.managed_ledger`); these two functions are that building and
the reverse step at open, so the rules about what a record holds live in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from bookiesim.mledger.ledger_properties import properties_of
from bookiesim.mledger.position import LedgerList, LedgerSummary
from bookiesim.mledger.seek import END_INDEX
from bookiesim.proto import MLDataFormats_pb2 as ml_pb

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from bookiesim.mledger.rollover import LedgerFill

__all__ = [
    "INDEX_PROPERTY",
    "LedgerInfo",
    "build_record",
    "ledger_infos_of",
    "ledger_list_of",
    "max_end_index",
]

LedgerInfo = ml_pb.ManagedLedgerInfo.LedgerInfo
INDEX_PROPERTY: Final = "index"
"""ML property holding the last assigned index, as upstream's index interceptor stores it."""


def build_record(
    infos: Iterable[LedgerInfo],
    properties: Mapping[str, str],
    index: int,
    terminated: ml_pb.NestedPositionInfo | None,
    extra: LedgerInfo | None = None,
) -> ml_pb.ManagedLedgerInfo:
    """The record of these ledgers (then ``extra``, a ledger being created), properties with
    :data:`INDEX_PROPERTY` set from ``index`` (when one was assigned) and the terminated
    position."""
    info = ml_pb.ManagedLedgerInfo()
    for li in infos:
        info.ledgerInfo.add().CopyFrom(li)
    if extra is not None:
        info.ledgerInfo.add().CopyFrom(extra)
    props = dict(properties)
    if index >= 0:
        props[INDEX_PROPERTY] = str(index)
    for key, value in props.items():
        info.properties.add(key=key, value=value)
    if terminated is not None:
        info.terminatedPosition.CopyFrom(terminated)
    return info


def ledger_infos_of(info: ml_pb.ManagedLedgerInfo, now: int) -> dict[int, LedgerInfo]:
    """Copies of the record's ledgers by id, in id order; a missing or 0 close time becomes
    ``now``, as upstream patches it."""
    out: dict[int, LedgerInfo] = {}
    for li in sorted(info.ledgerInfo, key=lambda li: li.ledgerId):
        copy = LedgerInfo()
        copy.CopyFrom(li)
        if not copy.timestamp:
            copy.timestamp = now
        out[copy.ledgerId] = copy
    return out


def ledger_list_of(
    infos: Mapping[int, LedgerInfo], current: int | None, fill: LedgerFill
) -> LedgerList:
    """The ledgers as searches see them: the open one (``current``) with what it holds so far
    (``fill``: its entries and PIP-345 bounds), the others as their infos say."""
    summaries = []
    for ledger_id, li in infos.items():
        props = properties_of(li)
        if ledger_id == current:
            props.update(fill.bounds.properties())
            summaries.append(LedgerSummary(ledger_id, fill.entries, 0, props))
        else:
            timestamp = li.timestamp if li.HasField("timestamp") else None
            entries = li.entries if li.HasField("entries") else 0
            summaries.append(LedgerSummary(ledger_id, entries, timestamp, props))
    return LedgerList(summaries)


def max_end_index(infos: Iterable[LedgerInfo]) -> int:
    """The largest PIP-345 end index the ledgers' properties record (-1: none), where a
    restarted broker's index continues from."""
    found = -1
    for li in infos:
        end_index = properties_of(li).get(END_INDEX)
        if end_index is not None and end_index.lstrip("-").isdigit():
            found = max(found, int(end_index))
    return found
