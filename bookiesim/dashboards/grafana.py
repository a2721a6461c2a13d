"""The panels as a Grafana dashboard JSON, importable as is (Dashboards → Import).

Two template variables: ``datasource`` (any Prometheus data source; chosen at import) and
``bookie`` (the scrape targets that export ``bookie_server_status``, multi-select, "All" by
default). Rows are laid out in a 24-column grid: stat panels 6 wide, graphs 12 wide.
"""

from __future__ import annotations

import json
from typing import Any

from bookiesim.dashboards.panels import GRAFANA_BOOKIES, ROWS, Panel, expression

__all__ = ["UID", "render_grafana"]

UID = "bookiesim-cluster"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _panel(panel: Panel, panel_id: int, x: int, y: int, width: int, height: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": "stat" if panel.stat else "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": width, "h": height},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": (
            {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value"}
            if panel.stat
            else {"legend": {"displayMode": "list", "placement": "bottom"}}
        ),
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": DATASOURCE,
                "expr": expression(target, GRAFANA_BOOKIES),
                "legendFormat": target.legend,
            }
            for i, target in enumerate(panel.targets)
        ],
    }


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    panel_id = 1
    y = 0
    for row in ROWS:
        panels.append(
            {
                "id": panel_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
                "panels": [],
            }
        )
        panel_id += 1
        y += 1
        x = 0
        for panel in row.panels:
            width, height = (6, 4) if panel.stat else (12, 8)
            if x + width > 24:
                x = 0
                y += height
            panels.append(_panel(panel, panel_id, x, y, width, height))
            panel_id += 1
            x += width
        y += 8
    return {
        "uid": UID,
        "title": "bookiesim cluster",
        "description": "BookKeeper-style bookie metrics, entry log per ledger (BP-32) and GC",
        "tags": ["bookiesim", "bookkeeper"],
        "timezone": "browser",
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "bookie",
                    "label": "bookie",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "query": {
                        "query": "label_values(bookie_server_status, instance)",
                        "refId": "bookie",
                    },
                    "definition": "label_values(bookie_server_status, instance)",
                    "refresh": 2,
                    "multi": True,
                    "includeAll": True,
                    "allValue": ".+",
                    "current": {"text": "All", "value": "$__all"},
                    "sort": 1,
                    "hide": 0,
                },
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def render_grafana() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"
