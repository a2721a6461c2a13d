"""``bookiesim dashboards render|check|screenshot``.

- ``render [--out DIR]``: write ``DIR/grafana/bookiesim.json`` and
  ``DIR/consoles/bookiesim.html`` from the panel list (``dashboards/`` in the repository is
  this command's output; a test fails when it is stale).
- ``check --prometheus URL``: run every expression of the dashboards against a live
  Prometheus and report which return no data or fail; exit 1 if any.
- ``screenshot --prometheus URL --out PNG``: the console page in headless Chromium.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bookiesim.cluster.prometheus import PrometheusError, query
from bookiesim.dashboards.consoles import CONSOLE_FILE, render_console
from bookiesim.dashboards.grafana import render_grafana
from bookiesim.dashboards.panels import all_expressions

__all__ = ["check_expressions", "register", "render_files"]

GRAFANA_FILE = "bookiesim.json"


def render_files(out: Path) -> list[Path]:
    (out / "grafana").mkdir(parents=True, exist_ok=True)
    (out / "consoles").mkdir(parents=True, exist_ok=True)
    grafana = out / "grafana" / GRAFANA_FILE
    console = out / "consoles" / CONSOLE_FILE
    grafana.write_text(render_grafana())
    console.write_text(render_console())
    return [grafana, console]


def check_expressions(url: str) -> list[dict[str, object]]:
    """One result per expression: row, panel, expr, series (count) and error."""
    results: list[dict[str, object]] = []
    for row, panel, expr in all_expressions():
        entry: dict[str, object] = {"row": row, "panel": panel, "expr": expr}
        try:
            entry["series"] = len(query(url, expr))
            entry["error"] = None
        except PrometheusError as exc:
            entry["series"] = 0
            entry["error"] = str(exc)
        results.append(entry)
    return results


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if (path := shutil.which(name)) is not None:
            return path
    return None


def screenshot(url: str, out: Path, width: int = 1400, height: int = 5200) -> None:
    chromium = find_chromium()
    if chromium is None:
        raise PrometheusError("no Chromium: `apt-get install chromium` for screenshots")
    with tempfile.TemporaryDirectory(prefix="bookiesim-chromium-") as profile:
        done = subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--hide-scrollbars",
                "--virtual-time-budget=15000",
                f"--window-size={width},{height}",
                f"--screenshot={out.resolve()}",
                f"{url}/consoles/{CONSOLE_FILE}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if done.returncode != 0 or not out.exists():
        raise PrometheusError(f"chromium failed ({done.returncode}): {done.stderr[-500:]}")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "dashboards",
        help="render the Grafana and console dashboards, check them against Prometheus",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="dashboards_command", metavar="ACTION", required=True)
    render = actions.add_parser("render", help="write the dashboard files")
    render.add_argument("--out", type=Path, default=Path("dashboards"))
    render.set_defaults(func=_render)
    check = actions.add_parser("check", help="run every expression against a Prometheus")
    check.add_argument("--prometheus", required=True, metavar="URL")
    check.add_argument("--json", action="store_true")
    check.set_defaults(func=_check)
    shot = actions.add_parser("screenshot", help="PNG of the console page (headless Chromium)")
    shot.add_argument("--prometheus", required=True, metavar="URL")
    shot.add_argument("--out", type=Path, default=Path("docs/dashboard.png"))
    shot.set_defaults(func=_screenshot)


def _render(args: argparse.Namespace) -> int:
    for path in render_files(args.out):
        print(path)
    return 0


def _check(args: argparse.Namespace) -> int:
    url = str(args.prometheus).rstrip("/")
    results = check_expressions(url)
    bad = [r for r in results if r["error"] or not r["series"]]
    if args.json:
        print(json.dumps({"expressions": len(results), "problems": bad}))
        return 1 if bad else 0
    console = Console()
    table = Table(title=f"{len(results)} expressions against {url}")
    for column in ("row", "panel", "series", "result"):
        table.add_column(column, justify="right" if column == "series" else "left")
    for r in results:
        verdict = "[red]error[/]" if r["error"] else ("ok" if r["series"] else "[red]no data[/]")
        table.add_row(str(r["row"]), str(r["panel"]), str(r["series"]), verdict)
    console.print(table)
    for r in bad:
        console.print(f"{r['panel']}: {r['error'] or 'no data'}\n  {r['expr']}", markup=False)
    console.print(f"{len(bad)} of {len(results)} expressions returned no data or failed")
    return 1 if bad else 0


def _screenshot(args: argparse.Namespace) -> int:
    try:
        screenshot(str(args.prometheus).rstrip("/"), args.out)
    except (PrometheusError, subprocess.TimeoutExpired) as exc:
        print(f"dashboards screenshot: {exc}", file=sys.stderr)
        return 1
    print(args.out)
    return 0
