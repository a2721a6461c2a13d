"""Metadata store: one interface, SQLite and ZooKeeper backends.

::

    async with open_store("sqlite:///tmp/cluster/meta.db") as store:
        ledgers = LedgerManager(store)
        ledger_id = await ledgers.create(metadata)
        me = BookieInfo("127.0.0.1:3181", port=3181, features=frozenset({FEATURE_WRITE_CLOSE}))
        async with register_bookie(store, me):
            bookies = await live_bookies(store)

Paths are under the store's ledgers root (``store.ledgers_root``: a ``zk://`` URI's path, as
upstream reads ``metadataServiceUri``; ``/ledgers`` for SQLite), and every ``root`` argument
defaults to it. See ``docs/metadata.md`` for URIs, the layout of paths, serialized forms and
liveness rules.
The ZooKeeper backend (and kazoo) is only imported when a ``zk://`` URI is opened.
"""

from bookiesim.metadata.errors import (
    BadVersionError,
    CorruptMetadataError,
    IllegalUpdateError,
    InvalidMetadataError,
    InvalidUriError,
    MetadataError,
    MovedLedgersRootError,
    NoChildrenForEphemeralsError,
    NoClusterError,
    NodeExistsError,
    NoNodeError,
    NoSuchLedgerError,
    NotEmptyError,
    SessionExpiredError,
    StoreUnavailableError,
)
from bookiesim.metadata.factory import open_store, scheme_of
from bookiesim.metadata.ledger_format import METADATA_HEADER
from bookiesim.metadata.ledger_paths import ledger_id_from_path, ledger_path
from bookiesim.metadata.ledgers import (
    ALLOWED_TRANSITIONS,
    DigestType,
    LedgerManager,
    LedgerMetadata,
    LedgerState,
    check_update,
)
from bookiesim.metadata.registration import (
    FEATURE_WRITE_CLOSE,
    BookieIdInUseError,
    BookieInfo,
    BookieRegistration,
    bookie_address,
    live_bookies,
    read_only_bookies,
    register_bookie,
    registered_bookies,
    watch_live_bookies,
)
from bookiesim.metadata.store import ANY_VERSION, Change, MetadataStore, Versioned

__all__ = [
    "ALLOWED_TRANSITIONS",
    "ANY_VERSION",
    "FEATURE_WRITE_CLOSE",
    "METADATA_HEADER",
    "BadVersionError",
    "BookieIdInUseError",
    "BookieInfo",
    "BookieRegistration",
    "Change",
    "CorruptMetadataError",
    "DigestType",
    "IllegalUpdateError",
    "InvalidMetadataError",
    "InvalidUriError",
    "LedgerManager",
    "LedgerMetadata",
    "LedgerState",
    "MetadataError",
    "MetadataStore",
    "MovedLedgersRootError",
    "NoChildrenForEphemeralsError",
    "NoClusterError",
    "NoNodeError",
    "NoSuchLedgerError",
    "NodeExistsError",
    "NotEmptyError",
    "SessionExpiredError",
    "StoreUnavailableError",
    "Versioned",
    "bookie_address",
    "check_update",
    "ledger_id_from_path",
    "ledger_path",
    "live_bookies",
    "open_store",
    "read_only_bookies",
    "register_bookie",
    "registered_bookies",
    "scheme_of",
    "watch_live_bookies",
]
