"""Every configuration key upstream BookKeeper 4.17.4 defines, and what bookiesim does with it.

Why: an operator's ``bk_server.conf`` is upstream's file, and upstream reads whatever keys it
holds. bookiesim refuses a key it does not know (a typo must not pass silently), so it has to
know upstream's whole vocabulary: a key upstream defines is either applied, with upstream's
meaning, or accepted and named in one start-up warning; only a key upstream does not define
either is refused.

:data:`UPSTREAM_KEYS` maps each key to the bookiesim key it sets (itself, for the keys
bookiesim has under the same name; another key for upstream's legacy spellings) or to None
when bookiesim accepts it and does not apply it. The names come from upstream 4.17.4's
``ServerConfiguration`` and ``AbstractConfiguration`` (their key constants), from the keys its
shipped ``conf/bk_server.conf`` sets (some read by other classes: the stats providers,
``DbLedgerStorage``, the client inside the bookie, stream storage) and from
``DbLedgerStorage``'s remaining ``dbStorage_*`` keys. A test holds the applied ones against
the registry in :mod:`bookiesim.bookie.config`.

Pure data and string functions; :mod:`bookiesim.bookie.config` does the parsing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "LEGACY_KEYS",
    "UPSTREAM_KEYS",
    "legacy_metadata_uri",
    "not_applied_warning",
    "render_markdown",
]

METADATA_SERVICE_URI: Final = "metadataServiceUri"
ZK_SERVERS: Final = "zkServers"
ZK_LEDGERS_ROOT_PATH: Final = "zkLedgersRootPath"
COMPACTION_RATE: Final = "compactionRate"
DEFAULT_LEDGERS_ROOT: Final = "/ledgers"
"""Upstream's default zkLedgersRootPath."""

UPSTREAM_KEYS: Final[Mapping[str, str | None]] = {
    # --- Upstream's ServerConfiguration
    "ledgerStorageClass": "ledgerStorageClass",
    "logSizeLimit": "logSizeLimit",
    "entryLogFilePreallocationEnabled": "entryLogFilePreallocationEnabled",
    "forceAllowCompaction": "forceAllowCompaction",
    "minorCompactionInterval": "minorCompactionInterval",
    "minorCompactionThreshold": "minorCompactionThreshold",
    "minorCompactionMaxTimeMillis": "minorCompactionMaxTimeMillis",
    "majorCompactionInterval": "majorCompactionInterval",
    "majorCompactionThreshold": "majorCompactionThreshold",
    "majorCompactionMaxTimeMillis": "majorCompactionMaxTimeMillis",
    "isThrottleByBytes": "isThrottleByBytes",
    "compactionMaxOutstandingRequests": "compactionMaxOutstandingRequests",
    "compactionRate": "compactionRateByEntries",
    "compactionRateByEntries": "compactionRateByEntries",
    "compactionRateByBytes": "compactionRateByBytes",
    "entryLocationCompactionInterval": None,
    "gcWaitTime": "gcWaitTime",
    "isForceGCAllowWhenNoSpace": "isForceGCAllowWhenNoSpace",
    "gcOverreplicatedLedgerWaitTime": None,
    "gcOverreplicatedLedgerMaxConcurrentRequests": None,
    "gcMetadataOpRateLimit": None,
    "useTransactionalCompaction": "useTransactionalCompaction",
    "verifyMetadataOnGC": "verifyMetadataOnGC",
    "gcEntryLogMetadataCacheEnabled": None,
    "gcEntryLogMetadataCachePath": None,
    "useTargetEntryLogSizeForGc": "useTargetEntryLogSizeForGc",
    "localScrubInterval": None,
    "localScrubRateLimit": None,
    "flushInterval": "flushInterval",
    "flushEntrylogBytes": "flushEntrylogBytes",
    "bookieDeathWatchInterval": None,
    "openFileLimit": "openFileLimit",
    "pageLimit": None,
    "pageSize": None,
    "fileInfoCacheInitialCapacity": None,
    "fileInfoMaxIdleTime": None,
    "fileInfoFormatVersionToWrite": None,
    "journalMaxSizeMB": "journalMaxSizeMB",
    "journalMaxBackups": "journalMaxBackups",
    "journalSyncData": "journalSyncData",
    "journalWriteData": None,
    "journalAdaptiveGroupWrites": None,
    "journalMaxGroupWaitMSec": "journalMaxGroupWaitMSec",
    "journalBufferedWritesThreshold": "journalBufferedWritesThreshold",
    "journalBufferedEntriesThreshold": "journalBufferedEntriesThreshold",
    "journalFlushWhenQueueEmpty": "journalFlushWhenQueueEmpty",
    "journalRemoveFromPageCache": None,
    "journalPreAllocSizeMB": "journalPreAllocSizeMB",
    "journalWriteBufferSizeKB": "journalWriteBufferSizeKB",
    "journalAlignmentSize": "journalAlignmentSize",
    "numJournalCallbackThreads": None,
    "journalFormatVersionToWrite": "journalFormatVersionToWrite",
    "journalQueueSize": "journalQueueSize",
    "journalMaxMemorySizeMb": None,
    "journalPageCacheFlushIntervalMSec": "journalPageCacheFlushIntervalMSec",
    "journalChannelProvider": None,
    "journalReuseFiles": None,
    "maxAddsInProgressLimit": None,
    "maxReadsInProgressLimit": None,
    "closeChannelOnResponseTimeout": None,
    "waitTimeoutOnResponseBackpressureMs": None,
    "bookiePort": "bookiePort",
    "listeningInterface": None,
    "allowLoopback": None,
    "advertisedAddress": "advertisedAddress",
    "bookieId": None,
    "allowEphemeralPorts": None,
    "journalDirectory": "journalDirectory",
    "journalDirectories": "journalDirectories",
    "ledgerDirectories": "ledgerDirectories",
    "indexDirectories": "indexDirectories",
    "allowStorageExpansion": None,
    "serverTcpNoDelay": None,
    "serverSockKeepalive": None,
    "serverTcpLinger": None,
    "serverWriteBufferLowWaterMark": None,
    "serverWriteBufferHighWaterMark": None,
    "serverNumAcceptorThreads": None,
    "serverNumIOThreads": None,
    "zkRetryBackoffStartMs": None,
    "zkRetryBackoffMaxMs": None,
    "openLedgerRereplicationGracePeriod": "openLedgerRereplicationGracePeriod",
    "lockReleaseOfFailedLedgerGracePeriod": "lockReleaseOfFailedLedgerGracePeriod",
    "readOnlyModeEnabled": "readOnlyModeEnabled",
    "readOnlyModeOnAnyDiskFullEnabled": None,
    "forceReadOnlyBookie": None,
    "persistBookieStatusEnabled": None,
    "diskUsageThreshold": "diskUsageThreshold",
    "diskUsageWarnThreshold": "diskUsageWarnThreshold",
    "diskUsageLwmThreshold": "diskUsageLwmThreshold",
    "diskCheckInterval": "diskCheckInterval",
    "auditorPeriodicCheckInterval": "auditorPeriodicCheckInterval",
    "auditorPeriodicBookieCheckInterval": "auditorPeriodicBookieCheckInterval",
    "auditorPeriodicPlacementPolicyCheckInterval": None,
    "repairedPlacementPolicyNotAdheringBookieEnabled": None,
    "auditorLedgerVerificationPercentage": "auditorLedgerVerificationPercentage",
    "autoRecoveryDaemonEnabled": "autoRecoveryDaemonEnabled",
    "lostBookieRecoveryDelay": "lostBookieRecoveryDelay",
    "rwRereplicateBackoffMs": "rwRereplicateBackoffMs",
    "underreplicatedLedgerRecoveryGracePeriod": None,
    "auditorReplicasCheckInterval": None,
    "auditorMaxNumberOfConcurrentOpenLedgerOperations": None,
    "auditorAcquireConcurrentOpenLedgerOperationsTimeOutMSec": None,
    "inFlightReadEntryNumInLedgerChecker": None,
    "numAddWorkerThreads": None,
    "numReadWorkerThreads": None,
    "maxPendingReadRequestsPerThread": None,
    "maxPendingAddRequestsPerThread": None,
    "numLongPollWorkerThreads": None,
    "numHighPriorityWorkerThreads": None,
    "readWorkerThreadsThrottlingEnabled": None,
    "requestTimerTickDurationMs": None,
    "requestTimerNumTicks": None,
    "readBufferSizeBytes": "readBufferSizeBytes",
    "writeBufferSizeBytes": "writeBufferSizeBytes",
    "useHostNameAsBookieID": None,
    "useShortHostName": None,
    "enableLocalTransport": None,
    "disableServerSocketBind": None,
    "sortedLedgerStorageEnabled": "sortedLedgerStorageEnabled",
    "skipListSizeLimit": "skipListSizeLimit",
    "skipListArenaChunkSize": None,
    "skipListArenaMaxAllocSize": None,
    "enableStatistics": None,
    "statsProviderClass": None,
    "sanityCheckMetricsEnabled": None,
    "byteBufAllocatorSizeInitial": None,
    "byteBufAllocatorSizeMin": None,
    "byteBufAllocatorSizeMax": None,
    "bookieAuthProviderFactoryClass": "bookieAuthProviderFactoryClass",
    "minUsableSizeForIndexFileCreation": None,
    "minUsableSizeForEntryLogCreation": None,
    "minUsableSizeForHighPriorityWrites": "minUsableSizeForHighPriorityWrites",
    "allowMultipleDirsUnderSameDiskPartition": None,
    "httpServerEnabled": None,
    "httpServerPort": "httpServerPort",
    "httpServerHost": "httpServerHost",
    "httpServerTlsEnable": None,
    "httpServerKeyStorePath": None,
    "httpServerKeyStorePassword": None,
    "httpServerTrustStorePath": None,
    "httpServerTrustStorePassword": None,
    "extraServerComponents": None,
    "ignoreExtraServerComponentsStartupFailures": None,
    "registrationManagerClass": None,
    "enableTaskExecutionStats": None,
    "entryLogPerLedgerEnabled": "entryLogPerLedgerEnabled",
    "numOfMemtableFlushThreads": None,
    "entrylogMapAccessExpiryTimeInSeconds": "entrylogMapAccessExpiryTimeInSeconds",
    "maximumNumberOfActiveEntryLogs": "maximumNumberOfActiveEntryLogs",
    "entryLogPerLedgerCounterLimitsMultFactor": "entryLogPerLedgerCounterLimitsMultFactor",
    "localConsistencyCheckOnStartup": None,
    "authorizedRoles": "authorizedRoles",
    "dataIntegrityChecking": None,
    "dataIntegrityStampMissingCookies": None,
    "defaultRocksdbConf": None,
    "entryLocationRocksdbConf": None,
    "ledgerMetadataRocksdbConf": None,
    "maxOperationNumbersInSingleRocksdbWriteBatch": None,
    "skipReplayJournalInvalidRecord": "skipReplayJournalInvalidRecord",
    "maxBatchReadSize": None,
    # --- Upstream's AbstractConfiguration (shared with the client)
    "zkTimeout": "zkTimeout",
    "zkServers": "metadataServiceUri",
    "zkRetryBackoffMaxRetries": None,
    "ledgerManagerType": None,
    "ledgerManagerFactoryClass": None,
    "ledgerMetadataVersion": None,
    "allowShadedLedgerManagerFactoryClass": None,
    "shadedLedgerManagerFactoryClassPrefix": None,
    "metadataServiceUri": "metadataServiceUri",
    "zkLedgersRootPath": "metadataServiceUri",
    "zkRequestRateLimit": None,
    "rereplicationEntryBatchSize": "rereplicationEntryBatchSize",
    "storeSystemTimeAsLedgerUnderreplicatedMarkTime": None,
    "storeSystemTimeAsLedgerCreationTime": None,
    "enableBusyWait": None,
    "enableHealthCheck": None,
    "metastoreImplClass": None,
    "metastoreMaxEntriesPerScan": None,
    "tlsProvider": "tlsProvider",
    "tlsProviderFactoryClass": "tlsProviderFactoryClass",
    "ledgerIdFormatterClass": None,
    "entryFormatterClass": None,
    "tlsClientAuthentication": "tlsClientAuthentication",
    "preserveMdcForTaskExecution": None,
    "tlsCertFilesRefreshDurationSeconds": "tlsCertFilesRefreshDurationSeconds",
    "tlsEnabledCipherSuites": "tlsEnabledCipherSuites",
    "tlsEnabledProtocols": "tlsEnabledProtocols",
    "tlsKeyStoreType": "tlsKeyStoreType",
    "tlsKeyStore": "tlsKeyStore",
    "tlsKeyStorePasswordPath": "tlsKeyStorePasswordPath",
    "tlsTrustStoreType": "tlsTrustStoreType",
    "tlsTrustStore": "tlsTrustStore",
    "tlsTrustStorePasswordPath": "tlsTrustStorePasswordPath",
    "tlsCertificatePath": "tlsCertificatePath",
    "nettyMaxFrameSizeBytes": "nettyMaxFrameSizeBytes",
    "zkEnableSecurity": None,
    "ledgerManagerFactoryDisableClassCheck": None,
    "permittedStartupUsers": None,
    "minNumRacksPerWriteQuorum": None,
    "enforceMinNumRacksPerWriteQuorum": None,
    "enforceMinNumFaultDomainsForWrite": None,
    "ignoreLocalNodeInPlacementPolicy": None,
    "minNumZonesPerWriteQuorum": None,
    "desiredNumZonesPerWriteQuorum": None,
    "enforceStrictZoneawarePlacement": None,
    "allocatorPoolingPolicy": None,
    "allocatorPoolingConcurrency": None,
    "allocatorOutOfMemoryPolicy": None,
    "allocatorLeakDetectionPolicy": None,
    "allocatorExitOnOutOfMemory": None,
    "limitStatsLogging": None,
    "replicationRateByBytes": None,
    # --- Keys its shipped bk_server.conf sets that other classes read (stats providers,
    # DbLedgerStorage, the client inside the bookie, stream storage)
    "httpServerClass": None,
    "dbStorage_writeCacheMaxSizeMb": None,
    "dbStorage_readAheadCacheMaxSizeMb": None,
    "dbStorage_readAheadCacheBatchBytesSize": None,
    "dbStorage_readAheadCacheBatchSize": None,
    "dbStorage_rocksDB_format_version": None,
    "dbStorage_rocksDB_checksum_type": None,
    "dbStorage_rocksDB_blockCacheSize": None,
    "dbStorage_rocksDB_writeBufferSizeMB": None,
    "dbStorage_rocksDB_sstSizeInMB": None,
    "dbStorage_rocksDB_blockSize": None,
    "dbStorage_rocksDB_bloomFilterBitsPerKey": None,
    "dbStorage_rocksDB_numLevels": None,
    "dbStorage_rocksDB_numFilesInLevel0": None,
    "dbStorage_rocksDB_maxSizeInLevel1MB": None,
    "dbStorage_rocksDB_logPath": None,
    "dbStorage_directIOEntryLogger": None,
    "dbStorage_directIOEntryLoggerTotalWriteBufferSizeMB": None,
    "dbStorage_directIOEntryLoggerTotalReadBufferSizeMB": None,
    "dbStorage_directIOEntryLoggerReadBufferSizeMB": None,
    "dbStorage_directIOEntryLoggerMaxFdCacheTimeSeconds": None,
    "prometheusStatsHttpAddress": None,
    "prometheusStatsHttpPort": None,
    "prometheusStatsLatencyRolloverSeconds": "prometheusStatsLatencyRolloverSeconds",
    "exposeDefaultJVMMetrics": None,
    "codahaleStatsPrefix": None,
    "codahaleStatsOutputFrequencySeconds": None,
    "codahaleStatsGraphiteEndpoint": None,
    "codahaleStatsCSVEndpoint": None,
    "codahaleStatsSlf4jEndpoint": None,
    "codahaleStatsJmxEndpoint": None,
    "digestType": None,
    "passwd": None,
    "enableDigestTypeAutodetection": None,
    "ensemblePlacementPolicy": None,
    "reppDnsResolverClass": None,
    "networkTopologyScriptFileName": None,
    "networkTopologyScriptNumberArgs": None,
    "bookieAddressResolverEnabled": None,
    "stickyReadSEnabled": None,
    "reorderReadSequenceEnabled": None,
    "storageserver.grpc.port": None,
    "dlog.bkcEnsembleSize": None,
    "dlog.bkcWriteQuorumSize": None,
    "dlog.bkcAckQuorumSize": None,
    "storage.range.store.dirs": None,
    "storage.serve.readonly.tables": None,
    "storage.cluster.controller.schedule.interval.ms": None,
    # --- DbLedgerStorage's other keys
    "dbStorage_maxThrottleTimeMs": None,
    "dbStorage_rocksDB_logLevel": None,
    "dbStorage_rocksDB_lz4CompressionEnabled": None,
}
"""Upstream key -> the bookiesim key it sets, or None: accepted and not applied."""

LEGACY_KEYS: Final[Mapping[str, str]] = {
    key: target for key, target in UPSTREAM_KEYS.items() if target not in (None, key)
}
"""Upstream's older spellings and the key each one feeds, as upstream's getters fall back:
``zkServers`` and ``zkLedgersRootPath`` make ``metadataServiceUri`` when that is blank (so
``metadataServiceUri`` wins), ``compactionRate`` is ``compactionRateByEntries`` when that is
not set."""

_SOURCES: Final = (
    ("ServerConfiguration", "ledgerStorageClass"),
    ("AbstractConfiguration", "zkTimeout"),
    ("other classes, set in the shipped bk_server.conf", "httpServerClass"),
    ("DbLedgerStorage", "dbStorage_maxThrottleTimeMs"),
)
"""Where upstream defines the keys, each with the first key of its group in the table."""


def legacy_metadata_uri(zk_servers: Iterable[str], ledgers_root: str | None) -> str | None:
    """The ``metadataServiceUri`` upstream derives from ``zkServers`` (its items) and
    ``zkLedgersRootPath`` (None: upstream's default ``/ledgers``), for a configuration whose
    ``metadataServiceUri`` is blank: the servers joined by ``;`` (a URI cannot hold ``,``),
    then the root. None when ``zkServers`` names no server; ValueError, saying why, when the
    root is not an absolute path."""
    servers = [server.strip() for server in zk_servers if server.strip()]
    if not servers:
        return None
    root = DEFAULT_LEDGERS_ROOT if ledgers_root is None else ledgers_root.strip()
    if not root.startswith("/") or any(ch.isspace() for ch in root):
        raise ValueError(f"expected an absolute ZooKeeper path such as /ledgers, got {root!r}")
    # Upstream writes zk+<ledger manager>://; bookiesim has one layout, so plain zk://.
    return f"zk://{';'.join(servers)}{root}"


def not_applied_warning(keys: Iterable[str]) -> str | None:
    """The one start-up warning naming the upstream keys given that bookiesim does not apply,
    in the order given; None when there are none."""
    names = list(dict.fromkeys(keys))
    if not names:
        return None
    return f"not applied by bookiesim: {', '.join(names)}"


def _names(keys: Iterable[str]) -> str:
    return ", ".join(f"`{key}`" for key in keys)


def _groups() -> list[tuple[str, list[str]]]:
    """Upstream's keys in table order, split where each source's group starts."""
    starts = {first: title for title, first in _SOURCES}
    groups: list[tuple[str, list[str]]] = []
    for key in UPSTREAM_KEYS:
        if key in starts:
            groups.append((starts[key], []))
        groups[-1][1].append(key)
    return groups


def render_markdown() -> str:
    """The "Upstream keys" section of ``docs/configuration.md``."""
    applied = [key for key, target in UPSTREAM_KEYS.items() if target == key]
    out = [
        "## Upstream keys",
        "",
        f"bookiesim knows all {len(UPSTREAM_KEYS)} keys upstream BookKeeper 4.17.4 defines (the",
        "key constants of `ServerConfiguration` and `AbstractConfiguration`, every key its",
        "shipped `conf/bk_server.conf` sets, and `DbLedgerStorage`'s), so upstream's own file",
        "starts a bookie (`bookiesim bookie --conf bk_server.conf`). A key upstream does not",
        "define either is refused, with the closest known name.",
        "",
        f"**Applied, with upstream's meaning** ({len(applied)}; the tables above):",
        _names(applied) + ".",
        "",
        "**Legacy keys**, applied as upstream's getters fall back:",
        "",
        "| key | sets | rule |",
        "|---|---|---|",
        f"| `{ZK_SERVERS}` | `{METADATA_SERVICE_URI}` | when `{METADATA_SERVICE_URI}` is blank: "
        f"`zk://` + the servers joined by `;` + `{ZK_LEDGERS_ROOT_PATH}`; "
        f"`{METADATA_SERVICE_URI}` wins when given |",
        f"| `{ZK_LEDGERS_ROOT_PATH}` | `{METADATA_SERVICE_URI}` | the ledgers root of that URI "
        f"(default `{DEFAULT_LEDGERS_ROOT}`); unused without `{ZK_SERVERS}` |",
        f"| `{COMPACTION_RATE}` | `compactionRateByEntries` | when `compactionRateByEntries` "
        "is not set |",
        "",
        "**Accepted, not applied**: a bookie given any of these logs one WARNING line at start,",
        '"not applied by bookiesim: key1, key2, ...", and goes on; their values are not',
        "checked. They tune what bookiesim does not have (the JVM, Netty, worker thread pools,",
        "RocksDB, stream storage, stats providers, TLS certificate reloading, placement policies)",
        "or choose what it does one way only: `httpServerEnabled` (bookiesim always serves its",
        "admin API and `/metrics` on `httpServerPort`; upstream's metrics listen apart, on",
        "`prometheusStatsHttpPort`), `statsProviderClass` (always Prometheus), `bookieId` and",
        "`useHostNameAsBookieID` (the id is `bookieAddress:bookiePort`),",
        "`ledgerManagerType` (one layout). By where upstream defines them:",
    ]
    for title, keys in _groups():
        skipped = [key for key in keys if UPSTREAM_KEYS[key] is None]
        out += ["", f"- *{title}* ({len(skipped)}): {_names(skipped)}."]
    return "\n".join(out) + "\n"
