"""Upstream's metric names on a real three-bookie cluster, as a real Prometheus scrapes them.

Why: a dashboard written for upstream BookKeeper is a set of PromQL queries over these names;
only a live Prometheus scraping live bookies (in OpenMetrics, as it asks by default) shows
that every name documented as exported returns a series on every bookie, and that the values
are those of the load: adds counted as driven, bytes as written, latencies inside the run.
"""

from __future__ import annotations

import json
import math
import time
import urllib.request
from typing import TYPE_CHECKING

import pytest

from bookiesim.autorecovery.upstream_metrics import REPLICATION_UPSTREAM_METRICS
from bookiesim.bookie.upstream_metrics.bookie_names import (
    BOOKIE_SAME_NAME,
    BOOKIE_UPSTREAM_METRICS,
)
from bookiesim.bookie.upstream_metrics.rows import UpstreamKind
from bookiesim.cli.main import main
from bookiesim.client.digest import METADATA_LENGTH, DigestType
from bookiesim.cluster.prometheus import query
from tests.missing import PROMETHEUS, need_tool

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow

ENTRIES = 400
SIZE = 512
WRITE_QUORUM = 2
# What an add carries: the payload behind the ids, LAC and length, and the CRC32C digest
# (`ledger write`'s default), as upstream's WRITE_BYTES counts it (the entry's bytes).
ENTRY_BYTES = SIZE + METADATA_LENGTH + DigestType.CRC32C.digest_length


def _values(url: str, expr: str) -> list[float]:
    return [float(r["value"][1]) for r in query(url, expr)]  # type: ignore[index]


def _wait_for(url: str, expr: str, expected: float, timeout: float = 30.0) -> list[float]:
    """Until ``sum(expr)`` reads ``expected`` (the bookies hand some counts over at group
    commits and Prometheus scrapes every second), then the values."""
    deadline = time.monotonic() + timeout
    while True:
        values = _values(url, f"sum({expr})")
        if (values and values[0] == expected) or time.monotonic() > deadline:
            return values
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    need_tool("prometheus", PROMETHEUS)
    root: Path = tmp_path_factory.mktemp("upstream-names") / "c"
    args = ["cluster", "up", "--dir", str(root), "--prometheus", "--scrape-interval", "1s"]
    settings = ["--set", "flushInterval=500", "--set", "prometheusStatsLatencyRolloverSeconds=2"]
    assert main([*args, *settings]) == 0
    state = json.loads((root / "cluster.json").read_text())
    try:
        where = ["--cluster", str(root)]
        started = time.monotonic()
        assert main(["ledger", "create", *where]) == 0
        assert (
            main(["ledger", "write", "0", "--count", str(ENTRIES), "--size", str(SIZE), *where])
            == 0
        )
        assert main(["ledger", "read", "0", "--from", str(ENTRIES - 10), *where]) == 0
        assert main(["ledger", "close", "0", *where]) == 0
        for bookie in state["bookies"]:
            gc = f"http://127.0.0.1:{bookie['httpServerPort']}/api/v1/bookie/gc?wait=true"
            request = urllib.request.Request(gc, data=b'{"forceMajor": true}', method="PUT")
            with urllib.request.urlopen(request, timeout=30):
                pass
        yield {"root": root, "seconds": time.monotonic() - started, **state}
    finally:
        main(["cluster", "down", "--dir", str(root)])


def _url(cluster: dict[str, object]) -> str:
    prometheus = cluster["prometheus"]
    assert isinstance(prometheus, dict)
    return str(prometheus["url"])


def test_add_counts_bytes_and_latencies_match_the_load(cluster: dict[str, object]) -> None:
    url = _url(cluster)
    adds = ENTRIES * WRITE_QUORUM
    name = "bookkeeper_server_ADD_ENTRY_REQUEST"
    assert _wait_for(url, f'{name}_count{{success="true"}}', adds) == [adds]
    assert _values(url, f'sum({name}_count{{success="false"}})') == [0]
    # Every add's bytes on each of its write quorum's bookies.
    assert _wait_for(url, "bookie_WRITE_BYTES", adds * ENTRY_BYTES) == [adds * ENTRY_BYTES]
    sizes = "bookie_BOOKIE_ADD_ENTRY_BYTES"
    assert _values(url, f'sum({sizes}_count{{success="true"}})') == [adds]
    assert _values(url, f'sum({sizes}_sum{{success="true"}})') == [adds * ENTRY_BYTES]
    # Latencies: positive and inside the run, p50 <= p99 <= max, as the windows showed them.
    run_ms = float(str(cluster["seconds"])) * 1000
    peak = {}
    for q in ("0.5", "0.99", "1.0"):
        expr = f'max(max_over_time({name}{{success="true",quantile="{q}"}}[5m]))'
        (peak[q],) = _values(url, expr)
        assert 0 < peak[q] <= run_ms, (q, peak[q], run_ms)
    assert peak["0.5"] <= peak["0.99"] <= peak["1.0"]
    total_ms = sum(_values(url, f'{name}_sum{{success="true"}}'))
    assert 0 < total_ms / adds <= peak["1.0"]  # the mean is below the largest
    (syncs,) = _values(url, 'sum(bookie_journal_JOURNAL_SYNC_count{success="true"})')
    assert 0 < syncs <= adds
    expr = 'max(max_over_time(bookie_journal_JOURNAL_SYNC{success="true",quantile="0.99"}[5m]))'
    (sync_p99,) = _values(url, expr)
    assert 0 < sync_p99 <= run_ms


def test_bookie_state_under_upstream_names(cluster: dict[str, object]) -> None:
    url = _url(cluster)
    bookies = len(cluster["bookies"])  # type: ignore[arg-type]
    assert _values(url, "bookie_SERVER_STATUS") == [1.0] * bookies
    assert all(v > 0 for v in _values(url, "bookie_ledger_writable_dirs"))
    read = _values(url, 'sum(bookkeeper_server_READ_ENTRY_REQUEST_count{success="true"})')
    assert read
    assert read[0] >= 10
    assert _values(url, "sum(bookie_READ_BYTES)")[0] >= 10 * SIZE
    assert _values(url, "sum(bookie_gc_MAJOR_COMPACTION_TOTAL)")[0] >= bookies
    assert _values(url, 'min(bookie_gc_THREAD_RUNTIME_count{success="true"})')[0] >= 1
    assert _values(url, "sum(bookie_gc_ACTIVE_LEDGER_TOTAL)")[0] >= WRITE_QUORUM


def test_every_documented_upstream_name_has_a_series_per_bookie(
    cluster: dict[str, object],
) -> None:
    url = _url(cluster)
    bookies = len(cluster["bookies"])  # type: ignore[arg-type]
    missing = []
    for row in (*BOOKIE_UPSTREAM_METRICS, *REPLICATION_UPSTREAM_METRICS):
        series = f"{row.name}_count" if row.kind is UpstreamKind.SUMMARY else row.name
        values = _values(url, f"max by (instance) ({series})")
        if len(values) != bookies or any(math.isnan(v) or v < 0 for v in values):
            missing.append((series, values))
    missing += [(name, []) for name in BOOKIE_SAME_NAME if len(_values(url, name)) != bookies]
    assert not missing
