"""The auto-recovery records and their paths, as upstream writes them, without I/O.

Upstream's auditor, replication workers and tools share their state through nodes under
``<ledgers root>/underreplication`` (``ZkLedgerUnderreplicationManager``,
``ZkLedgerAuditorManager``). For upstream's tools and ours to read the same state, every
record here is byte for byte what upstream 4.17.4 writes for the same fields (recorded in the
vectors' ``zk/03``..``zk/06``)::

    underreplication/                      persistent, empty
        LAYOUT                             type: "BASIC"\\nversion: 1\\n
        ledgers/0000/0000/0000/0003/urL0000000003
                                           replica: "127.0.0.1:34183"\\nctime: 1795529350214\\n
        locks/urL0000000000                ephemeral; bookieId: "localhost"\\n
        disable                            empty: re-replication is off while it exists
        lostBookieRecoveryDelay            ASCII decimal seconds: 0
        auditorelection/                   text AuditorVoteFormat of the elected auditor
            V_0000000000                   ephemeral sequential; bookieId: "127.0.0.1:3181"\\n
        checkallledgersctime               *binary* CheckAllLedgersFormat

Most records are protobuf **text** format (``DataFormats.proto``): fields in number order,
unset optionals left out, strings in double quotes with protobuf-java's escapes, printed by
:mod:`bookiesim.metadata.text_format` (the cookies' printer too), so our bytes equal
upstream's for any string. Reading is as lenient as upstream's ``TextFormat.merge``: fields
in any order, a repeated singular field keeps its last value.

The ``checkallledgersctime`` node is the exception: upstream writes it with ``toByteArray``.

A mark's path spreads ledgers over a tree as upstream does: the id as 16 hex digits split
4/4/4/4, then ``urL`` and the id as ``%010d`` (more digits for ids past 10¹⁰). So each
innermost directory can hold only one ledger's mark, and deleting a mark deletes its
directory too (the manager prunes empty parents). A lock is ``locks/urL%010d``.

Bytes that are not a record raise :class:`UnderReplicationFormatError` (a ``ValueError``)
whose one line names the node and what was wrong.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from google.protobuf import text_format
from google.protobuf.message import DecodeError, Message

from bookiesim.metadata.errors import CorruptMetadataError
from bookiesim.metadata.store import join_path, validate_path
from bookiesim.metadata.text_format import print_text
from bookiesim.proto.DataFormats_pb2 import (
    AuditorVoteFormat,
    CheckAllLedgersFormat,
    LedgerRereplicationLayoutFormat,
    LockDataFormat,
    UnderreplicatedLedgerFormat,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "AUDITOR_ELECTION",
    "CHECK_ALL_LEDGERS_CTIME",
    "DISABLE",
    "LAYOUT_TYPE",
    "LAYOUT_VERSION",
    "LEDGERS",
    "LOCKS",
    "LOST_BOOKIE_RECOVERY_DELAY",
    "MARK_DEPTH",
    "UNDERREPLICATION",
    "VOTE_PREFIX",
    "UnderReplicationFormatError",
    "decode_check_all_ledgers_ctime",
    "decode_layout",
    "decode_lock",
    "decode_mark",
    "decode_recovery_delay",
    "decode_vote",
    "encode_check_all_ledgers_ctime",
    "encode_layout",
    "encode_lock",
    "encode_mark",
    "encode_recovery_delay",
    "encode_vote",
    "ledger_id_of_mark",
    "lock_name",
    "lock_path",
    "mark_dirs",
    "mark_path",
    "underreplication_path",
    "vote_sequence",
]

UNDERREPLICATION: Final = "underreplication"
LAYOUT: Final = "LAYOUT"
LEDGERS: Final = "ledgers"
LOCKS: Final = "locks"
DISABLE: Final = "disable"
LOST_BOOKIE_RECOVERY_DELAY: Final = "lostBookieRecoveryDelay"
CHECK_ALL_LEDGERS_CTIME: Final = "checkallledgersctime"
AUDITOR_ELECTION: Final = "auditorelection"
VOTE_PREFIX: Final = "V_"
MARK_PREFIX: Final = "urL"
LAYOUT_TYPE: Final = "BASIC"
LAYOUT_VERSION: Final = 1
MARK_DEPTH: Final = 4
"""Hex directories between ``ledgers/`` and a mark."""

_INT64_MAX: Final = 2**63 - 1
_INT32: Final = range(-(2**31), 2**31)
_MARK_NAME: Final = re.compile(r"urL([0-9]{10,})")
_VOTE_NAME: Final = re.compile(r"V_([0-9]+)")
_JAVA_INT: Final = re.compile(r"[+-]?[0-9]+")
_M = TypeVar("_M", bound=Message)


class UnderReplicationFormatError(CorruptMetadataError):
    """Stored bytes that are not the auto-recovery record their node should hold."""


# --- paths --------------------------------------------------------------------------------


def underreplication_path(root: str) -> str:
    """``<root>/underreplication``: everything of auto-recovery lives below it."""
    return join_path(validate_path(root), UNDERREPLICATION)


def _check_ledger_id(ledger_id: int) -> int:
    if isinstance(ledger_id, bool) or not isinstance(ledger_id, int):
        raise TypeError(f"ledger id must be an int, got {ledger_id!r}")
    if not 0 <= ledger_id <= _INT64_MAX:
        raise ValueError(f"ledger id must be in [0, {_INT64_MAX}], got {ledger_id}")
    return ledger_id


def mark_path(root: str, ledger_id: int) -> str:
    """Where ``ledger_id``'s under-replication mark lives:
    ``<root>/underreplication/ledgers/XXXX/XXXX/XXXX/XXXX/urL%010d``."""
    base = join_path(underreplication_path(root), LEDGERS)
    return f"{base}/{mark_dirs(ledger_id)}/{lock_name(ledger_id)}"


def mark_dirs(ledger_id: int) -> str:
    """The four directory levels of a mark below ``ledgers/``: ``XXXX/XXXX/XXXX/XXXX``."""
    h = f"{_check_ledger_id(ledger_id):016x}"
    return f"{h[0:4]}/{h[4:8]}/{h[8:12]}/{h[12:16]}"


def lock_name(ledger_id: int) -> str:
    """The name of a ledger's lock node (and of its mark): ``urL%010d``."""
    return f"{MARK_PREFIX}{_check_ledger_id(ledger_id):010d}"


def lock_path(root: str, ledger_id: int) -> str:
    """``<root>/underreplication/locks/urL%010d``: the ephemeral lock of a ledger's mark."""
    return join_path(join_path(underreplication_path(root), LOCKS), lock_name(ledger_id))


def ledger_id_of_mark(name: str) -> int | None:
    """The ledger id of a mark's or lock's node name (``urL0000000042`` → 42), or None for
    a name that is not one (upstream skips those too)."""
    match = _MARK_NAME.fullmatch(name)
    if match is None:
        return None
    ledger_id = int(match[1])
    return ledger_id if ledger_id <= _INT64_MAX else None


def vote_sequence(name: str) -> int | None:
    """The sequence number of an election vote (``V_0000000003`` → 3), None otherwise."""
    match = _VOTE_NAME.fullmatch(name)
    return None if match is None else int(match[1])


# --- text records -------------------------------------------------------------------------


def _parse(data: bytes, message: _M, where: str, what: str) -> _M:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnderReplicationFormatError(f"{where}: not {what}: not UTF-8 ({exc})") from None
    try:
        text_format.Merge(text, message)
    except (text_format.ParseError, DecodeError, ValueError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UnderReplicationFormatError(f"{where}: not {what}: {detail}") from None
    if not message.IsInitialized():
        missing = ", ".join(cast("Any", message).FindInitializationErrors())
        raise UnderReplicationFormatError(f"{where}: not {what}: {missing} missing")
    return message


def encode_layout(layout_type: str = LAYOUT_TYPE, version: int = LAYOUT_VERSION) -> bytes:
    """``LAYOUT``'s bytes (``type: "BASIC"\\nversion: 1\\n`` for the only layout there is)."""
    return print_text(LedgerRereplicationLayoutFormat(type=layout_type, version=version))


def decode_layout(data: bytes, where: str = LAYOUT) -> tuple[str, int]:
    """``(type, version)`` of a ``LAYOUT`` node; both fields are required."""
    msg = _parse(data, LedgerRereplicationLayoutFormat(), where, "a re-replication layout")
    return msg.type, msg.version


def encode_mark(replicas: Iterable[str], ctime_ms: int | None) -> bytes:
    """A mark: the missing replicas in the order given, then the mark time (ms since the
    epoch) unless None (upstream leaves it out with
    ``storeSystemTimeAsLedgerUnderreplicatedMarkTime=false``)."""
    msg = UnderreplicatedLedgerFormat(replica=list(replicas))
    if ctime_ms is not None:
        msg.ctime = ctime_ms
    return print_text(msg)


def decode_mark(data: bytes, where: str = MARK_PREFIX) -> tuple[tuple[str, ...], int | None]:
    """``(replicas, ctime_ms)`` of a mark; ctime None when the mark has none."""
    msg = _parse(data, UnderreplicatedLedgerFormat(), where, "an under-replicated ledger mark")
    return tuple(msg.replica), (msg.ctime if msg.HasField("ctime") else None)


def encode_lock(bookie_id: str | None) -> bytes:
    """A lock's data: who holds it, for people and ``lock_owner`` (empty when unknown, as
    upstream writes when it cannot name its host)."""
    return print_text(LockDataFormat() if bookie_id is None else LockDataFormat(bookieId=bookie_id))


def decode_lock(data: bytes, where: str = LOCKS) -> str | None:
    msg = _parse(data, LockDataFormat(), where, "a lock's data")
    return msg.bookieId if msg.HasField("bookieId") else None


def encode_vote(bookie_id: str) -> bytes:
    """An election vote's data, and the election node's once that bookie is elected."""
    return print_text(AuditorVoteFormat(bookieId=bookie_id))


def decode_vote(data: bytes, where: str = AUDITOR_ELECTION) -> str | None:
    msg = _parse(data, AuditorVoteFormat(), where, "an auditor vote")
    return msg.bookieId if msg.HasField("bookieId") else None


# --- the two records that are not text -----------------------------------------------------


def encode_recovery_delay(seconds: int) -> bytes:
    """``lostBookieRecoveryDelay``: ASCII decimal seconds, as Java's ``Integer.toString``."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds not in _INT32:
        raise ValueError(f"lostBookieRecoveryDelay must be a 32-bit int, got {seconds!r}")
    return str(seconds).encode("ascii")


def decode_recovery_delay(data: bytes, where: str = LOST_BOOKIE_RECOVERY_DELAY) -> int:
    """Seconds, read as Java's ``Integer.parseInt`` does (a sign, ASCII digits, 32 bits)."""
    text = data.decode("ascii", errors="replace")
    if not _JAVA_INT.fullmatch(text) or int(text) not in _INT32:
        raise UnderReplicationFormatError(
            f"{where}: not a lostBookieRecoveryDelay: {text[:40]!r} is not a 32-bit integer"
        )
    return int(text)


def encode_check_all_ledgers_ctime(ctime_ms: int) -> bytes:
    """``checkallledgersctime``: binary ``CheckAllLedgersFormat`` (upstream's ``toByteArray``)."""
    return CheckAllLedgersFormat(checkAllLedgersCTime=ctime_ms).SerializeToString()


def decode_check_all_ledgers_ctime(data: bytes, where: str = CHECK_ALL_LEDGERS_CTIME) -> int | None:
    """The time (ms) of the auditor's last check of all ledgers; None when unset."""
    msg = CheckAllLedgersFormat()
    try:
        msg.ParseFromString(data)
    except (DecodeError, ValueError) as exc:
        raise UnderReplicationFormatError(
            f"{where}: not a CheckAllLedgersFormat: {str(exc) or type(exc).__name__}"
        ) from None
    return msg.checkAllLedgersCTime if msg.HasField("checkAllLedgersCTime") else None
