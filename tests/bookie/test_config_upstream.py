"""Upstream's own ``bk_server.conf`` starts a bookiesim bookie.

Why: an operator brings upstream's file. Every key upstream 4.17.4 defines must be known:
applied with upstream's meaning (the legacy ``zkServers``/``zkLedgersRootPath`` metadata
location too, where ``metadataServiceUri`` wins as upstream's getter has it), or accepted and
named in one WARNING line; a key upstream does not define either is still refused, in one line,
with the nearest name. ``data/upstream-4.17.4-bk_server.keys`` holds every key upstream's
shipped file sets, commented out or not, with its shipped value (the uncommented one where
the file gives several, else the first): names and values only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.bookie import exit_codes
from bookiesim.bookie.config import CONFIG_KEYS, BookieConfig, ConfigError, parse_properties
from bookiesim.bookie.upstream_keys import (
    LEGACY_KEYS,
    UPSTREAM_KEYS,
    legacy_metadata_uri,
    not_applied_warning,
)
from bookiesim.cli.main import main
from bookiesim.client import BookKeeper
from bookiesim.cluster.processes import BOOKIE_PROGRAM, bookie_process
from bookiesim.metadata import open_store
from bookiesim.metadata.cluster import ledgers_root_of
from bookiesim.metadata.registration import live_bookies
from bookiesim.metadata.zk_store import parse_zk_uri
from tests.missing import upstream_skip

if TYPE_CHECKING:
    from collections.abc import Callable

SHIPPED_KEYS = Path(__file__).parent / "data" / "upstream-4.17.4-bk_server.keys"
SHIPPED: list[tuple[str, str]] = [
    (prop.key, prop.value) for prop in parse_properties(SHIPPED_KEYS.read_text())
]
TYPO: tuple[str, str] = ("sortedLedgerStorageEnabled", "ture")
"""The one shipped value that is not a value: commented out upstream, and upstream's
properties library would refuse it as a boolean too. The tests use upstream's default."""
UNSET: tuple[str, str] = ("minUsableSizeForHighPriorityWrites", "")
"""Commented out upstream with no value ("if not set, ..."): a key set to nothing is not a
number, and upstream's properties library would refuse it too (a ConversionException when
its disk monitor starts). The tests leave it unset, as the comment means."""
VALID: list[tuple[str, str]] = [
    (key, "true" if (key, value) == TYPO else value)
    for key, value in SHIPPED
    if (key, value) != UNSET
]
NOT_APPLIED = [key for key, _ in SHIPPED if UPSTREAM_KEYS[key] is None]
SECURITY_OFF: dict[str, str] = {"tlsProviderFactoryClass": "", "bookieAuthProviderFactoryClass": ""}
"""The shipped values that turn TLS and authorization on (commented out upstream) name a key
store at the path "null" and an auth class "null": upstream's bookie does not start on them
either (docs/tls.md). The start-up test turns both off; parsing takes them as they are."""
STARTABLE: list[tuple[str, str]] = [(key, SECURITY_OFF.get(key, value)) for key, value in VALID]


def _text(pairs: list[tuple[str, str]]) -> str:
    return "".join(f"{key}={value}\n" for key, value in pairs)


def _error(text: str, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(ConfigError) as caught:
        BookieConfig.from_properties(text, source="bk.conf", overrides=overrides)
    return str(caught.value)


# --- The keys as data ---------------------------------------------------------------------


def test_the_shipped_file_holds_each_key_once_and_every_one_is_upstreams() -> None:
    keys = [key for key, _ in SHIPPED]
    assert len(keys) == len(set(keys)) == 218
    assert set(keys) <= set(UPSTREAM_KEYS)
    assert TYPO in SHIPPED
    assert UNSET in SHIPPED


def test_applied_keys_are_the_registrys_upstream_keys() -> None:
    registry = {spec.key: spec for spec in CONFIG_KEYS}
    ours = {key for key, spec in registry.items() if spec.bookiesim_only}
    applied = {key for key, target in UPSTREAM_KEYS.items() if target == key}
    assert applied == set(registry) - ours  # every upstream key of the registry, no other
    assert not ours & set(UPSTREAM_KEYS)
    assert set(LEGACY_KEYS) == {"zkServers", "zkLedgersRootPath", "compactionRate"}
    assert {UPSTREAM_KEYS[key] for key in LEGACY_KEYS} <= set(registry)


# --- Upstream's shipped file --------------------------------------------------------------


def test_every_shipped_key_with_its_shipped_value_parses() -> None:
    cfg = BookieConfig.from_properties(_text(VALID), source="bk_server.conf")
    assert cfg.not_applied == tuple(NOT_APPLIED)
    # Applied with the shipped values; metadataServiceUri wins over zkServers.
    assert cfg.metadata_service_uri == "zk+hierarchical://localhost:2181/ledgers"
    assert (cfg.zk_timeout, cfg.gc_wait_time, cfg.http_server_port) == (10000, 1000, 8080)
    assert cfg.entry_log_per_ledger_enabled is False
    assert cfg.effective_ledger_storage == "SortedLedgerStorage"
    assert "statsProviderClass" in NOT_APPLIED
    assert "httpServerEnabled" in NOT_APPLIED


def test_the_shipped_typo_is_refused_as_upstream_would() -> None:
    assert _error(_text(SHIPPED)) == (
        f"bk.conf:{[k for k, _ in SHIPPED].index(TYPO[0]) + 1}: "
        "sortedLedgerStorageEnabled: expected true or false, got 'ture'"
    )


def test_the_shipped_empty_value_is_refused_in_one_line() -> None:
    assert _error(_text([UNSET])) == (
        "bk.conf:1: minUsableSizeForHighPriorityWrites: expected an integer, got ''"
    )


def test_the_warning_names_each_key_once_in_the_order_given() -> None:
    assert not_applied_warning([]) is None
    assert not_applied_warning(["b", "a", "b"]) == "not applied by bookiesim: b, a"


async def _write_and_read(uri: str) -> list[bytes]:
    async with BookKeeper.open(uri) as bk:
        lh = await bk.create_ledger(1, 1, 1, password=b"conf")
        for n in range(3):
            await lh.add_entry(b"entry %d" % n)
        await lh.close()
        reader = await bk.open_ledger(lh.ledger_id, password=b"conf")
        return [entry.payload for entry in await reader.read_entries(0, 2)]


def _serve_on(conf: Path, root: Path, expected_not_applied: list[str]) -> None:
    """A bookie started on ``conf`` (dirs under ``root``, a SQLite store, free ports) answers
    a write, stops cleanly and warns once about the keys it does not apply."""
    uri = f"sqlite:///{root / 'metadata.db'}"
    settings = (
        f"journalDirectories={root / 'journal'}",
        f"indexDirectories={root / 'ledgers'}",
        f"metadataServiceUri={uri}",
        "httpServerHost=127.0.0.1",
    )
    program = (*BOOKIE_PROGRAM, "--conf", str(conf))
    with bookie_process(root, *settings, program=program) as bookie:
        assert trio.run(_write_and_read, uri) == [b"entry 0", b"entry 1", b"entry 2"]
        assert bookie.stop() == 0
    log = bookie.log_path.read_text()
    warned = [line for line in log.splitlines() if "not applied by bookiesim" in line]
    assert len(warned) == 1, log
    assert " WARNING " in warned[0]
    assert warned[0].endswith(f"not applied by bookiesim: {', '.join(expected_not_applied)}")


def test_a_bookie_starts_on_every_shipped_key(tmp_path: Path) -> None:
    conf = tmp_path / "bk_server.conf"
    conf.write_text(_text(STARTABLE))
    _serve_on(conf, tmp_path / "bookie", NOT_APPLIED)


@upstream_skip()
def test_a_bookie_starts_on_the_installations_own_file(tmp_path: Path) -> None:
    shipped = Path(os.environ["BOOKKEEPER_HOME"]) / "conf" / "bk_server.conf"
    if not shipped.is_file():
        pytest.skip(f"the installation has no {shipped}")
    conf = tmp_path / "bk_server.conf"
    shutil.copyfile(shipped, conf)  # relative paths in it resolve here, not in the install
    keys = [prop.key for prop in parse_properties(conf.read_text())]
    _serve_on(conf, tmp_path / "bookie", [k for k in keys if UPSTREAM_KEYS.get(k, k) is None])


# --- The legacy metadata location ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "uri"),
    [
        ("zkServers=zk1:2181,zk2:2181, zk3:2181\n", "zk://zk1:2181;zk2:2181;zk3:2181/ledgers"),
        (
            "zkServers=localhost:2181\nzkLedgersRootPath=/bk/ledgers\n",
            "zk://localhost:2181/bk/ledgers",
        ),
        ("zkLedgersRootPath=/bk\n", ""),  # a root alone names no store
        ("zkServers=\n", ""),
        ("zkServers=a:1\nmetadataServiceUri=sqlite:///m.db\n", "sqlite:///m.db"),
        ("metadataServiceUri=zk://b:2/x\nzkServers=a:1\nzkLedgersRootPath=/y\n", "zk://b:2/x"),
        ("metadataServiceUri=\nzkServers=a:1\n", "zk://a:1/ledgers"),  # blank: upstream's rule
    ],
)
def test_zk_servers_and_root_make_the_uri_unless_one_is_given(text: str, uri: str) -> None:
    cfg = BookieConfig.from_properties(text)
    assert cfg.metadata_service_uri == uri
    assert cfg.not_applied == ()


def test_a_given_uri_wins_over_the_files_zk_servers_from_the_command_line_too() -> None:
    cfg = BookieConfig.from_properties(
        "zkServers=a:1\n", overrides=["metadataServiceUri=sqlite:///m.db"]
    )
    assert cfg.metadata_service_uri == "sqlite:///m.db"
    cfg = BookieConfig.from_mapping({"zkServers": ["a:1", "b:2"], "zkLedgersRootPath": "/r"})
    assert cfg.metadata_service_uri == "zk://a:1;b:2/r"


def test_zk_timeout_and_compaction_rate_keep_upstreams_meaning() -> None:
    assert BookieConfig.from_properties("zkTimeout=30000").zk_timeout == 30000
    assert BookieConfig.from_properties("compactionRate=7").compaction_rate_by_entries == 7
    both = "compactionRate=7\ncompactionRateByEntries=9\n"
    assert BookieConfig.from_properties(both).compaction_rate_by_entries == 9


async def _gone_after(uri: str, bookie_id: str, kill: Callable[[], None]) -> float:
    """Seconds from ``kill`` until the bookie's registration is gone, seen by a store whose
    own short session sweeps often."""
    async with open_store(uri, session_timeout=0.6) as store:
        assert bookie_id in await live_bookies(store, ledgers_root_of(store))
        kill()
        start = trio.current_time()
        while True:  # polled: the sweep that drops it is another process's
            if bookie_id not in await live_bookies(store, ledgers_root_of(store)):
                return trio.current_time() - start
            await trio.sleep(0.1)


def test_zk_timeout_is_the_bookies_session_timeout(tmp_path: Path) -> None:
    # A kill -9ed bookie's registration outlives it by its session timeout: with
    # zkTimeout=1500 well within upstream's default of 10 s.
    uri = f"sqlite:///{tmp_path / 'metadata.db'}"
    root = tmp_path / "bookie"
    with bookie_process(root, f"metadataServiceUri={uri}", "zkTimeout=1500") as bookie:
        bookie_id = f"127.0.0.1:{bookie.bookie_port}"
        gone = trio.run(_gone_after, uri, bookie_id, bookie.kill9)
    assert 0.5 < gone < 5.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "zkServers=a:1\nzkLedgersRootPath=ledgers\n",
            "bk.conf:2: zkLedgersRootPath: expected an absolute ZooKeeper path such as "
            "/ledgers, got 'ledgers'",
        ),
        (
            "compactionRate=0\n",
            "bk.conf:1: compactionRate (as compactionRateByEntries): must be >= 1, got 0",
        ),
        ("zkTimeout=0\n", "bk.conf:1: zkTimeout: must be >= 1, got 0"),
        ("zkServers=a\nzkServers=b\n", "bk.conf:2: zkServers: set twice (first on line 1)"),
    ],
)
def test_a_bad_legacy_value_is_one_line_naming_its_key(text: str, message: str) -> None:
    assert _error(text) == message


# --- Keys upstream does not define --------------------------------------------------------


@pytest.mark.parametrize(
    ("wrong", "suggested"),
    [
        ("zkServer", "zkServers"),
        ("httpServerEnable", "httpServerEnabled"),
        ("dataIntegrityCheckingEnabled", "dataIntegrityChecking"),
        ("prometheusStatsHttpPorts", "prometheusStatsHttpPort"),
        ("zk_timeout", "zkTimeout"),
    ],
)
def test_a_key_upstream_does_not_define_is_refused_with_the_nearest(
    wrong: str, suggested: str
) -> None:
    assert _error(f"zkServers=a:1\n{wrong}=1\n") == (
        f"bk.conf:2: unknown key {wrong!r} (did you mean {suggested!r}?)"
    )
    assert _error("", (f"{wrong}=1",)) == (
        f"--set: unknown key {wrong!r} (did you mean {suggested!r}?)"
    )


def test_the_bookie_command_refuses_it_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "bk_server.conf"
    conf.write_text(_text(VALID) + "zkServer=localhost:2181\n")
    assert main(["bookie", "--conf", str(conf)]) == exit_codes.BAD_CONFIGURATION
    assert capsys.readouterr().err == (
        f"bookiesim bookie: {conf}:{len(VALID) + 1}: unknown key 'zkServer' "
        "(did you mean 'zkServers'?)\n"
    )


# --- Properties ---------------------------------------------------------------------------


@given(st.permutations(VALID).flatmap(lambda pairs: st.lists(st.sampled_from(pairs), unique=True)))
def test_any_subset_of_shipped_keys_in_any_order_parses(pairs: list[tuple[str, str]]) -> None:
    cfg = BookieConfig.from_properties(_text(pairs))
    given_keys = dict(pairs)
    assert cfg.not_applied == tuple(k for k, _ in pairs if UPSTREAM_KEYS[k] is None)
    if "metadataServiceUri" in given_keys:
        expected = given_keys["metadataServiceUri"]
    elif "zkServers" in given_keys:
        expected = "zk://localhost:2181" + given_keys.get("zkLedgersRootPath", "/ledgers")
    else:
        expected = ""
    assert cfg.metadata_service_uri == expected
    assert BookieConfig.from_properties(cfg.to_properties()) == cfg  # applied keys round-trip


_HOST = st.from_regex(
    r"[a-z][a-z0-9-]{0,8}(\.[a-z0-9]{1,5}){0,2}(:[1-9][0-9]{0,3})?", fullmatch=True
)
_ROOT = st.lists(st.from_regex(r"[A-Za-z0-9_-]{1,8}", fullmatch=True), max_size=3)


@given(st.lists(_HOST, min_size=1, max_size=4), st.none() | _ROOT)
def test_the_legacy_uri_names_the_servers_and_root_given(
    hosts: list[str], parts: list[str] | None
) -> None:
    root = None if parts is None else "/" + "/".join(parts)
    uri = legacy_metadata_uri([f" {host} " for host in hosts], root)
    assert uri is not None
    expected_hosts = ",".join(h if ":" in h else f"{h}:2181" for h in hosts)
    assert parse_zk_uri(uri) == (expected_hosts, root or "/ledgers")
    text = f"zkServers={','.join(hosts)}\n" + (
        "" if root is None else f"zkLedgersRootPath={root}\n"
    )
    assert BookieConfig.from_properties(text).metadata_service_uri == uri


_IGNORED = sorted(key for key, target in UPSTREAM_KEYS.items() if target is None)


@given(
    st.dictionaries(
        st.sampled_from(_IGNORED), st.from_regex(r"[A-Za-z0-9 ,./:=_-]*", fullmatch=True)
    )
)
def test_keys_not_applied_take_any_value_and_change_nothing(values: dict[str, str]) -> None:
    cfg = BookieConfig.from_properties(_text(list(values.items())))
    assert cfg.not_applied == tuple(values)
    assert cfg == BookieConfig()  # nothing applied: the defaults, every one
