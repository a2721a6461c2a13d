"""A Prometheus server for a local cluster: Debian's ``prometheus`` binary, on a free loopback
port, with the cluster's scrape config, data and console pages under the cluster dir.

Kept small on purpose: a short retention (``RETENTION``), the web UI on 127.0.0.1 only, and
the bookiesim console page rendered into ``DIR/consoles`` at start, so the server always shows
the panels of the code that started it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bookiesim.cluster.processes import pid_alive
from bookiesim.dashboards.consoles import CONSOLE_FILE, render_console
from bookiesim.metadata.testing import free_port

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "INSTALL_HINT",
    "PrometheusError",
    "PrometheusServer",
    "find_prometheus",
    "query",
    "start_prometheus",
    "stop_prometheus",
]

HOST = "127.0.0.1"
RETENTION = "2d"
READY_TIMEOUT = 30.0
INSTALL_HINT = (
    "Prometheus is not installed: `apt-get install prometheus` (Debian/Ubuntu; .ci/run does it), "
    "or put a prometheus binary on PATH"
)


class PrometheusError(Exception):
    """Prometheus could not be started; the message says why."""


@dataclass(frozen=True)
class PrometheusServer:
    url: str
    pid: int
    data_dir: str
    log: str

    def to_json(self) -> dict[str, object]:
        return {"url": self.url, "pid": self.pid, "dataDir": self.data_dir, "log": self.log}


def find_prometheus() -> str | None:
    return shutil.which("prometheus")


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def start_prometheus(root: Path, config: Path) -> PrometheusServer:
    """Start Prometheus on ``config`` with its data under ``root``; returns once it serves."""
    binary = find_prometheus()
    if binary is None:
        raise PrometheusError(INSTALL_HINT)
    consoles = root / "consoles"
    consoles.mkdir(parents=True, exist_ok=True)
    (consoles / CONSOLE_FILE).write_text(render_console())
    data = root / "prometheus-data"
    port = free_port(HOST)
    url = f"http://{HOST}:{port}"
    log_path = root / "prometheus.log"
    args = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--storage.tsdb.retention.time={RETENTION}",
        f"--web.listen-address={HOST}:{port}",
        f"--web.console.templates={consoles}",
        f"--web.console.libraries={consoles}",
        "--web.enable-lifecycle",
    ]
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + READY_TIMEOUT
    while not _ready(url):
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").splitlines()[-5:]
            raise PrometheusError(
                f"prometheus exited with code {proc.returncode}; log {log_path}:\n"
                + "\n".join(tail)
            )
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise PrometheusError(
                f"prometheus not ready within {READY_TIMEOUT:g} s; log {log_path}"
            )
        time.sleep(0.1)
    proc.returncode = 0  # left running on purpose: stopped by pid (stop_prometheus)
    return PrometheusServer(url, proc.pid, str(data), str(log_path))


def stop_prometheus(pid: int, timeout: float = 15.0) -> str:
    """SIGTERM, then SIGKILL after ``timeout``; returns what happened."""
    if not pid_alive(pid):
        return "not running"
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return f"killed (SIGKILL after {timeout:g} s)"
    return "stopped"


def query(url: str, expr: str, timeout: float = 10.0) -> list[dict[str, object]]:
    """The result vector of an instant query; raises ``PrometheusError`` for a bad query."""
    target = f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(target, timeout=timeout) as response:
            doc = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        body = json.loads(exc.read() or b"{}")
        raise PrometheusError(str(body.get("error", exc))) from exc
    except (OSError, ValueError) as exc:
        raise PrometheusError(f"{url}: {exc}") from exc
    if doc.get("status") != "success":
        raise PrometheusError(str(doc.get("error", doc)))
    result: list[dict[str, object]] = doc["data"]["result"]
    return result
