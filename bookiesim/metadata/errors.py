"""Errors of the metadata store, the same for every backend.

Why one small hierarchy of our own: callers (the client's compare-and-set loops, bookie
registration, the CLI) must react to *what* went wrong — a lost race, a missing node, a dead
session — without knowing whether SQLite or ZooKeeper is underneath. Each backend translates
its own failures into these classes, and every message names the path (or URI) concerned, so
a log line is enough to find the node.

``MetadataError`` is the root; ``except MetadataError`` catches everything the store raises on
purpose. Errors that are really bad input (an invalid URI, metadata that breaks its own
invariants, unparseable bytes) are also ``ValueError``\\ s.
"""

from __future__ import annotations

__all__ = [
    "BadVersionError",
    "CorruptMetadataError",
    "IllegalUpdateError",
    "InvalidMetadataError",
    "InvalidUriError",
    "MetadataError",
    "MovedLedgersRootError",
    "NoChildrenForEphemeralsError",
    "NoClusterError",
    "NoNodeError",
    "NoSuchLedgerError",
    "NodeExistsError",
    "NotEmptyError",
    "SessionExpiredError",
    "StoreUnavailableError",
]


class MetadataError(Exception):
    """Root of every error the metadata package raises on purpose."""


class NodeError(MetadataError):
    """An error about one node; ``path`` names it (relative to the store's root)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class NoNodeError(NodeError):
    """The node (or, for a create, its parent) does not exist."""

    def __init__(self, path: str, message: str = "no such node") -> None:
        super().__init__(path, message)


class NodeExistsError(NodeError):
    """A create found the node already there."""

    def __init__(self, path: str, message: str = "node already exists") -> None:
        super().__init__(path, message)


class BadVersionError(NodeError):
    """A compare-and-set (set or delete with an expected version) lost a race.

    ``actual`` is the version the node had when the failure was seen, when the backend can
    tell (SQLite reads it in the same transaction; ZooKeeper does not report it, so it is read
    right after and may already be stale). ``None`` when unknown.
    """

    def __init__(self, path: str, expected: int, actual: int | None) -> None:
        seen = "unknown" if actual is None else str(actual)
        super().__init__(path, f"bad version: expected {expected}, node is at version {seen}")
        self.expected = expected
        self.actual = actual


class NotEmptyError(NodeError):
    """A delete found children under the node (deletes are never recursive)."""

    def __init__(self, path: str, message: str = "node has children") -> None:
        super().__init__(path, message)


class NoChildrenForEphemeralsError(NodeError):
    """A create under an ephemeral node: ephemerals are leaves, as in ZooKeeper."""

    def __init__(self, path: str, message: str = "ephemeral nodes cannot have children") -> None:
        super().__init__(path, message)


class SessionExpiredError(MetadataError):
    """The store's session expired: its ephemeral nodes are gone.

    The store starts a new session by itself; whoever owned ephemerals (a bookie's
    registration) must create them again.
    """


class StoreUnavailableError(MetadataError):
    """The store did not answer in time (ZooKeeper connection loss, SQLite busy timeout).

    For ZooKeeper the operation may or may not have been applied: re-read before retrying a
    compare-and-set. A SQLite busy timeout always means the transaction was rolled back.
    """


class InvalidUriError(MetadataError, ValueError):
    """A ``metadataServiceUri`` that no backend understands; the message quotes it."""


class MovedLedgersRootError(InvalidUriError):
    """A ``metadataServiceUri`` in the previous version's form: its path was a chroot with
    the cluster at ``<path>/ledgers``; now the path *is* the ledgers root (upstream's
    meaning). Raised, instead of starting an empty cluster beside the data, when the URI's
    root holds no cluster but ``<root>/ledgers`` does. ``suggested`` is the URI to use."""

    def __init__(self, uri: str, root: str, old_root: str, suggested: str) -> None:
        super().__init__(
            f"{uri}: metadataServiceUri now names the ledgers root ({root}), and there is no "
            f"cluster there; the data of this cluster is at {old_root}: use {suggested}"
        )
        self.uri = uri
        self.root = root
        self.old_root = old_root
        self.suggested = suggested


class NoClusterError(MetadataError):
    """The URI's ledgers root holds no BookKeeper cluster (no ``INSTANCEID``): a client was
    pointed at an empty or wrong path. Bookies initialise a root; clients only use one."""

    def __init__(self, uri: str, root: str) -> None:
        super().__init__(
            f"no BookKeeper cluster at {uri}: no INSTANCEID under {root} "
            "(start a bookie there first, or check the path)"
        )
        self.uri = uri
        self.root = root


class InvalidMetadataError(MetadataError, ValueError):
    """Ledger metadata that breaks its own invariants (e.g. Qa > Qw)."""


class IllegalUpdateError(InvalidMetadataError):
    """An update that the ledger life cycle forbids (e.g. CLOSED back to OPEN)."""


class CorruptMetadataError(MetadataError, ValueError):
    """Stored bytes that are not ledger metadata in a format we read."""


class NoSuchLedgerError(NoNodeError):
    """The ledger has no metadata node (never created, or deleted)."""

    def __init__(self, ledger_id: int, path: str) -> None:
        super().__init__(path, f"ledger {ledger_id} does not exist")
        self.ledger_id = ledger_id
