"""BookKeeper client: digests, ledger handles, quorum writes, recovery, write-close.

The public surface is re-exported here; the modules behind it are small and each says why it
exists: :mod:`.distribution` (striping and quorum coverage, sans-IO), :mod:`.wire`
(hand-encoded hot-path requests, sans-IO), :mod:`.bookie_connection` and :mod:`.bookie_pool`
(one pipelined connection per bookie), :mod:`.read_handle` (reads),
:mod:`.ledger_handle` (pipelined writes, ensemble changes, close) with :mod:`.add_future`
and :mod:`.handle_state` (its one state table, sans-IO), :mod:`.context` (what a handle and
a recovery need of their client), :mod:`.failed_bookies` (when a change may reuse a bookie that
failed, sans-IO), :mod:`.recovery` (fencing and tail recovery), :mod:`.bookkeeper`
(the client object), :mod:`.errors`, :mod:`.digest`, and :mod:`.testing` (a local cluster,
fault injection and a trio driver for tests).
"""

from bookiesim.client.add_future import AddFuture
from bookiesim.client.bookie_pool import BookieConnector, tcp_connector
from bookiesim.client.bookkeeper import BookKeeper
from bookiesim.client.context import ClientConfig, ClientStats, EnsembleProposal
from bookiesim.client.digest import DigestMismatchError, DigestType
from bookiesim.client.errors import (
    BKError,
    BookieRequestError,
    BookieUnavailableError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerRecoveryError,
    MetadataConflictError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    UnauthorizedError,
)
from bookiesim.client.ledger_handle import LedgerHandle
from bookiesim.client.read_handle import LedgerEntry, ReadOnlyLedgerHandle

__all__ = [
    "AddFuture",
    "BKError",
    "BookKeeper",
    "BookieConnector",
    "BookieRequestError",
    "BookieUnavailableError",
    "ClientConfig",
    "ClientStats",
    "DigestMismatchError",
    "DigestType",
    "EnsembleProposal",
    "LedgerClosedError",
    "LedgerEntry",
    "LedgerFencedError",
    "LedgerHandle",
    "LedgerRecoveryError",
    "MetadataConflictError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NotEnoughBookiesError",
    "ReadOnlyLedgerHandle",
    "UnauthorizedError",
    "tcp_connector",
]
