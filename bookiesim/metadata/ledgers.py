"""Ledger metadata: the record, its life cycle, upstream's bytes, and where it lives.

Three layers, from pure to I/O:

1. :class:`LedgerMetadata` — upstream's ``LedgerMetadataFormat`` (reference §1.8) as an
   immutable value that checks its own invariants (E ≥ Qw ≥ Qa ≥ 1, every ensemble has E
   distinct bookies, first-entry ids increase, ``lastEntryId``/``length`` only once CLOSED).
2. The life cycle, in one table (:data:`ALLOWED_TRANSITIONS`) and one function
   (:func:`check_update`) that every write goes through. A ledger only moves forward::

       OPEN ──► IN_RECOVERY ──► CLOSED
         └───────────────────────▲

   Each state may also be "updated into itself": OPEN→OPEN is the writer's ensemble change,
   IN_RECOVERY→IN_RECOVERY a recovery's ensemble change (or a second recoverer), and
   CLOSED→CLOSED re-replication swapping a bookie of a closed ledger — with ``lastEntryId`` and
   ``length`` frozen. Quorum sizes, digest, password, ctime, custom metadata and cToken never
   change after creation; segments are never dropped, and new ones start after the last.
3. :class:`LedgerManager` — ids, paths and compare-and-set on any
   :class:`~bookiesim.metadata.store.MetadataStore`, plus :meth:`LedgerManager.update_with_retry`,
   the read-modify-CAS loop the client uses for ensemble changes, recovery and close.

Serialized form (upstream ``LedgerMetadataSerDe``, version 3): the protobuf message inside
the frame of :mod:`.ledger_format` (header, varint32 length). Fields are written as upstream
writes them: the required ones, ``lastEntryId`` (-1 while open), ``digestType`` and
``password`` (empty if none), ``ackQuorumSize`` and ``cToken`` always; ``ctime`` only when
known; custom metadata sorted by key (upstream's order is a HashMap's).

Paths: upstream's hierarchical layout, in :mod:`.ledger_paths`. Ids come from upstream's
ZooKeeper id generator scheme: an ephemeral sequential node ``/ledgers/idgen/ID-<10 digits>``
whose counter is the id, deleted right away.
"""

from __future__ import annotations

import bisect
import enum
import logging
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Final

import trio
from google.protobuf.message import DecodeError

from bookiesim.metadata.errors import (
    BadVersionError,
    CorruptMetadataError,
    IllegalUpdateError,
    InvalidMetadataError,
    MetadataError,
    NodeExistsError,
    NoNodeError,
    NoSuchLedgerError,
    SessionExpiredError,
)
from bookiesim.metadata.ledger_format import frame_metadata, unframe_metadata
from bookiesim.metadata.ledger_paths import (
    is_id_digits,
    is_leaf,
    ledger_path,
    top_level_depth,
)
from bookiesim.metadata.store import (
    ANY_VERSION,
    DEFAULT_LEDGERS_ROOT,
    MetadataStore,
    join_path,
    store_change_number,
    validate_path,
)
from bookiesim.proto import DataFormats_pb2 as pb

__all__ = [
    "ALLOWED_TRANSITIONS",
    "DEFAULT_LEDGERS_ROOT",
    "DigestType",
    "LedgerManager",
    "LedgerMetadata",
    "LedgerState",
    "check_update",
]

log = logging.getLogger(__name__)

_INT32_MAX: Final = 2**31 - 1
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_BOOKIE_ID: Final = re.compile(r"[A-Za-z0-9_.:\-\[\]]+")


class LedgerState(enum.IntEnum):
    """``LedgerMetadataFormat.State``, with its protobuf numbers."""

    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


class DigestType(enum.IntEnum):
    """``LedgerMetadataFormat.DigestType``, with its protobuf numbers.

    Defined here rather than imported from :mod:`bookiesim.client.digest` because the metadata
    layer sits below the client; both are ``IntEnum``\\ s with the same numbers, so their
    members compare equal and convert with ``DigestType(int(x))``.
    """

    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4


ALLOWED_TRANSITIONS: Final[Mapping[LedgerState, frozenset[LedgerState]]] = MappingProxyType(
    {
        LedgerState.OPEN: frozenset(
            {LedgerState.OPEN, LedgerState.IN_RECOVERY, LedgerState.CLOSED}
        ),
        LedgerState.IN_RECOVERY: frozenset({LedgerState.IN_RECOVERY, LedgerState.CLOSED}),
        LedgerState.CLOSED: frozenset({LedgerState.CLOSED}),
    }
)
"""Every legal ``old.state → new.state`` of a metadata update; nothing else is allowed."""

_IMMUTABLE_FIELDS: Final = (
    "ensemble_size",
    "write_quorum_size",
    "ack_quorum_size",
    "digest_type",
    "password",
    "ctime",
    "custom_metadata",
    "c_token",
)


def _int_in(name: str, value: object, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidMetadataError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return value


@dataclass(frozen=True)
class LedgerMetadata:
    """One ledger's metadata; immutable, validated on construction.

    ``ensembles`` maps each segment's first entry id to its bookies (BookieId strings such as
    ``127.0.0.1:3181``) and is kept sorted. Build updated versions with :meth:`in_recovery`,
    :meth:`closed`, :meth:`with_ensemble` (or ``dataclasses.replace``); :func:`check_update`
    decides whether one may replace another in the store.
    """

    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    ensembles: Mapping[int, Sequence[str]]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    digest_type: DigestType = DigestType.CRC32C
    password: bytes = field(default=b"", repr=False)
    ctime: int | None = None
    """Creation time in ms since the epoch; ``None`` = not stored (upstream's default)."""
    custom_metadata: Mapping[str, bytes] = field(default_factory=dict)
    c_token: int = 0

    def __post_init__(self) -> None:
        # Normalise to read-only, sorted, tuple-valued mappings so that equality, iteration
        # order and immutability do not depend on what the caller passed.
        ensembles = MappingProxyType({k: tuple(v) for k, v in sorted(dict(self.ensembles).items())})
        object.__setattr__(self, "ensembles", ensembles)
        object.__setattr__(self, "custom_metadata", MappingProxyType(dict(self.custom_metadata)))
        object.__setattr__(self, "password", bytes(self.password))
        self._check()

    # --- invariants ------------------------------------------------------------------------

    def _check(self) -> None:
        """Raise :class:`InvalidMetadataError` unless every invariant holds. O(E * segments)."""
        e = _int_in("ensemble_size", self.ensemble_size, 1, _INT32_MAX)
        qw = _int_in("write_quorum_size", self.write_quorum_size, 1, _INT32_MAX)
        qa = _int_in("ack_quorum_size", self.ack_quorum_size, 1, _INT32_MAX)
        if not e >= qw >= qa:
            raise InvalidMetadataError(
                f"need ensemble size >= write quorum >= ack quorum >= 1, got E={e} Qw={qw} Qa={qa}"
            )
        if not isinstance(self.state, LedgerState):
            raise InvalidMetadataError(f"state must be a LedgerState, got {self.state!r}")
        if not isinstance(self.digest_type, DigestType):
            raise InvalidMetadataError(
                f"digest_type must be a DigestType, got {self.digest_type!r}"
            )
        if not self.ensembles:
            raise InvalidMetadataError("a ledger needs at least one ensemble")
        firsts = list(self.ensembles)
        if firsts != sorted(firsts):  # __post_init__ sorts; a value built around it may not
            raise InvalidMetadataError(f"ensembles must be sorted by first entry id: {firsts}")
        for first, members in self.ensembles.items():
            _int_in("first entry id of an ensemble", first, 0, _INT64_MAX)
            if len(members) != e:
                raise InvalidMetadataError(
                    f"ensemble at entry {first} has {len(members)} bookies, ensemble size is {e}"
                )
            for m in members:
                if not isinstance(m, str) or not _BOOKIE_ID.fullmatch(m):
                    raise InvalidMetadataError(f"ensemble at entry {first}: bad bookie id {m!r}")
            if len(set(members)) != e:
                raise InvalidMetadataError(f"ensemble at entry {first} repeats a bookie: {members}")
        if self.state is LedgerState.CLOSED:
            _int_in("last_entry_id", self.last_entry_id, -1, _INT64_MAX)
            _int_in("length", self.length, 0, _INT64_MAX)
        elif self.last_entry_id != -1 or self.length != 0:
            raise InvalidMetadataError(
                f"a {self.state.name} ledger has lastEntryId -1 and length 0, got "
                f"{self.last_entry_id} and {self.length}"
            )
        if self.ctime is not None:
            _int_in("ctime", self.ctime, _INT64_MIN, _INT64_MAX)
        _int_in("c_token", self.c_token, _INT64_MIN, _INT64_MAX)
        for k, v in self.custom_metadata.items():
            if not isinstance(k, str) or not isinstance(v, bytes):
                raise InvalidMetadataError(
                    f"custom metadata maps str to bytes, got {k!r}: {type(v).__name__}"
                )

    # --- queries -------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    @property
    def last_ensemble(self) -> tuple[int, tuple[str, ...]]:
        """``(first_entry_id, bookies)`` of the segment new entries go to."""
        first = _last_key(self.ensembles)
        return first, tuple(self.ensembles[first])

    def ensemble_at(self, entry_id: int) -> tuple[str, ...]:
        """The bookies that store ``entry_id``: the segment with the largest first id ≤ it."""
        keys = list(self.ensembles)
        i = bisect.bisect_right(keys, entry_id) - 1
        if i < 0:
            raise ValueError(f"entry {entry_id} precedes the first ensemble (entry {keys[0]})")
        return tuple(self.ensembles[keys[i]])

    def bookies(self) -> set[str]:
        """Every bookie that appears in any ensemble (the set GC checks against)."""
        return {b for members in self.ensembles.values() for b in members}

    # --- updates (pure; each result still has to pass check_update) ---------------------

    def in_recovery(self) -> LedgerMetadata:
        """This ledger marked IN_RECOVERY (the first step of recovery)."""
        return replace(self, state=LedgerState.IN_RECOVERY)

    def closed(self, last_entry_id: int, length: int) -> LedgerMetadata:
        """This ledger CLOSED at ``last_entry_id`` (-1: empty) with ``length`` bytes."""
        return replace(self, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)

    def with_ensemble(self, first_entry_id: int, bookies: Iterable[str]) -> LedgerMetadata:
        """An ensemble change: ``bookies`` store entries from ``first_entry_id`` on.

        Replaces the last segment if it starts at the same entry (no entry was written to it),
        otherwise appends a segment.
        """
        ensembles = dict(self.ensembles)
        ensembles[first_entry_id] = tuple(bookies)
        return replace(self, ensembles=ensembles)

    # --- bytes ---------------------------------------------------------------------------

    def to_proto(self) -> pb.LedgerMetadataFormat:
        fmt = pb.LedgerMetadataFormat(
            quorumSize=self.write_quorum_size,
            ensembleSize=self.ensemble_size,
            length=self.length,
            lastEntryId=self.last_entry_id,
            state=pb.LedgerMetadataFormat.State.ValueType(self.state.value),
            digestType=pb.LedgerMetadataFormat.DigestType.ValueType(self.digest_type.value),
            password=self.password,
            ackQuorumSize=self.ack_quorum_size,
            cToken=self.c_token,
        )
        if self.ctime is not None:
            fmt.ctime = self.ctime
        for first, members in self.ensembles.items():
            fmt.segment.add(firstEntryId=first, ensembleMember=list(members))
        for key in sorted(self.custom_metadata):
            fmt.customMetadata.add(key=key, value=self.custom_metadata[key])
        return fmt

    def to_bytes(self) -> bytes:
        """Upstream's stored form: version-3 header + varint length + protobuf."""
        return frame_metadata(self.to_proto().SerializeToString())

    @classmethod
    def from_proto(cls, fmt: pb.LedgerMetadataFormat) -> LedgerMetadata:
        """Decode as upstream does: absent ackQuorumSize = write quorum; lastEntryId and
        length only count when CLOSED; digest type only with a password."""
        try:
            state = LedgerState(fmt.state)
            closed = state is LedgerState.CLOSED
            ensembles: dict[int, tuple[str, ...]] = {}
            for seg in fmt.segment:
                if ensembles and seg.firstEntryId <= _last_key(ensembles):
                    raise CorruptMetadataError(
                        f"segments out of order: entry {seg.firstEntryId} after "
                        f"{_last_key(ensembles)}"
                    )
                ensembles[seg.firstEntryId] = tuple(seg.ensembleMember)
            has_password = fmt.HasField("password")
            return cls(
                ensemble_size=fmt.ensembleSize,
                write_quorum_size=fmt.quorumSize,
                ack_quorum_size=fmt.ackQuorumSize
                if fmt.HasField("ackQuorumSize")
                else fmt.quorumSize,
                ensembles=ensembles,
                state=state,
                last_entry_id=fmt.lastEntryId if closed else -1,
                length=fmt.length if closed else 0,
                digest_type=DigestType(fmt.digestType) if has_password else DigestType.CRC32C,
                password=fmt.password if has_password else b"",
                ctime=fmt.ctime if fmt.HasField("ctime") else None,
                custom_metadata={e.key: e.value for e in fmt.customMetadata},
                c_token=fmt.cToken if fmt.HasField("cToken") else 0,
            )
        except InvalidMetadataError as exc:
            raise CorruptMetadataError(f"invalid ledger metadata: {exc}") from exc
        except ValueError as exc:  # an enum number we do not know
            raise CorruptMetadataError(f"invalid ledger metadata: {exc}") from exc

    @classmethod
    def from_bytes(cls, data: bytes) -> LedgerMetadata:
        """Parse upstream's stored form (version 3). Raises :class:`CorruptMetadataError`."""
        body = unframe_metadata(data)
        fmt = pb.LedgerMetadataFormat()
        try:
            fmt.ParseFromString(body)
        except DecodeError as exc:
            raise CorruptMetadataError(f"ledger metadata does not parse: {exc}") from exc
        if not fmt.IsInitialized():
            raise CorruptMetadataError("ledger metadata lacks required fields")
        return cls.from_proto(fmt)


def check_update(old: LedgerMetadata, new: LedgerMetadata) -> None:
    """Raise :class:`IllegalUpdateError` unless ``new`` may replace ``old`` in the store.

    The one place the ledger life cycle is enforced (see the module docstring).
    """
    if new.state not in ALLOWED_TRANSITIONS[old.state]:
        raise IllegalUpdateError(
            f"ledger state cannot go from {old.state.name} to {new.state.name}"
        )
    for name in _IMMUTABLE_FIELDS:
        if getattr(old, name) != getattr(new, name):
            raise IllegalUpdateError(f"{name} cannot change after the ledger is created")
    if old.is_closed and (old.last_entry_id, old.length) != (new.last_entry_id, new.length):
        raise IllegalUpdateError(
            f"a CLOSED ledger keeps lastEntryId {old.last_entry_id} and length {old.length}; "
            f"got {new.last_entry_id} and {new.length}"
        )
    missing = [k for k in old.ensembles if k not in new.ensembles]
    if missing:
        raise IllegalUpdateError(f"segments starting at {missing} cannot be removed")
    last_old = _last_key(old.ensembles)
    early = [k for k in new.ensembles if k not in old.ensembles and k <= last_old]
    if early:
        raise IllegalUpdateError(
            f"new segments must start after the last one (entry {last_old}), got {early}"
        )


# --- helpers ------------------------------------------------------------------------------


def _last_key(ensembles: Mapping[int, object]) -> int:
    """The largest first-entry id (ensembles are kept sorted, so the last one)."""
    return list(ensembles)[-1]


# --- the manager ----------------------------------------------------------------------------

UpdateFn = Callable[[LedgerMetadata], LedgerMetadata | None]
"""Given the current metadata, the desired one — or ``None`` (or the same) for "no change"."""


class LedgerManager:
    """Ledger ids and metadata on a metadata store (upstream's LedgerManager + id generator).

    Every method is one or a few store operations; there is no cache (except a listing
    reused while the store's exact change number says nothing changed), so two managers (two
    processes) on the same store always see each other's writes, and conflicts surface as
    ``BadVersionError`` for the caller — or :meth:`update_with_retry` — to resolve.
    """

    def __init__(self, store: MetadataStore, root: str | None = None) -> None:
        self.store = store
        self.root = validate_path(store.ledgers_root if root is None else root)
        self._idgen_prefix = join_path(self.root, "idgen/ID-")
        # (store change number, ledger ids) of the last complete walk that no change
        # overlapped; see list_ledgers.
        self._listed: tuple[int, list[int]] | None = None

    def path_of(self, ledger_id: int) -> str:
        """The node holding ``ledger_id``'s metadata (watch it to see the ledger close)."""
        return ledger_path(ledger_id, self.root)

    async def allocate_ledger_id(self) -> int:
        """A ledger id no other allocator on this store has returned or will return.

        Upstream's ZooKeeper scheme: create the ephemeral sequential node
        ``<root>/idgen/ID-`` and take its counter; the node is deleted at once (it would go
        with the session anyway). Ids only grow; they are consecutive while nothing else
        creates children of ``idgen``.
        """
        for attempt in range(5):
            try:
                path = await self.store.create(
                    self._idgen_prefix, b"", ephemeral=True, sequential=True, make_parents=True
                )
                break
            except SessionExpiredError:
                # The node is ephemeral only so that it cannot outlive us; a session that
                # just expired is no reason to fail the caller once the new one is up.
                if attempt == 4:
                    raise
                await trio.sleep(0.05 * 2**attempt)
        ledger_id = int(path[len(self._idgen_prefix) :])
        try:
            await self.store.delete(path)
        except MetadataError as exc:  # harmless: it is ephemeral
            log.warning("could not delete id node %s: %s", path, exc)
        return ledger_id

    async def create(self, metadata: LedgerMetadata, ledger_id: int | None = None) -> int:
        """Store ``metadata`` for a new ledger (version 0) and return its id.

        Without ``ledger_id`` an id is allocated (and another one tried should a node already
        be there, as upstream does); with one (``createAdv``-style), an existing ledger raises
        ``NodeExistsError``.
        """
        data = metadata.to_bytes()
        if ledger_id is not None:
            await self.store.create(self.path_of(ledger_id), data, make_parents=True)
            return ledger_id
        for _ in range(10):
            candidate = await self.allocate_ledger_id()
            try:
                await self.store.create(self.path_of(candidate), data, make_parents=True)
            except NodeExistsError:
                log.warning("ledger id %d already has metadata; allocating another", candidate)
                continue
            return candidate
        raise MetadataError(f"{self.root}: every allocated ledger id was already taken")

    async def read(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        """The ledger's metadata and the version to name in a later :meth:`write`."""
        path = self.path_of(ledger_id)
        node = await self.store.get(path)
        if node is None:
            raise NoSuchLedgerError(ledger_id, path)
        try:
            return LedgerMetadata.from_bytes(node.value), node.version
        except CorruptMetadataError as exc:
            raise CorruptMetadataError(f"{path}: {exc}") from exc

    async def write(self, ledger_id: int, metadata: LedgerMetadata, expected_version: int) -> int:
        """Compare-and-set the metadata; returns the new version.

        The stored metadata is read first so that :func:`check_update` can refuse an illegal
        change (``IllegalUpdateError``) before anything is written; the set itself is still
        conditional on ``expected_version``, so a concurrent writer makes this fail with
        ``BadVersionError`` rather than be overwritten.
        """
        current, version = await self.read(ledger_id)
        path = self.path_of(ledger_id)
        if expected_version != ANY_VERSION and version != expected_version:
            raise BadVersionError(path, expected_version, version)
        check_update(current, metadata)
        try:
            return await self.store.set(path, metadata.to_bytes(), version)
        except NoNodeError:
            raise NoSuchLedgerError(ledger_id, path) from None

    async def delete(self, ledger_id: int, expected_version: int = ANY_VERSION) -> None:
        """Remove the ledger's metadata (the bookies' GC then reclaims its entries)."""
        path = self.path_of(ledger_id)
        try:
            await self.store.delete(path, expected_version)
        except NoNodeError:
            raise NoSuchLedgerError(ledger_id, path) from None

    async def list_ledgers(self) -> list[int]:
        """Every ledger id with metadata, sorted (walks both path layouts).

        Exact, never stale: a store with an exact change number
        (:func:`~bookiesim.metadata.store.store_change_number`; the in-memory one) lets the
        last walk be reused while that number is unchanged. The walk is kept only if the
        number was the same before and after it, so it is a snapshot of that one state of
        the tree, and an equal number later means the same tree (no ledger created or
        deleted). ZooKeeper and SQLite have none: every call walks, as before. GC's
        scan-and-compare (``bookiesim.gc.ledgers``) therefore sees a deletion on its next
        pass either way.
        """
        before = store_change_number(self.store)
        listed = self._listed
        if before is not None and listed is not None and listed[0] == before:
            return list(listed[1])
        ids = await self._walk_ledgers()
        if before is not None and store_change_number(self.store) == before:
            self._listed = (before, ids)
            return list(ids)
        self._listed = None
        return ids

    async def _walk_ledgers(self) -> list[int]:
        ids: list[int] = []
        for top in await self._children(self.root):
            depth = top_level_depth(top)
            if depth is None:
                continue  # idgen, available, LAYOUT, ... live beside the ledgers
            await self._walk(join_path(self.root, top), top, depth, ids)
        return sorted(ids)

    async def _walk(self, path: str, digits: str, depth: int, out: list[int]) -> None:
        for name in await self._children(path):
            if depth == 0:
                if is_leaf(name):
                    out.append(int(digits + name[1:]))
            elif is_id_digits(name):
                await self._walk(join_path(path, name), digits + name, depth - 1, out)

    async def _children(self, path: str) -> list[str]:
        try:
            return await self.store.children(path)
        except NoNodeError:
            return []  # not created yet, or removed while we walked

    async def update_with_retry(
        self, ledger_id: int, fn: UpdateFn, *, max_attempts: int = 100
    ) -> tuple[LedgerMetadata, int]:
        """Read, apply ``fn``, compare-and-set; on a conflict re-read and apply ``fn`` again.

        ``fn`` sees the *current* metadata each time, so it can decide afresh (e.g. "already
        closed by a recoverer: nothing to do" → return ``None``) or raise to give up. Returns
        the metadata and version now stored. Illegal results raise ``IllegalUpdateError`` at
        once; ``MetadataError`` after ``max_attempts`` conflicts in a row.
        """
        path = self.path_of(ledger_id)
        for attempt in range(max_attempts):
            current, version = await self.read(ledger_id)
            desired = fn(current)
            if desired is None or desired == current:
                return current, version
            check_update(current, desired)
            try:
                new_version = await self.store.set(path, desired.to_bytes(), version)
            except BadVersionError:
                # Someone else updated it first: back off a little (with jitter, so two
                # contenders do not collide in lockstep) and re-read.
                await trio.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
                continue
            except NoNodeError:
                raise NoSuchLedgerError(ledger_id, path) from None
            return desired, new_version
        raise MetadataError(f"{path}: gave up after {max_attempts} conflicting updates")
