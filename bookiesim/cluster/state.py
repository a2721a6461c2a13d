"""``DIR/cluster.json``: what a local cluster is made of, kept so that it can come back.

Written before any bookie starts and after every change (atomically: a crash leaves the old
or the new file), so a ``cluster up`` that was interrupted, failed or killed leaves a file
the next one resumes. Format 2::

    {"format": 2, "metadata": "sqlite:///DIR/metadata.db",
     "settings": ["autoRecoveryDaemonEnabled=true", "flushInterval=1000"],
     "scrapeConfig": "DIR/prometheus.yml", "scrapeInterval": "5s", "prometheus": null,
     "bookies": [{"name": "bookie-1", "dir": "DIR/bookie-1", "log": "DIR/bookie-1/bookie.log",
                  "bookieId": "127.0.0.1:20131", "bookiePort": 20131,
                  "httpServerPort": 41017, "pid": 4242, "expected": "running"}]}

``bookieId`` is chosen before the bookie first starts and never changes: the bookie's cookies
name it, and so do the ensembles of its ledgers. ``expected`` is what the last command asked
of the bookie (``running``, ``stopped`` or ``killed``): a bookie not alive that was expected
to run died by itself. A file without ``format`` is the previous version's (the same keys,
bookies that were all started together); :func:`read_state` upgrades it in memory.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from typing import TYPE_CHECKING, Any

from bookiesim.cluster.processes import HOST, ClusterError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = [
    "FORMAT",
    "SCRAPE_FILE",
    "STATE_FILE",
    "ClusterUsageError",
    "cluster_lock",
    "default_metadata_uri",
    "down_state",
    "find_bookie",
    "read_state",
    "scrape_config",
    "write_state",
]

STATE_FILE = "cluster.json"
SCRAPE_FILE = "prometheus.yml"
LOCK_FILE = ".cluster.lock"
FORMAT = 2


class ClusterUsageError(ClusterError):
    """The command contradicts the cluster or its own arguments (exit 2)."""


def default_metadata_uri(root: Path) -> str:
    return f"sqlite:///{root.resolve() / 'metadata.db'}"


def read_state(root: Path) -> dict[str, Any]:
    """The cluster of ``root``; :class:`ClusterError` when there is none or it is not one."""
    path = root / STATE_FILE
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterError(f"no cluster in {root} ({path} is missing); run: cluster up") from None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"{path} is not a cluster description: {exc}") from exc
    try:
        return _upgraded(state)
    except (KeyError, TypeError, ValueError) as exc:
        raise ClusterError(
            f"{path} is not a cluster description bookiesim can read ({exc!r} is missing or "
            "wrong); stop its bookies (kill the pids in it) and move it away"
        ) from None


def _upgraded(state: dict[str, Any]) -> dict[str, Any]:
    version = state.get("format", 1)
    if not isinstance(version, int) or version > FORMAT:
        raise ValueError("format")
    str(state["metadata"])
    for bookie in state["bookies"]:
        str(bookie["name"])
        str(bookie["dir"])
        bookie.setdefault("log", os.path.join(bookie["dir"], "bookie.log"))
        bookie.setdefault("pid", None)
        bookie.setdefault("httpServerPort", None)
        # The previous version recorded bookies once they ran, all together.
        bookie.setdefault("expected", "running")
        port = bookie.get("bookiePort") or 0
        bookie["bookiePort"] = int(port)
        bookie["bookieId"] = bookie.get("bookieId") or (f"{HOST}:{port}" if port else None)
    state.setdefault("settings", [])
    state.setdefault("scrapeInterval", "5s")
    state.setdefault("prometheus", None)
    state["format"] = FORMAT
    return state


def scrape_config(http_ports: list[int], interval: str = "5s") -> str:
    targets = ", ".join(f'"{HOST}:{port}"' for port in http_ports)
    return (
        "# Written by `bookiesim cluster up`: every bookie's /metrics.\n"
        "global:\n"
        f"  scrape_interval: {interval}\n"
        "scrape_configs:\n"
        "  - job_name: bookiesim\n"
        "    static_configs:\n"
        f"      - targets: [{targets}]\n"
    )


def _replace(path: Path, text: str) -> None:
    """Replace ``path`` whole or not at all: a full disk leaves the previous file as it was
    (and no temporary file), and says so as a :class:`ClusterError`."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise ClusterError(f"cannot write {path}: {exc.strerror or exc}") from exc


def write_state(root: Path, state: dict[str, Any]) -> None:
    """Write ``cluster.json`` and the scrape config (the bookies' admin ports known so far);
    :class:`ClusterError` when the disk refuses (the previous files stay as they were)."""
    ports = [b["httpServerPort"] for b in state["bookies"] if b.get("httpServerPort")]
    _replace(root / SCRAPE_FILE, scrape_config(ports, state.get("scrapeInterval", "5s")))
    _replace(root / STATE_FILE, json.dumps(state, indent=2) + "\n")


@contextlib.contextmanager
def cluster_lock(root: Path, command: str) -> Iterator[None]:
    """Hold ``DIR/.cluster.lock`` for one changing command: two at once (an ``up`` and a
    ``stop``, say) would each write ``cluster.json`` from what it read before the other. A
    process that dies lets go of it with its descriptors."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / LOCK_FILE, "a+") as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another command"
            raise ClusterError(
                f"{holder} is changing the cluster in {root}; try again when it is done"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"`cluster {command}` (pid {os.getpid()})")
        lock.flush()
        yield


def find_bookie(state: dict[str, Any], which: str) -> dict[str, Any]:
    """The bookie ``which`` names: ``bookie-N``, its index ``N`` (from 1) or its id
    ``HOST:PORT``; :class:`ClusterError` naming the choices otherwise."""
    bookies: list[dict[str, Any]] = state["bookies"]
    for bookie in bookies:
        if which in (bookie["name"], bookie.get("bookieId")):
            return bookie
    if which.isdigit() and 1 <= int(which) <= len(bookies):
        return bookies[int(which) - 1]
    names = ", ".join(f"{b['name']} ({b.get('bookieId') or 'no id yet'})" for b in bookies)
    raise ClusterUsageError(f"no bookie {which!r} in this cluster; its bookies: {names}")


def down_state(record: dict[str, Any]) -> str:
    """What a bookie that is not alive is: ``stopped`` or ``killed`` by a command, ``dead``
    when it was expected to run, ``not started`` when it never ran."""
    if record["pid"] is None:
        return "not started"
    expected = record.get("expected", "running")
    return "dead" if expected == "running" else str(expected)
