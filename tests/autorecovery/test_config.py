"""Auto-recovery's settings: upstream's keys and defaults in the bookie's configuration, and
their conversion to seconds for the auditor and the workers.

The expected defaults are copied by hand from upstream 4.17.4's ``ServerConfiguration`` and
``AbstractConfiguration`` getters, not from our registry, so a slip in the registry shows here.
"""

from __future__ import annotations

import pytest

from bookiesim.autorecovery.config import AutoRecoveryConfig, standalone_bookie_id
from bookiesim.bookie.config import CONFIG_KEYS, BookieConfig, ConfigError

# key -> (upstream default, unit as upstream has it)
UPSTREAM: dict[str, tuple[object, str]] = {
    "autoRecoveryDaemonEnabled": (False, ""),
    "lostBookieRecoveryDelay": (0, "s"),
    "auditorPeriodicCheckInterval": (604800, "s"),
    "auditorPeriodicBookieCheckInterval": (86400, "s"),
    "auditorLedgerVerificationPercentage": (0, ""),
    "rereplicationEntryBatchSize": (10, "entries"),
    "openLedgerRereplicationGracePeriod": (30000, "ms"),
    "lockReleaseOfFailedLedgerGracePeriod": (300000, "ms"),
    "rwRereplicateBackoffMs": (5000, "ms"),
}


@pytest.mark.parametrize(("key", "expected"), sorted(UPSTREAM.items()))
def test_keys_have_upstreams_name_default_and_unit(key: str, expected: tuple[object, str]) -> None:
    default, unit = expected
    spec = next(spec for spec in CONFIG_KEYS if spec.key == key)
    assert spec.default == default
    assert type(spec.default) is type(default)
    assert spec.unit == unit
    assert spec.section == "Auto-recovery"
    assert not spec.bookiesim_only
    assert spec.upstream_default is None


def test_defaults_match_the_bookie_config_defaults() -> None:
    assert AutoRecoveryConfig.from_bookie_config(BookieConfig()) == AutoRecoveryConfig()


def test_durations_become_seconds_whatever_upstreams_unit() -> None:
    cfg = BookieConfig.from_properties(
        "autoRecoveryDaemonEnabled=true\n"
        "lostBookieRecoveryDelay=7\n"
        "auditorPeriodicCheckInterval=0\n"
        "auditorPeriodicBookieCheckInterval=60\n"
        "auditorLedgerVerificationPercentage=50\n"
        "rereplicationEntryBatchSize=3\n"
        "openLedgerRereplicationGracePeriod=1500\n"
        "lockReleaseOfFailedLedgerGracePeriod=2000\n"
        "rwRereplicateBackoffMs=250\n"
    )
    ar = AutoRecoveryConfig.from_bookie_config(cfg)
    assert ar == AutoRecoveryConfig(
        auto_recovery_daemon_enabled=True,
        lost_bookie_recovery_delay=7.0,
        auditor_periodic_check_interval=0.0,
        auditor_periodic_bookie_check_interval=60.0,
        auditor_ledger_verification_percentage=50,
        rereplication_entry_batch_size=3,
        open_ledger_rereplication_grace_period=1.5,
        lock_release_of_failed_ledger_grace_period=2.0,
        rw_rereplicate_backoff=0.25,
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("lostBookieRecoveryDelay=-1", "lostBookieRecoveryDelay: must be >= 0, got -1"),
        ("auditorLedgerVerificationPercentage=101", "must be <= 100, got 101"),
        ("rereplicationEntryBatchSize=0", "rereplicationEntryBatchSize: must be >= 1, got 0"),
        ("autoRecoveryDaemonEnabled=maybe", "autoRecoveryDaemonEnabled: expected true or false"),
    ],
)
def test_bad_values_name_the_key(line: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        BookieConfig.from_properties(line + "\n", source="bk.conf")
    assert message in str(info.value)
    assert str(info.value).startswith("bk.conf:1: ")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"lost_bookie_recovery_delay": -0.5}, "lost_bookie_recovery_delay: expected seconds"),
        ({"rw_rereplicate_backoff": float("nan")}, "rw_rereplicate_backoff: expected seconds"),
        ({"auditor_ledger_verification_percentage": 150}, "expected 0 .. 100, got 150"),
        ({"rereplication_entry_batch_size": 0}, "expected >= 1, got 0"),
    ],
)
def test_direct_construction_is_checked(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AutoRecoveryConfig().replace(**changes)


def test_fractions_of_a_second_for_tests() -> None:
    ar = AutoRecoveryConfig(lost_bookie_recovery_delay=0.2, auditor_periodic_check_interval=0.1)
    assert ar.lost_bookie_recovery_delay == 0.2


def test_standalone_id_is_the_bookie_id_the_config_would_give() -> None:
    assert standalone_bookie_id(BookieConfig()) == "127.0.0.1:3181"
    cfg = BookieConfig().replace(bookie_address="10.0.0.5", bookie_port=4000)
    assert standalone_bookie_id(cfg) == "10.0.0.5:4000"
    cfg = cfg.replace(advertised_address="bk1.example")
    assert standalone_bookie_id(cfg) == "bk1.example:4000"
