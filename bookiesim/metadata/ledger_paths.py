"""Where ledger metadata lives: upstream's *hierarchical* layout (``HierarchicalLedgerManager``).

Under the store's ledgers root (``/ledgers`` in these examples), so a ZooKeeper written by us
reads like upstream's: ids below 2³¹-1 as ``%010d`` split 2/4/4 — ``/ledgers/00/0000/L0042``
— and larger ids as ``%019d`` split 3/4/4/4/4 — ``/ledgers/000/0000/0000/0002/L1234``. Pure
string work; :class:`~bookiesim.metadata.ledgers.LedgerManager` walks the tree with the
component tests below.
"""

from __future__ import annotations

import re
from typing import Final

from bookiesim.metadata.errors import InvalidMetadataError

__all__ = ["is_id_digits", "is_leaf", "ledger_id_from_path", "ledger_path", "top_level_depth"]

_INT64_MAX: Final = 2**63 - 1
_SHORT_ID_LIMIT: Final = 2**31 - 1
"""Upstream's hybrid layout: ids below Integer.MAX_VALUE use the short (2/4/4) paths."""
# Path components of the layouts, compiled once: GC walks every ledger path per pass.
_TWO_DIGITS: Final = re.compile(r"\d{2}")
_THREE_DIGITS: Final = re.compile(r"\d{3}")
_FOUR_DIGITS: Final = re.compile(r"\d{4}")
_LEAF: Final = re.compile(r"L\d{4}")
_SHORT_PATH: Final = re.compile(r"/(\d{2})/(\d{4})/L(\d{4})")
_LONG_PATH: Final = re.compile(r"/(\d{3})/(\d{4})/(\d{4})/(\d{4})/L(\d{4})")


def ledger_path(ledger_id: int, root: str) -> str:
    """Where upstream's hierarchical ledger manager keeps ``ledger_id``'s metadata, under
    the ledgers root ``root`` (a store's :attr:`~.store.MetadataStore.ledgers_root`)."""
    if (
        not isinstance(ledger_id, int)
        or isinstance(ledger_id, bool)
        or not 0 <= ledger_id <= _INT64_MAX
    ):
        raise InvalidMetadataError(
            f"ledger id must be an integer in [0, {_INT64_MAX}], got {ledger_id!r}"
        )
    base = root.rstrip("/")  # the ZooKeeper root "/" is a root too
    if ledger_id < _SHORT_ID_LIMIT:
        s = f"{ledger_id:010d}"
        return f"{base}/{s[0:2]}/{s[2:6]}/L{s[6:10]}"
    s = f"{ledger_id:019d}"
    return f"{base}/{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:19]}"


def ledger_id_from_path(path: str, root: str) -> int:
    """Inverse of :func:`ledger_path`; ``ValueError`` for a path that is not a ledger's."""
    base = root.rstrip("/")
    rest = path[len(base) :] if path.startswith(base + "/") else ""
    m = _SHORT_PATH.fullmatch(rest) or _LONG_PATH.fullmatch(rest)
    if m is None:
        raise ValueError(f"{path!r} is not a ledger path under {root}")
    return int("".join(m.groups()))


def top_level_depth(name: str) -> int | None:
    """How many 4-digit levels lie under a child of the root before the ``L`` leaves: 1 for
    the short layout (two digits), 3 for the long one (three); None for anything else
    (``idgen``, ``available``, ``LAYOUT``, ... live beside the ledgers)."""
    if _TWO_DIGITS.fullmatch(name):
        return 1
    if _THREE_DIGITS.fullmatch(name):
        return 3
    return None


def is_id_digits(name: str) -> bool:
    """An inner level of either layout (four digits)."""
    return _FOUR_DIGITS.fullmatch(name) is not None


def is_leaf(name: str) -> bool:
    """A ledger's node: ``L`` and its id's last four digits."""
    return _LEAF.fullmatch(name) is not None
