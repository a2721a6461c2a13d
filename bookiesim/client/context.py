"""What a ledger handle and a recovery need of their client: :class:`ClientContext`.

Upstream's ``LedgerHandle`` gets a narrow ``ClientContext`` rather than the whole
``BookKeeper``; so do ours. The handle (:mod:`.ledger_handle`, :mod:`.read_handle`) and the
recovery (:mod:`.recovery`) depend on this module only, and :mod:`.bookkeeper` — which makes
handles and runs recoveries — implements it, so the imports point one way:
bookkeeper → recovery → ledger_handle → read_handle → context.

The client's settings (:class:`ClientConfig`) and counters (:class:`ClientStats`) live here
too, since both sides name them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import random

    import trio

    from bookiesim.client.bookie_pool import BookiePool
    from bookiesim.metadata.ledgers import LedgerManager, LedgerMetadata
    from bookiesim.metadata.registration import BookieInfo
    from bookiesim.proto.tls import TLSSettings

__all__ = ["ClientConfig", "ClientContext", "ClientStats", "EnsembleProposal"]


@dataclass(frozen=True)
class ClientConfig:
    """Client settings; upstream's names in brackets where there is one."""

    request_timeout: float = 10.0
    """Seconds a bookie has to answer a request [addEntryTimeoutSec, readEntryTimeoutSec]."""
    connect_timeout: float = 5.0
    """Seconds to open a connection [connectTimeoutMillis]."""
    seed: int | None = None
    """Seeds the random choice of ensembles and replacements (None: not reproducible)."""
    read_window: int = 64
    """Entries read concurrently by ``read_entries``."""
    recovery_read_window: int = 512
    """Entries recovery reads ahead of the one it is deciding, at most (it starts with a
    few and doubles) [upstream reads recoveryReadBatchSize entries at a time]."""
    parallel_recovery_reads: bool = False
    """Ask every replica of an entry at once during recovery, instead of one after the
    other [enableParallelRecoveryRead]. Faster to rule an entry out, twice the reads."""
    explicit_lac_interval: float | None = None
    """If set, a writer idle this long with an unsent LAC sends it by WriteLac
    [explicitLacInterval]."""
    bookie_retry_backoff: float = 0.1
    """Seconds before an ensemble change may reuse a bookie that failed this ledger handle,
    when no bookie that did not is left; doubled with each failure in a row, back to this at
    the bookie's first acknowledged add (:mod:`.failed_bookies`). No upstream counterpart."""
    bookie_retry_backoff_max: float = 5.0
    """The longest such wait, in seconds."""
    write_close_grace: float = 1.0
    """On leaving the client, how long WriteCloses still in flight may take."""
    use_v2_wire_protocol: bool = False
    """Speak BookKeeper's v2 protocol to bookies, as Pulsar's brokers do [useV2WireProtocol].
    Adds and reads only: WriteClose (a v3 extension) is not sent, nor is WriteLac (upstream's
    client would send it as v3, which a connection already in v2 cannot decode)."""
    tls: TLSSettings | None = None
    """Send START_TLS on every connection and go on over TLS when these settings enable it
    (``tlsProviderFactoryClass`` set; upstream's client keys: :mod:`.tls`)."""
    start_tls_timeout: float = 10.0
    """Seconds for START_TLS and the handshake [startTLSTimeoutSecs]."""
    unsafe_recovery_reads_without_fence: bool = False
    """Re-create upstream bug #2614 (BookKeeper ≤ 4.13): recovery reads entries without the
    fencing flag, so a zombie writer can still get an entry acknowledged that recovery
    declared missing. For fault campaigns only; never in real use."""
    unsafe_recovery_below_last_ensemble: bool = False
    """Re-create upstream bug #2615 (BookKeeper ≤ 4.13): recovery starts at the LAC the
    fencing reads found, not floored at the last ensemble's first entry - 1, and reads each
    entry from its own segment's bookies. Entries of an earlier segment are then re-added to
    the last ensemble, and a failed re-add proposes an ensemble change below that segment
    (invariant S5). For fault campaigns only; never in real use."""


@dataclass(frozen=True)
class EnsembleProposal:
    """An ensemble change some handle of this client proposed (for invariants S5)."""

    ledger_id: int
    first_entry_id: int
    ensemble: tuple[str, ...]
    by_recovery: bool


@dataclass
class ClientStats:
    """Counters of one client (what a test or an operator asks "how often did X happen")."""

    adds_completed: int = 0
    adds_failed: int = 0
    adds_under_replicated: int = 0
    """Adds a bookie of the write set failed after they had their ack quorum (upstream's
    ADD_OP_UR): each such entry has fewer than Qw copies until re-replication notices."""
    ensemble_changes: int = 0
    metadata_conflicts: int = 0
    """Compare-and-set attempts that lost a race and were retried."""
    recoveries: int = 0
    recovered_entries: int = 0
    write_close_sent: int = 0
    write_close_ok: int = 0
    write_close_failed: int = 0
    write_close_skipped: int = 0
    """Ensemble bookies not sent a WriteClose: not registered, or not advertising it."""
    proposals: deque[EnsembleProposal] = field(default_factory=lambda: deque(maxlen=1000))
    """The latest ensemble changes proposed (kept for checks; bounded)."""

    def record_proposal(
        self, ledger_id: int, first: int, ensemble: tuple[str, ...], by_recovery: bool
    ) -> None:
        self.proposals.append(EnsembleProposal(ledger_id, first, ensemble, by_recovery))


class ClientContext(Protocol):
    """The eight things of its client a handle or a recovery uses, and nothing else."""

    @property
    def config(self) -> ClientConfig: ...

    @property
    def stats(self) -> ClientStats: ...

    @property
    def rng(self) -> random.Random:
        """Chooses replacement bookies (seeded by ``ClientConfig.seed``)."""
        ...

    @property
    def ledger_manager(self) -> LedgerManager: ...

    @property
    def pool(self) -> BookiePool:
        """The client's one connection per bookie."""
        ...

    @property
    def nursery(self) -> trio.Nursery:
        """Where work that outlives a call runs (ensemble changes, explicit LAC)."""
        ...

    async def live_bookies(self) -> dict[str, BookieInfo]:
        """The bookies registered now, by id."""
        ...

    async def read_only_bookies(self) -> dict[str, BookieInfo]:
        """The bookies registered read-only now (full disks, or an operator's choice), by
        id: never chosen, but named when too few writable ones are left."""
        ...

    def send_write_close(self, ledger_id: int, metadata: LedgerMetadata, master_key: bytes) -> None:
        """Tell the ledger's bookies that its writer is done, in the background."""
        ...
