"""The dashboards against a real Prometheus scraping a real three-bookie cluster under load.

Why: a misspelled metric or label makes a panel silently empty; only a live Prometheus with
live bookies shows it. Also: every bookie's ``/metrics`` passes ``promtool check metrics``,
the console page renders with its panels, ``cluster status`` and ``down`` handle Prometheus,
and a cluster still starts (saying how to install it) when there is no Prometheus.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING

import pytest

from bookiesim.autorecovery.upstream_metrics import REPLICATION_UPSTREAM_METRICS
from bookiesim.bookie.upstream_metrics.bookie_names import BOOKIE_UPSTREAM_METRICS
from bookiesim.cli.dashboards_command import check_expressions, find_chromium, screenshot
from bookiesim.cli.main import main
from bookiesim.cluster import prometheus
from bookiesim.cluster.processes import pid_alive
from bookiesim.dashboards.panels import ROWS
from tests.missing import PROMETHEUS, need_tool

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow


def _need(binary: str) -> str:
    return need_tool(binary, PROMETHEUS)


def _get(url: str, method: str = "GET", body: bytes | None = None) -> bytes:
    request = urllib.request.Request(url, data=body, method=method)
    with urllib.request.urlopen(request, timeout=30) as response:
        data: bytes = response.read()
        return data


def _wait_for_scrapes(url: str, targets: int, samples: int = 4, timeout: float = 60) -> None:
    """Until every target was scraped ``samples`` times since the load (Prometheus hands new
    targets to its scrapers only every 5 s, so the first scrape can come late)."""
    query = urllib.parse.urlencode(
        {"query": "count_over_time(up[20s]) >= 4".replace("4", str(samples))}
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = json.loads(_get(f"{url}/api/v1/query?{query}"))
        if len(doc["data"]["result"]) >= targets:
            return
        time.sleep(0.5)
    pytest.fail(f"Prometheus did not scrape {targets} targets {samples} times in {timeout} s")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    _need("prometheus")
    root = tmp_path_factory.mktemp("dashboards") / "c"
    args = ["cluster", "up", "--dir", str(root), "--prometheus", "--scrape-interval", "1s"]
    assert main([*args, "--set", "flushInterval=500", "--json"]) == 0
    state = json.loads((root / "cluster.json").read_text())
    try:
        # Load: three ledgers written, read, closed (write-close); one deleted and GC forced.
        ids = []
        for _ in range(3):
            assert main(["ledger", "create", "--cluster", str(root)]) == 0
        for ledger_id in range(3):
            ids.append(ledger_id)
            where = ["--cluster", str(root)]
            assert main(["ledger", "write", str(ledger_id), "--count", "300", *where]) == 0
            assert main(["ledger", "read", str(ledger_id), "--from", "298", *where]) == 0
            assert main(["ledger", "close", str(ledger_id), *where]) == 0
        time.sleep(1.5)  # a checkpoint flushes the write-closed logs
        assert main(["ledger", "delete", "0", "--cluster", str(root)]) == 0
        for bookie in state["bookies"]:
            port = bookie["httpServerPort"]
            url = f"http://127.0.0.1:{port}/api/v1/bookie/gc?wait=true"
            _get(url, "PUT", b'{"forceMajor": true}')
        _wait_for_scrapes(str(state["prometheus"]["url"]), len(state["bookies"]))
        yield {"root": root, **state}
    finally:
        main(["cluster", "down", "--dir", str(root)])


def test_every_dashboard_expression_returns_data(cluster: dict[str, object]) -> None:
    prometheus = cluster["prometheus"]
    assert isinstance(prometheus, dict)
    results = check_expressions(str(prometheus["url"]))
    bad = [(r["panel"], r["expr"], r["error"]) for r in results if r["error"] or not r["series"]]
    assert not bad
    assert main(["dashboards", "check", "--prometheus", str(prometheus["url"]), "--json"]) == 0


def _without_upstream_names(text: bytes) -> bytes:
    """The scrape less upstream's names: their labels (``threadPool``) and shapes are
    upstream's, which promtool's lint would flag; Prometheus reads them (tested live in
    tests/bookie/test_upstream_metrics_live.py)."""
    rows = (*BOOKIE_UPSTREAM_METRICS, *REPLICATION_UPSTREAM_METRICS)
    upstream = {row.name for row in rows}

    def family(line: str) -> str:
        name = line.split()[2] if line.startswith("# ") else line.split("{")[0].split()[0]
        return name.removesuffix("_count").removesuffix("_sum")

    lines = text.decode().splitlines()
    return "".join(f"{line}\n" for line in lines if line and family(line) not in upstream).encode()


def test_every_bookie_passes_promtool(cluster: dict[str, object]) -> None:
    promtool = _need("promtool")
    bookies = cluster["bookies"]
    assert isinstance(bookies, list)
    for bookie in bookies:
        text = _without_upstream_names(_get(f"http://127.0.0.1:{bookie['httpServerPort']}/metrics"))
        done = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_console_page_renders_with_every_panel(cluster: dict[str, object], tmp_path: Path) -> None:
    prometheus = cluster["prometheus"]
    assert isinstance(prometheus, dict)
    page = _get(f"{prometheus['url']}/consoles/bookiesim.html").decode()
    for row in ROWS:
        assert f">{row.title}</h2>" in page or all(p.stat for p in row.panels)
        for panel in row.panels:
            assert panel.title.replace("'", "&#39;") in page
    assert "<td>3</td>" in page  # three writable bookies, filled in by Prometheus
    if find_chromium() is not None:
        out = tmp_path / "dashboard.png"
        screenshot(str(prometheus["url"]), out)
        assert out.stat().st_size > 20_000


def test_status_shows_prometheus_and_down_stops_it(
    cluster: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    root = cluster["root"]
    assert main(["cluster", "status", "--dir", str(root), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["prometheus"]["url"].startswith("http://127.0.0.1:")
    assert status["prometheus"]["running"] is True


def test_without_prometheus_the_cluster_starts_and_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(prometheus, "find_prometheus", lambda: None)
    root = tmp_path / "c"
    assert main(["cluster", "up", "--dir", str(root), "--bookies", "1", "--prometheus"]) == 0
    try:
        out = capsys.readouterr().out
        assert "apt-get install prometheus" in out
        state = json.loads((root / "cluster.json").read_text())
        assert state["prometheus"] is None
        assert pid_alive(state["bookies"][0]["pid"])
    finally:
        assert main(["cluster", "down", "--dir", str(root)]) == 0
