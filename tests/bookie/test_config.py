"""The bookie configuration: defaults equal upstream's, files parse as bk_server.conf does,
every mistake is an error naming the key (and file and line), upstream's validation rules hold,
and a config survives being written out and read back.

Expected defaults below are copied by hand from upstream's ``ServerConfiguration`` getters as
summarised in reference/bookkeeper.md (§2.9, §3.1, §5.1, §6.1, §6.2, §1.5), not from our
registry, so a slip in the registry shows up here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.bookie import config
from bookiesim.bookie.config import (
    CONFIG_KEYS,
    RULES,
    BookieConfig,
    ConfigError,
    ConfigKey,
    Kind,
    parse_properties,
    render_markdown,
)

if TYPE_CHECKING:
    from collections.abc import Callable

REPO = Path(__file__).resolve().parents[2]

# key -> upstream default (code, not the sample bk_server.conf, where they differ).
UPSTREAM_DEFAULTS: dict[str, object] = {
    "bookiePort": 3181,
    "advertisedAddress": "",  # upstream: null
    "nettyMaxFrameSizeBytes": 5 * 1024 * 1024,
    "prometheusStatsLatencyRolloverSeconds": 60,
    "metadataServiceUri": "",  # upstream: null
    "zkTimeout": 10000,  # AbstractConfiguration.getZkTimeout
    "journalDirectory": Path("/tmp/bk-txn"),
    "journalDirectories": (),  # upstream: null = [journalDirectory]
    "ledgerDirectories": (Path("/tmp/bk-data"),),
    "indexDirectories": (),  # upstream: null = ledgerDirectories
    "entrylogMapAccessExpiryTimeInSeconds": 300,
    "maximumNumberOfActiveEntryLogs": 500,
    "entryLogPerLedgerCounterLimitsMultFactor": 10,
    "logSizeLimit": 1073741824,
    "entryLogFilePreallocationEnabled": True,
    "flushEntrylogBytes": 0,
    "writeBufferSizeBytes": 65536,
    "readBufferSizeBytes": 512,
    "flushInterval": 10000,
    "gcWaitTime": 600000,
    "minorCompactionThreshold": 0.2,
    "minorCompactionInterval": 3600,
    "majorCompactionThreshold": 0.8,
    "majorCompactionInterval": 86400,
    "minorCompactionMaxTimeMillis": -1,
    "majorCompactionMaxTimeMillis": -1,
    "forceAllowCompaction": False,
    "isForceGCAllowWhenNoSpace": False,
    "isThrottleByBytes": False,
    "compactionRateByEntries": 1000,
    "compactionRateByBytes": 1000000,
    "compactionMaxOutstandingRequests": 100000,
    "useTargetEntryLogSizeForGc": False,
    "verifyMetadataOnGC": False,
    "useTransactionalCompaction": False,
    "journalMaxGroupWaitMSec": 2,
    "journalBufferedWritesThreshold": 524288,
    "journalBufferedEntriesThreshold": 0,
    "journalFlushWhenQueueEmpty": False,
    "journalSyncData": True,
    "journalPageCacheFlushIntervalMSec": 1000,
    "journalWriteBufferSizeKB": 64,
    "journalQueueSize": 10000,
    "journalPreAllocSizeMB": 16,
    "journalMaxSizeMB": 2048,
    "journalAlignmentSize": 512,
    "journalFormatVersionToWrite": 6,
    "journalMaxBackups": 5,
    "skipReplayJournalInvalidRecord": False,
    "openFileLimit": 20000,
    "ledgerStorageClass": "org.apache.bookkeeper.bookie.SortedLedgerStorage",
    "sortedLedgerStorageEnabled": True,
    "skipListSizeLimit": 64 * 1024 * 1024,
    "readOnlyModeEnabled": True,
    "diskUsageThreshold": 0.95,
    "diskUsageWarnThreshold": 0.90,
    "diskCheckInterval": 10000,
    "autoRecoveryDaemonEnabled": False,
    "lostBookieRecoveryDelay": 0,
    "auditorPeriodicCheckInterval": 604800,
    "auditorPeriodicBookieCheckInterval": 86400,
    "auditorLedgerVerificationPercentage": 0,
    "rereplicationEntryBatchSize": 10,
    "openLedgerRereplicationGracePeriod": 30000,
    "lockReleaseOfFailedLedgerGracePeriod": 300000,
    "rwRereplicateBackoffMs": 5000,
    # AbstractConfiguration / ServerConfiguration (TLS and authorization; null read as "")
    "tlsProviderFactoryClass": "",
    "tlsProvider": "OpenSSL",
    "tlsKeyStoreType": "JKS",
    "tlsKeyStore": "",
    "tlsKeyStorePasswordPath": "",
    "tlsTrustStoreType": "JKS",
    "tlsTrustStore": "",
    "tlsTrustStorePasswordPath": "",
    "tlsCertificatePath": "",
    "tlsClientAuthentication": False,
    "tlsEnabledProtocols": (),
    "tlsCertFilesRefreshDurationSeconds": 0,
    "tlsEnabledCipherSuites": (),
    "bookieAuthProviderFactoryClass": "",
    "authorizedRoles": (),
}

# Keys whose default we changed on purpose: key -> (ours, upstream's).
CHANGED_DEFAULTS: dict[str, tuple[object, object]] = {
    "entryLogPerLedgerEnabled": (True, False),
    "httpServerHost": ("127.0.0.1", "0.0.0.0"),
    "httpServerPort": (8000, 8080),
    # Upstream's default is diskUsageThreshold's value; -1 stands for it here.
    "diskUsageLwmThreshold": (-1.0, "diskUsageThreshold"),
    # Upstream's default is minUsableSizeForEntryLogCreation's, logSizeLimit; -1 stands for it.
    "minUsableSizeForHighPriorityWrites": (-1, "minUsableSizeForEntryLogCreation"),
}

BOOKIESIM_KEYS: dict[str, object] = {
    "bookieAddress": "127.0.0.1",
    "entryLogMaxOpenReadFiles": 1000,
    "entryLogPreallocationPoolSize": 64,
    "entryLogWritebackBytes": 0,
    "upstreamBehaviour": False,
    # Bug switches of the fault campaign (docs/simulation.md), off unless a campaign asks.
    "unsafeGcBelowLeastUnflushedOnly": False,
    "unsafeEntryLogGarbageHeader": False,
    # The live one of `bookiesim chaos run --bug` (docs/chaos.md).
    "unsafeAddIgnoresFence": False,
    # Upstream's metric names beside ours (docs/metrics.md).
    "prometheusUpstreamNamesEnabled": True,
}


def load(text: str, **kwargs: object) -> BookieConfig:
    return BookieConfig.from_properties(text, source="bk.conf", **kwargs)  # type: ignore[arg-type]


def error_of(action: Callable[[], object]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        action()
    return info.value


# --- Defaults and the registry ------------------------------------------------------------


@pytest.mark.parametrize(("key", "expected"), sorted(UPSTREAM_DEFAULTS.items()))
def test_default_equals_upstream(key: str, expected: object) -> None:
    value = BookieConfig().to_mapping()[key]
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(("key", "defaults"), sorted(CHANGED_DEFAULTS.items()))
def test_changed_defaults_are_marked_with_upstreams(
    key: str, defaults: tuple[object, object]
) -> None:
    ours, theirs = defaults
    spec = next(spec for spec in CONFIG_KEYS if spec.key == key)
    assert spec.default == ours
    assert spec.upstream_default is not None
    assert str(theirs).lower() in spec.upstream_default.lower()


def test_every_key_is_checked_upstream_changed_or_ours() -> None:
    ours = {spec.key for spec in CONFIG_KEYS if spec.bookiesim_only}
    changed = {spec.key for spec in CONFIG_KEYS if spec.upstream_default is not None}
    assert ours == set(BOOKIESIM_KEYS)
    assert changed == set(CHANGED_DEFAULTS)
    assert {spec.key for spec in CONFIG_KEYS} == set(UPSTREAM_DEFAULTS) | ours | changed
    defaults = BookieConfig().to_mapping()
    assert {key: defaults[key] for key in BOOKIESIM_KEYS} == BOOKIESIM_KEYS


def test_we_listen_on_loopback_unless_configured() -> None:
    cfg = BookieConfig()
    assert cfg.bookie_address == "127.0.0.1"
    assert cfg.http_server_host == "127.0.0.1"


def test_attributes_are_snake_case_spellings_of_the_keys() -> None:
    for spec in CONFIG_KEYS:
        assert spec.attr == spec.attr.lower()
        assert spec.attr.replace("_", "") == spec.key.lower(), spec.key


def test_registry_entries_are_complete() -> None:
    units = {"", "ms", "s", "bytes", "KiB", "MiB", "fraction", "entries", "entries/s"}
    units |= {"bytes/s", "files"}
    for spec in CONFIG_KEYS:
        assert spec.meaning.strip()
        assert "\n" not in spec.meaning
        assert "|" not in spec.meaning  # it would break the table in the docs
        assert spec.unit in units, spec.key
        assert spec.section
    assert len({spec.key for spec in CONFIG_KEYS}) == len(CONFIG_KEYS)
    for rule in RULES:
        assert {spec.key for spec in CONFIG_KEYS} >= set(rule.keys)


def test_config_is_frozen() -> None:
    cfg = BookieConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.bookie_port = 1  # type: ignore[misc]
    assert hash(cfg) == hash(BookieConfig())


def test_effective_directories_follow_upstream_fallbacks() -> None:
    cfg = BookieConfig.from_mapping({"journalDirectory": "/j", "ledgerDirectories": "/a,/b"})
    assert cfg.effective_journal_directories == (Path("/j"),)
    assert cfg.effective_index_directories == (Path("/a"), Path("/b"))
    cfg = cfg.replace(journal_directories="/j1,/j2", index_directories=["/i"])
    assert cfg.effective_journal_directories == (Path("/j1"), Path("/j2"))
    assert cfg.effective_index_directories == (Path("/i"),)


def test_compaction_enabled_needs_interval_and_threshold() -> None:
    cfg = BookieConfig()
    assert cfg.minor_compaction_enabled
    assert cfg.major_compaction_enabled
    assert not cfg.replace(minor_compaction_interval=0).minor_compaction_enabled
    assert not cfg.replace(major_compaction_threshold=0.0).major_compaction_enabled


# --- The properties format ----------------------------------------------------------------


def test_comments_blank_lines_whitespace_and_separators() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "\n"
        "   \t\n"
        "  bookiePort = 4000  \n"
        "gcWaitTime:1000\n"
        "minorCompactionInterval : 2\n"
        "majorCompactionInterval\t3\n"
        "journalSyncData   =   FALSE\n"
        "   # indented comment\n"
        "metadataServiceUri=zk://127.0.0.1:2181/ledgers\n"
    )
    cfg = load(text)
    assert cfg.bookie_port == 4000
    assert cfg.gc_wait_time == 1000
    assert cfg.minor_compaction_interval == 2
    assert cfg.major_compaction_interval == 3
    assert cfg.journal_sync_data is False
    # Only the first separator splits; the URI keeps its colons.
    assert cfg.metadata_service_uri == "zk://127.0.0.1:2181/ledgers"


def test_crlf_line_endings_and_continuation_lines() -> None:
    cfg = load("ledgerDirectories=/a,\\\r\n    /b\r\nbookiePort=1\r\n")
    assert cfg.ledger_directories == (Path("/a"), Path("/b"))
    assert cfg.bookie_port == 1


def test_parse_properties_reports_lines() -> None:
    props = parse_properties("# c\n\na=1\nb: two words\nc\n")
    assert [(p.key, p.value, p.line) for p in props] == [
        ("a", "1", 3),
        ("b", "two words", 4),
        ("c", "", 5),
    ]


def test_only_the_first_separator_splits() -> None:
    props = parse_properties("a==b\nc =: d\ne=f=g")
    assert [(p.key, p.value) for p in props] == [("a", "=b"), ("c", ": d"), ("e", "f=g")]


def test_a_hash_after_a_value_is_part_of_it_and_the_error_says_so() -> None:
    err = error_of(lambda: load("\nbookiePort=3181 # the port\n"))
    assert err.key == "bookiePort"
    assert (err.source, err.line) == ("bk.conf", 2)
    assert "'3181 # the port'" in str(err)
    assert "not a comment" in str(err)


def test_a_line_without_a_key_is_an_error() -> None:
    err = error_of(lambda: load("bookiePort=1\n= 5\n"))
    assert str(err).startswith("bk.conf:2:")


def test_lists_are_comma_separated_and_trimmed() -> None:
    cfg = load("ledgerDirectories = /d1 , /d2,/d3\nindexDirectories=/i")
    assert cfg.ledger_directories == (Path("/d1"), Path("/d2"), Path("/d3"))
    assert cfg.index_directories == (Path("/i"),)
    assert load("journalDirectories=").journal_directories == ()


@pytest.mark.parametrize("value", ["/a,,/b", "/a,", ",/a", " , "])
def test_empty_list_items_are_errors(value: str) -> None:
    err = error_of(lambda: load(f"ledgerDirectories={value}"))
    assert err.key == "ledgerDirectories"
    assert "ledgerDirectories" in str(err)


@pytest.mark.parametrize(
    ("text", "truth"),
    [
        *[("true", True), ("TRUE", True), ("yes", True), ("On", True), ("y", True), ("t", True)],
        *[("false", False), ("No", False), ("off", False), ("n", False), ("F", False)],
    ],
)
def test_boolean_spellings_of_commons_configuration(text: str, truth: bool) -> None:
    assert load(f"journalSyncData={text}").journal_sync_data is truth


def test_numbers() -> None:
    cfg = load("bookiePort=+42\nminorCompactionThreshold=.1\nmajorCompactionThreshold=1")
    assert cfg.bookie_port == 42
    assert cfg.minor_compaction_threshold == 0.1
    assert cfg.major_compaction_threshold == 1.0
    assert type(cfg.major_compaction_threshold) is float
    assert load("diskUsageWarnThreshold=5e-1").disk_usage_warn_threshold == 0.5


# --- Errors name the key ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wrong", "suggested"),
    [
        ("bookiPort", "bookiePort"),
        ("bookieport", "bookiePort"),
        ("bookie_port", "bookiePort"),
        ("entryLogSizeLimit", "logSizeLimit"),
        ("entryLogPerLedgerEnable", "entryLogPerLedgerEnabled"),
        ("gcWaitTimeMs", "gcWaitTime"),
    ],
)
def test_unknown_key_is_named_with_a_suggestion(wrong: str, suggested: str) -> None:
    err = error_of(lambda: load(f"# header\n{wrong}=1\n"))
    assert err.key == wrong
    assert str(err) == f"bk.conf:2: unknown key {wrong!r} (did you mean {suggested!r}?)"


def test_unknown_key_far_from_all_gets_no_suggestion() -> None:
    err = error_of(lambda: load("zzzzzzzz=1"))
    assert str(err) == "bk.conf:1: unknown key 'zzzzzzzz'"


@pytest.mark.parametrize(
    ("line", "key", "fragment"),
    [
        ("bookiePort=abc", "bookiePort", "expected an integer, got 'abc'"),
        ("bookiePort=1.5", "bookiePort", "expected an integer, got '1.5'"),
        ("bookiePort=1_000", "bookiePort", "expected an integer"),
        ("gcWaitTime=", "gcWaitTime", "expected an integer, got ''"),
        ("journalSyncData=maybe", "journalSyncData", "expected true or false, got 'maybe'"),
        ("journalSyncData=1", "journalSyncData", "expected true or false, got '1'"),
        ("diskUsageThreshold=high", "diskUsageThreshold", "expected a number, got 'high'"),
        ("diskUsageThreshold=nan", "diskUsageThreshold", "expected a number, got 'nan'"),
        ("minorCompactionThreshold=inf", "minorCompactionThreshold", "expected a number"),
        ("bookiePort=65536", "bookiePort", "must be <= 65535, got 65536"),
        ("httpServerPort=-1", "httpServerPort", "must be >= 0, got -1"),
        ("logSizeLimit=1073741825", "logSizeLimit", "must be <= 1073741824"),
        ("logSizeLimit=-1", "logSizeLimit", "must be >= 0"),
        ("minorCompactionThreshold=1.01", "minorCompactionThreshold", "must be <= 1.0"),
        ("majorCompactionThreshold=2", "majorCompactionThreshold", "must be <= 1.0"),
        ("journalFormatVersionToWrite=5", "journalFormatVersionToWrite", "must be >= 6"),
        ("maximumNumberOfActiveEntryLogs=0", "maximumNumberOfActiveEntryLogs", ">= 1"),
        ("bookiePort=99999999999999999999", "bookiePort", "must be <= 65535"),
        ("gcWaitTime=99999999999999999999", "gcWaitTime", "must be <= 9223372036854775807"),
        ("skipListSizeLimit=0", "skipListSizeLimit", "must be >= 1"),
        ("skipListSizeLimit=1073741824", "skipListSizeLimit", "must be <= 1073741823"),
    ],
)
def test_ill_typed_or_out_of_range_values_name_key_file_and_line(
    line: str, key: str, fragment: str
) -> None:
    err = error_of(lambda: load(f"# first\n{line}\n"))
    assert err.key == key
    assert (err.source, err.line) == ("bk.conf", 2)
    assert str(err).startswith(f"bk.conf:2: {key}: ")
    assert fragment in str(err)


@pytest.mark.parametrize(
    ("mapping", "key"),
    [
        ({"bookiePort": True}, "bookiePort"),  # bool is an int subclass, but not a port
        ({"bookiePort": 3.0}, "bookiePort"),
        ({"journalSyncData": 1}, "journalSyncData"),
        ({"minorCompactionThreshold": math.nan}, "minorCompactionThreshold"),
        ({"minorCompactionThreshold": False}, "minorCompactionThreshold"),
        ({"metadataServiceUri": 5}, "metadataServiceUri"),
        ({"journalDirectory": 5}, "journalDirectory"),
        ({"journalDirectory": ""}, "journalDirectory"),
        ({"ledgerDirectories": [1]}, "ledgerDirectories"),
        ({"ledgerDirectories": b"/a"}, "ledgerDirectories"),
        ({"ledgerDirectories": ["/a,/b"]}, "ledgerDirectories"),
        ({"bookieAddress": "a\nb"}, "bookieAddress"),
        ({"advertisedAddress": "a\u2028b"}, "advertisedAddress"),
        ({"advertisedAddress": "ends\\"}, "advertisedAddress"),
        ({"journalDirectory": "d /"}, "journalDirectory"),
        ({"ledgerDirectories": ["/a", "b /"]}, "ledgerDirectories"),
    ],
)
def test_ill_typed_mapping_values_name_the_key(mapping: dict[str, object], key: str) -> None:
    err = error_of(lambda: BookieConfig.from_mapping(mapping))
    assert err.key == key
    assert str(err).startswith(f"{key}: ")


def test_unknown_mapping_key() -> None:
    err = error_of(lambda: BookieConfig.from_mapping({"journal_sync_data": False}))
    assert str(err) == "unknown key 'journal_sync_data' (did you mean 'journalSyncData'?)"


def test_direct_construction_is_type_checked() -> None:
    err = error_of(lambda: BookieConfig(bookie_port="1"))  # type: ignore[arg-type]
    assert err.key == "bookiePort"
    assert BookieConfig(minor_compaction_threshold=0).minor_compaction_threshold == 0.0
    # What could not be written to a file and read back is refused here too.
    assert error_of(lambda: BookieConfig(bookie_address=" x")).key == "bookieAddress"
    err = error_of(lambda: BookieConfig(journal_directory=Path("a\nb")))
    assert err.key == "journalDirectory"
    err = error_of(lambda: BookieConfig(ledger_directories=(Path("/a,b"),)))
    assert err.key == "ledgerDirectories"


def test_a_key_set_twice_in_a_file_is_an_error() -> None:
    err = error_of(lambda: load("bookiePort=1\n\nbookiePort=2\n"))
    assert str(err) == "bk.conf:3: bookiePort: set twice (first on line 1)"


# --- Validation rules ---------------------------------------------------------------------

# Each case: a config that breaks one rule (as properties text), the key blamed, a fragment of
# the message. The rules are upstream's (reference/bookkeeper.md §5.1, ServerConfiguration
# validate(), DiskChecker) unless marked.
BROKEN: list[tuple[str, str, str]] = [
    ("minorCompactionInterval=599", "minorCompactionInterval", "shorter than gcWaitTime"),
    ("majorCompactionInterval=599", "majorCompactionInterval", "shorter than gcWaitTime"),
    ("gcWaitTime=3600001", "minorCompactionInterval", "3600 s is shorter than gcWaitTime"),
    ("minorCompactionInterval=86400", "minorCompactionInterval", "shorter than majorCompac"),
    ("minorCompactionThreshold=0.8", "minorCompactionThreshold", "below majorCompactionThr"),
    ("useTransactionalCompaction=true", "useTransactionalCompaction", "entryLogPerLedger"),
    ("journalAlignmentSize=1000", "journalAlignmentSize", "multiple of 512"),
    ("journalAlignmentSize=256", "journalAlignmentSize", ">= 512"),
    (
        "journalAlignmentSize=2097152\njournalPreAllocSizeMB=1",
        "journalAlignmentSize",
        "larger than journalPreAllocSizeMB",
    ),
    ("diskUsageThreshold=1.0", "diskUsageThreshold", "must be > 0 and < 1"),
    ("diskUsageThreshold=0\ndiskUsageWarnThreshold=0", "diskUsageThreshold", "> 0 and < 1"),
    ("diskUsageWarnThreshold=0.96", "diskUsageWarnThreshold", "above diskUsageThreshold"),
    ("diskUsageLwmThreshold=0.96", "diskUsageLwmThreshold", "above diskUsageThreshold"),
    # bookiesim's own rules
    ("ledgerDirectories=", "ledgerDirectories", "at least one"),
    ("journalDirectories=/j/a,/j/b,/j/a/", "journalDirectories", "/j/a is listed twice"),
    ("metadataServiceUri=mysql://db", "metadataServiceUri", "sqlite:///path or zk://"),
    ("metadataServiceUri=/tmp/meta.db", "metadataServiceUri", "sqlite:///path"),
    ("bookieAddress=", "bookieAddress", "expected an IP address or host name"),
    ("bookieAddress=my host", "bookieAddress", "expected an IP address or host name"),
    ("ledgerStorageClass=Foo", "ledgerStorageClass", "expected org.apache.bookkeeper"),
    ("ledgerStorageClass=", "ledgerStorageClass", "or their short names), got ''"),
    (
        "ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
        "ledgerStorageClass",
        "is not supported by bookiesim",
    ),
]


@pytest.mark.parametrize(("text", "key", "fragment"), BROKEN)
def test_broken_rule_names_the_key_and_its_line(text: str, key: str, fragment: str) -> None:
    err = error_of(lambda: load("# header\n" + text + "\n"))
    assert err.key == key
    assert fragment in str(err)
    # The error points at the line that set the blamed key or, if it kept its default, at
    # the line of the other key of the rule (every case sets its first line's key).
    lines = text.split("\n")
    blamed = [n for n, line in enumerate(lines, start=2) if line.startswith(f"{key}=")]
    line = blamed[0] if blamed else 2
    assert str(err).startswith(f"bk.conf:{line}: {key}: ")


def test_a_rule_broken_by_defaults_alone_has_no_line() -> None:
    err = error_of(lambda: BookieConfig(entry_log_per_ledger_enabled=True, gc_wait_time=10**8))
    assert str(err).startswith("minorCompactionInterval: 3600 s is shorter than gcWaitTime")
    assert (err.source, err.line, err.related) == (None, None, ("gcWaitTime",))


def test_every_rule_is_exercised() -> None:
    keys = {key for _, key, _ in BROKEN}
    assert {rule.keys[0] for rule in RULES} <= keys


ACCEPTED: list[str] = [
    # Interval (s) x 1000 == gcWaitTime (ms) is allowed ("must be >= gcWaitTime").
    "gcWaitTime=3600000",
    # A disabled compaction is not checked against gcWaitTime or the other compaction.
    "minorCompactionInterval=1\nminorCompactionThreshold=0",
    "minorCompactionInterval=-1\nminorCompactionThreshold=0.9",
    "majorCompactionInterval=0\nminorCompactionInterval=86400\nminorCompactionThreshold=0.9",
    "majorCompactionThreshold=-1\nmajorCompactionInterval=1",
    "majorCompactionThreshold=1.0",
    "logSizeLimit=0",
    "logSizeLimit=1073741824",
    "entryLogPerLedgerEnabled=false\nuseTransactionalCompaction=true",
    "journalAlignmentSize=4096",
    "journalAlignmentSize=1048576\njournalPreAllocSizeMB=1",
    "diskUsageThreshold=0.5\ndiskUsageWarnThreshold=0.5",
    "diskUsageWarnThreshold=0.9500001",  # upstream tolerates 1e-6 of float rounding
    "bookiePort=0\nhttpServerPort=0",
    "metadataServiceUri=sqlite:///var/lib/bookiesim/meta.db",
    "metadataServiceUri=zk://localhost:2181/ledgers",
    "metadataServiceUri=zk+hierarchical://zk1:2181,zk2:2181/ledgers",
    "bookieAddress=localhost\nadvertisedAddress=bookie-1.example",
]


@pytest.mark.parametrize("text", ACCEPTED)
def test_valid_edge_cases_are_accepted(text: str) -> None:
    load(text)


def test_replace_validates_coerces_and_leaves_the_original() -> None:
    cfg = BookieConfig()
    changed = cfg.replace(bookie_port=0, journal_sync_data="false", ledger_directories="/a,/b")
    assert (changed.bookie_port, changed.journal_sync_data) == (0, False)
    assert changed.ledger_directories == (Path("/a"), Path("/b"))
    assert cfg == BookieConfig()
    err = error_of(lambda: cfg.replace(use_transactional_compaction=True))
    assert err.key == "useTransactionalCompaction"
    assert error_of(lambda: cfg.replace(bookie_port="x")).key == "bookiePort"


@pytest.mark.parametrize(
    ("name", "suggested"), [("bookiePort", "bookie_port"), ("bookie_prot", "bookie_port")]
)
def test_replace_unknown_attribute_suggests(name: str, suggested: str) -> None:
    err = error_of(lambda: BookieConfig().replace(**{name: 1}))
    assert str(err) == f"unknown attribute {name!r} (did you mean {suggested!r}?)"


# --- Files, overrides and paths -----------------------------------------------------------


def test_from_file_resolves_relative_directories_against_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "conf" / "bk_server.conf"
    conf.parent.mkdir()
    conf.write_text(
        "journalDirectory=journal\n"
        "ledgerDirectories=data1, ../data2, /abs/data3\n"
        "indexDirectories=./index\n"
    )
    cfg = BookieConfig.from_file(conf)
    base = conf.parent.absolute()
    assert cfg.journal_directory == base / "journal"
    assert cfg.ledger_directories == (base / "data1", base / "../data2", Path("/abs/data3"))
    assert cfg.index_directories == (base / "index",)
    assert all(path.is_absolute() for path in cfg.effective_journal_directories)


def test_overrides_win_and_resolve_against_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "bk.conf"
    conf.write_text("bookiePort=3181\njournalDirectory=j\n")
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    cfg = BookieConfig.from_file(
        conf, ["bookiePort=0", " journalDirectory = jj ", "bookiePort=7", "gcWaitTime=1"]
    )
    assert cfg.bookie_port == 7  # the last override wins
    assert cfg.journal_directory == workdir / "jj"
    assert cfg.gc_wait_time == 1


def test_errors_in_files_and_overrides_say_where(tmp_path: Path) -> None:
    conf = tmp_path / "bk.conf"
    conf.write_text("# comment\n\ngcWaitTime=soon\n")
    err = error_of(lambda: BookieConfig.from_file(conf))
    assert str(err) == f"{conf}:3: gcWaitTime: expected an integer, got 'soon'"
    conf.write_text("gcWaitTime=1\n")
    err = error_of(lambda: BookieConfig.from_file(conf, ["gcWaitTime=later"]))
    assert str(err) == "--set: gcWaitTime: expected an integer, got 'later'"
    err = error_of(lambda: BookieConfig.from_file(conf, ["gcWaitTim=1"]))
    assert str(err) == "--set: unknown key 'gcWaitTim' (did you mean 'gcWaitTime'?)"
    err = error_of(lambda: BookieConfig.from_file(conf, ["gcWaitTime"]))
    assert "key=value" in str(err)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.conf"
    err = error_of(lambda: BookieConfig.from_file(missing))
    assert err.source == str(missing)
    assert "cannot read" in str(err)


def test_from_mapping_keeps_relative_paths_unless_given_a_base() -> None:
    mapping = {"journalDirectory": "j", "ledgerDirectories": [Path("l1"), "l2"]}
    cfg = BookieConfig.from_mapping(mapping)
    assert cfg.journal_directory == Path("j")
    assert cfg.ledger_directories == (Path("l1"), Path("l2"))
    cfg = BookieConfig.from_mapping(mapping, base_dir=Path("/base"))
    assert cfg.ledger_directories == (Path("/base/l1"), Path("/base/l2"))


def test_an_upstream_style_file() -> None:
    # The shape of upstream's conf/bk_server.conf (our own values), limited to keys we know.
    text = """
## Bookie settings
bookiePort=3181
# journalDirectories=/tmp/bk-txn
journalDirectories=/data/j1,/data/j2
ledgerDirectories=/data/l1,/data/l2
metadataServiceUri=zk+hierarchical://localhost:2181/ledgers
entryLogPerLedgerEnabled=true
logSizeLimit=1073741824
gcWaitTime=900000
minorCompactionThreshold=0.2
minorCompactionInterval=3600
majorCompactionThreshold=0.5
majorCompactionInterval=86400
journalMaxGroupWaitMSec=1
journalMaxBackups=5
httpServerPort=8000
"""
    cfg = load(text)
    assert cfg.journal_directories == (Path("/data/j1"), Path("/data/j2"))
    assert cfg.major_compaction_threshold == 0.5
    assert cfg.gc_wait_time == 900000


# --- Round trips --------------------------------------------------------------------------

_SPECIAL = {
    "gcWaitTime",
    "journalDirectories",
    "minorCompactionThreshold",
    "minorCompactionInterval",
    "majorCompactionThreshold",
    "majorCompactionInterval",
    "diskUsageThreshold",
    "diskUsageWarnThreshold",
    "diskUsageLwmThreshold",
    "journalAlignmentSize",
    "journalPreAllocSizeMB",
    "entryLogPerLedgerEnabled",
    "useTransactionalCompaction",
    "ledgerDirectories",
    "metadataServiceUri",
    "bookieAddress",
    "ledgerStorageClass",
}

# Characters a value may hold, including the properties syntax's own (=, :, #, !) and
# non-ASCII; leading and trailing blanks are trimmed by design.
_TEXT = st.text(st.sampled_from("ab Z9._-/=:#!@\u00e9\u4e2d"), max_size=12)


def _writable_path(text: str) -> bool:
    # Not blank, and no blank exposed by pathlib dropping a trailing slash ("d /" is "d ").
    shown = str(Path(text.strip())) if text.strip() else ""
    return bool(shown) and shown == shown.strip()


_PATH_TEXT = _TEXT.filter(_writable_path)
_LIST_ITEM = _PATH_TEXT  # no commas in the alphabet


def _value(spec: ConfigKey) -> st.SearchStrategy[object]:
    if spec.kind is Kind.INT:
        lo = int(spec.minimum) if spec.minimum is not None else -(2**63)
        hi = int(spec.maximum) if spec.maximum is not None else 2**63 - 1
        return st.integers(lo, hi)
    if spec.kind is Kind.FLOAT:
        return st.floats(spec.minimum, spec.maximum, allow_nan=False, allow_infinity=False)
    if spec.kind is Kind.BOOL:
        return st.booleans()
    if spec.kind is Kind.STR:
        return _TEXT
    if spec.kind is Kind.PATH:
        return _PATH_TEXT
    return st.lists(_LIST_ITEM, max_size=3)


@st.composite
def valid_mappings(draw: st.DrawFn) -> dict[str, object]:
    """Upstream key -> value for a random valid config: every ordinary key changed with even
    odds; the keys tied by rules drawn so that the rules hold.
    """
    mapping: dict[str, object] = {}
    for spec in CONFIG_KEYS:
        if spec.key not in _SPECIAL and draw(st.booleans()):
            mapping[spec.key] = draw(_value(spec))

    gc_wait = draw(st.integers(1, 10**9))
    shortest = -(-gc_wait // 1000)  # the least interval (s) that is >= gcWaitTime (ms)
    minor_on, major_on = draw(st.booleans()), draw(st.booleans())
    minor_i = draw(st.integers(shortest, 10**7)) if minor_on else draw(st.integers(-100, 0))
    lowest_major = minor_i + 1 if minor_on else shortest
    major_i = draw(st.integers(lowest_major, 10**8)) if major_on else draw(st.integers(-100, 0))
    minor_t = draw(st.floats(0.0, 1.0, exclude_min=True, exclude_max=True))
    major_t = draw(st.floats(minor_t, 1.0, exclude_min=True))
    full = draw(st.floats(0.0, 1.0, exclude_min=True, exclude_max=True))
    elpl = draw(st.booleans())
    mapping.update(
        {
            "gcWaitTime": gc_wait,
            "minorCompactionInterval": minor_i,
            "majorCompactionInterval": major_i,
            "minorCompactionThreshold": minor_t,
            "majorCompactionThreshold": major_t,
            "diskUsageThreshold": full,
            "diskUsageWarnThreshold": draw(st.floats(0.0, full)),
            "diskUsageLwmThreshold": draw(st.just(-1.0) | st.floats(0.0, full, exclude_min=True)),
            "journalAlignmentSize": 512 * draw(st.integers(1, 2048)),
            "journalPreAllocSizeMB": draw(st.integers(1, 10**6)),
            "entryLogPerLedgerEnabled": elpl,
            "useTransactionalCompaction": False if elpl else draw(st.booleans()),
            "ledgerDirectories": draw(st.lists(_LIST_ITEM, min_size=1, max_size=3)),
            "journalDirectories": draw(
                st.lists(_LIST_ITEM, max_size=3, unique_by=lambda d: os.path.abspath(d))
            ),
            "metadataServiceUri": draw(
                st.sampled_from(
                    ["", "sqlite:///tmp/m.db", "zk://h:2181/ledgers", "zk+flat://a:1,b:2/x"]
                )
            ),
            "bookieAddress": draw(st.sampled_from(["127.0.0.1", "::1", "0.0.0.0", "node-7"])),
            "ledgerStorageClass": draw(
                st.sampled_from(
                    [
                        "SortedLedgerStorage",
                        "InterleavedLedgerStorage",
                        "org.apache.bookkeeper.bookie.SortedLedgerStorage",
                        "org.apache.bookkeeper.bookie.InterleavedLedgerStorage",
                    ]
                )
            ),
        }
    )
    return mapping


@given(valid_mappings())
def test_round_trip_through_properties_and_mappings(mapping: dict[str, object]) -> None:
    cfg = BookieConfig.from_mapping(mapping)
    text = cfg.to_properties()
    assert BookieConfig.from_properties(text) == cfg
    # The strings of the file, given as a mapping, read the same as the file.
    assert BookieConfig.from_mapping({p.key: p.value for p in parse_properties(text)}) == cfg
    assert BookieConfig.from_mapping(cfg.to_mapping()) == cfg
    assert BookieConfig.from_properties(cfg.to_properties(comments=True)) == cfg


@given(st.text(max_size=200))
def test_any_text_parses_or_is_a_config_error(text: str) -> None:
    with contextlib.suppress(ConfigError):
        BookieConfig.from_properties(text)


def test_string_lists_are_supported_by_the_codec() -> None:
    # No key is a list of strings today; the type is there for the next one.
    spec = dataclasses.replace(CONFIG_KEYS[0], key="roles", kind=Kind.STR_LIST, minimum=None)
    assert config._coerce(spec, " a, b ,c", None) == ("a", "b", "c")
    assert config._coerce(spec, ["x"], None) == ("x",)
    assert spec.format(("a", "b")) == "a,b"
    assert error_of(lambda: config._coerce(spec, [1], None)).key == "roles"


# --- Documentation and command line -------------------------------------------------------


def test_committed_docs_are_fresh() -> None:
    committed = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == render_markdown(), (
        "docs/configuration.md is stale: run "
        "`python -m bookiesim.bookie.config --markdown > docs/configuration.md`"
    )


def test_docs_mark_bookiesim_keys_and_changed_defaults() -> None:
    doc = render_markdown()
    for line in doc.splitlines():
        if line.startswith(("| `bookieAddress`", "| `entryLogMaxOpenReadFiles`")):
            assert "**bookiesim.**" in line
        if line.startswith("| `entryLogPerLedgerEnabled`"):
            assert "**Changed default** (upstream: false)" in line
    for rule in RULES:
        assert rule.text in doc
    assert "sqlite:///path" in doc
    assert "zk://host:port[;host:port]/ledgers" in doc


def test_cli_markdown_defaults_and_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert config.main(["--markdown"]) == 0
    assert capsys.readouterr().out == render_markdown()

    assert config.main(["--defaults"]) == 0
    sample = capsys.readouterr().out
    assert BookieConfig.from_properties(sample) == BookieConfig()
    assert "# Pause between garbage collection passes." in sample

    conf = tmp_path / "bk.conf"
    conf.write_text("bookiePort=1\n")
    assert config.main(["--check", str(conf), "--set", "gcWaitTime=5"]) == 0
    out = capsys.readouterr().out
    assert "bookiePort=1\n" in out
    assert "gcWaitTime=5\n" in out

    conf.write_text("bookiePort=x\n")
    assert config.main(["--check", str(conf)]) == 2
    assert capsys.readouterr().err == f"error: {conf}:1: bookiePort: expected an integer, got 'x'\n"


def test_module_runs_as_a_script() -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "bookiesim.bookie.config", "--markdown"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    assert result.stdout == render_markdown()


@pytest.mark.parametrize(
    ("mapping", "storage"),
    [
        ({}, None),  # the default, whichever it is
        ({"ledgerStorageClass": "SortedLedgerStorage"}, "SortedLedgerStorage"),
        (
            {"ledgerStorageClass": "org.apache.bookkeeper.bookie.SortedLedgerStorage"},
            "SortedLedgerStorage",
        ),
        ({"ledgerStorageClass": "InterleavedLedgerStorage"}, "InterleavedLedgerStorage"),
        (
            {"ledgerStorageClass": "SortedLedgerStorage", "sortedLedgerStorageEnabled": "false"},
            "InterleavedLedgerStorage",
        ),
        (
            {
                "ledgerStorageClass": "InterleavedLedgerStorage",
                "sortedLedgerStorageEnabled": "true",
            },
            "InterleavedLedgerStorage",
        ),
    ],
)
def test_ledger_storage_class_takes_upstream_names_and_the_4_3_switch(
    mapping: dict[str, str], storage: str | None
) -> None:
    cfg = BookieConfig.from_mapping(mapping)
    expected = storage or cfg.ledger_storage_class.rsplit(".", 1)[-1]
    assert cfg.effective_ledger_storage == expected


def test_disk_usage_lwm_threshold_defaults_to_the_threshold_and_may_not_exceed_it() -> None:
    assert load("diskUsageThreshold=0.9").effective_disk_usage_lwm_threshold == 0.9
    assert load("diskUsageLwmThreshold=0.8").effective_disk_usage_lwm_threshold == 0.8
    error = error_of(lambda: load("diskUsageThreshold=0.9\ndiskUsageLwmThreshold=0.95"))
    assert error.key == "diskUsageLwmThreshold"
    assert "above diskUsageThreshold" in str(error)
    assert error_of(lambda: load("diskUsageLwmThreshold=0")).key == "diskUsageLwmThreshold"
