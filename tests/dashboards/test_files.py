"""The dashboard files: generated from the panel list, current, and well-formed.

Why: ``dashboards/`` is what users import into Grafana or point Prometheus at; a stale file
or a panel without a query would be a dashboard that lies.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bookiesim.cli.dashboards_command import render_files
from bookiesim.dashboards.panels import ROWS, all_expressions

REPO = Path(__file__).resolve().parents[2]
METRICS_DOC = (REPO / "docs" / "metrics.md").read_text()
AUTORECOVERY_METRICS_DOC = REPO / "docs" / "autorecovery-metrics.md"


def test_committed_files_are_what_the_panels_render(tmp_path: Path) -> None:
    for path in render_files(tmp_path):
        committed = REPO / "dashboards" / path.relative_to(tmp_path)
        assert committed.read_text() == path.read_text(), (
            f"{committed} is stale: run `bookiesim dashboards render`"
        )


def test_grafana_dashboard_is_importable_as_is() -> None:
    doc = json.loads((REPO / "dashboards" / "grafana" / "bookiesim.json").read_text())
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["bookie"]["includeAll"] is True
    assert "label_values(bookie_server_status, instance)" in variables["bookie"]["definition"]
    panels = doc["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    rows = [p["title"] for p in panels if p["type"] == "row"]
    assert rows == [r.title for r in ROWS]
    assert "Entry log per ledger" in rows
    assert "Garbage collection" in rows
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] >= 0
        assert pos["x"] + pos["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"]
        for target in panel["targets"]:
            assert 'instance=~"$bookie"' in target["expr"], target["expr"]


def test_every_metric_the_dashboards_use_is_documented() -> None:
    used = set()
    for _, _, expr in all_expressions():
        used |= {re.sub(r"_(bucket|sum|count)$", "", m) for m in re.findall(r"bookie_\w+", expr)}
    undocumented = {m for m in used if f"`{m}`" not in METRICS_DOC}
    assert not undocumented


def test_every_auto_recovery_metric_the_dashboards_use_is_documented() -> None:
    used = set()
    for _, _, expr in all_expressions():
        used |= {
            re.sub(r"_(bucket|sum|count)$", "", m) for m in re.findall(r"autorecovery_\w+", expr)
        }
    assert used, "the auto-recovery row uses no autorecovery_* metric"
    documented = AUTORECOVERY_METRICS_DOC.read_text()
    assert not {m for m in used if f"`{m}`" not in documented}
