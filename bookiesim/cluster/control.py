"""A local cluster that outlives the command that started it: N ``bookiesim bookie``
processes on loopback, each under ``DIR/bookie-N``, all registered in one metadata store
(``sqlite:///DIR/metadata.db`` unless another URI is given, e.g.
``zk://127.0.0.1:2181/ledgers``, whose path is the ledgers root as upstream reads it), a
Prometheus scrape config in ``DIR/prometheus.yml`` and the cluster's description in
``DIR/cluster.json`` (:mod:`.state`). ``bookiesim cluster`` and ``bookiesim demo`` are its
front-ends.

A cluster can stop and come back: :func:`cluster_up` on a directory that holds one starts the
bookies that do not run, each under its old id (the port its cookie names), on its old
directories, with the cluster's settings; :func:`stop_bookie`, :func:`kill_bookie` and
:func:`start_bookie` do it for one. A bookie's port is chosen once, below the kernel's
ephemeral range (an outgoing connection cannot sit on it while the bookie is down), recorded
before the bookie first starts and stamped into its cookies; later starts say
``bookiePort=0`` and the bookie binds the port its cookie names.

Auto-recovery runs by default, inside every bookie (``autoRecoveryDaemonEnabled=true``, as
upstream's bookies can run it): one of them is elected auditor, each runs a replication
worker, so a bookie that dies is re-replicated by the others after ``lostBookieRecoveryDelay``.
``autorecovery=False`` (``cluster up --no-autorecovery``), or the user's own
``--set autoRecoveryDaemonEnabled=false``, leaves it out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.bookie.config import BookieConfig, ConfigError
from bookiesim.bookie.cookie_check import read_dir_cookie, stamp_cookies
from bookiesim.cluster.in_process import stable_port
from bookiesim.cluster.processes import (
    HOST,
    ClusterError,
    LocalBookie,
    bookie_settings,
    pid_alive,
    pid_paused,
    spawn_bookie,
    stop_bookies,
    wait_ready,
)
from bookiesim.cluster.prometheus import PrometheusError, start_prometheus, stop_prometheus
from bookiesim.cluster.registrations import (
    adopt_unrecorded,
    clear_stale_registrations,
    wait_registered,
)
from bookiesim.cluster.state import (
    SCRAPE_FILE,
    STATE_FILE,
    ClusterUsageError,
    cluster_lock,
    default_metadata_uri,
    down_state,
    find_bookie,
    read_state,
    scrape_config,
    write_state,
)
from bookiesim.metadata import open_store
from bookiesim.metadata.cluster import ensure_cluster, ledgers_root_of
from bookiesim.metadata.errors import MetadataError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from bookiesim.metadata.cookies import Cookie

__all__ = [
    "SCRAPE_FILE",
    "STATE_FILE",
    "ClusterInterruptedError",
    "ClusterUsageError",
    "add_bookie",
    "cluster_down",
    "cluster_up",
    "default_metadata_uri",
    "detach",
    "kill_bookie",
    "merged_settings",
    "pause_bookie",
    "read_state",
    "resume_bookie",
    "scrape_config",
    "start_bookie",
    "start_cluster",
    "stop_bookie",
]

START_TIMEOUT = 30.0
REGISTRATION_TIMEOUT = 15.0
STOP_TIMEOUT = 30.0
RESERVED_KEYS = {
    "bookiePort": "chosen by the cluster, once per bookie (its id)",
    "metadataServiceUri": "give --metadata",
}


class ClusterInterruptedError(ClusterError):
    """Ctrl-C: the message says what was done, and how to go on."""


# -- planning --------------------------------------------------------------------------------


def _key(setting: str) -> str:
    return setting.partition("=")[0].strip()


def merged_settings(old: list[str], new: list[str]) -> list[str]:
    """``old`` with every key ``new`` sets replaced (later ones win), in first-seen order."""
    by_key: dict[str, str] = {}
    for setting in (*old, *new):
        by_key.pop(_key(setting), None)
        by_key[_key(setting)] = setting
    return list(by_key.values())


def _check_settings(uri: str, settings: list[str]) -> None:
    """Refuse what no bookie would start with, before anything starts or is written."""
    for setting in settings:
        if _key(setting) in RESERVED_KEYS:
            raise ClusterUsageError(
                f"--set {setting}: not for a cluster ({RESERVED_KEYS[_key(setting)]})"
            )
    try:
        _config([f"metadataServiceUri={uri}", *settings])
    except ConfigError as exc:
        raise ClusterUsageError(str(exc)) from None


def _config(settings: list[str]) -> BookieConfig:
    return BookieConfig.from_properties("", source="--set", overrides=settings)


def _new_record(root: Path, n: int) -> dict[str, Any]:
    bookie_root = root / f"bookie-{n}"
    if read_cookie(bookie_root) is not None:
        raise ClusterUsageError(
            f"{bookie_root} holds a bookie (it has a cookie) that {root / STATE_FILE} does not "
            "list (left by a `cluster up` of an earlier bookiesim): move it away, or give "
            "--dir another directory"
        )
    return {
        "name": f"bookie-{n}",
        "dir": str(bookie_root),
        "log": str(bookie_root / "bookie.log"),
        "bookieId": None,
        "bookiePort": 0,
        "httpServerPort": None,
        "pid": None,
        "expected": "stopped",
    }


def _plan(
    root: Path,
    bookies: int | None,
    metadata: str | None,
    settings: list[str],
    scrape_interval: str | None,
    autorecovery: bool | None,
) -> dict[str, Any]:
    """The cluster to bring up: the recorded one with the command's changes, or a new one;
    :class:`ClusterUsageError` when the command contradicts the recorded cluster."""
    if bookies is not None and bookies < 1:
        raise ClusterUsageError("--bookies must be at least 1")
    if (root / STATE_FILE).exists():
        state = read_state(root)
        if metadata is not None and metadata != state["metadata"]:
            raise ClusterUsageError(
                f"the cluster in {root} keeps its metadata in {state['metadata']}, not "
                f"{metadata}: leave out --metadata, or give --dir another directory"
            )
        count = len(state["bookies"])
        if bookies is not None and bookies < count:
            raise ClusterUsageError(
                f"the cluster in {root} has {count} bookies and `cluster up` brings back all "
                f"of them (--bookies {bookies} would leave some out): leave out --bookies, or "
                "`cluster stop BOOKIE` the ones to keep down"
            )
    else:
        state = {
            "metadata": metadata or default_metadata_uri(root),
            "settings": ["autoRecoveryDaemonEnabled=true"],
            "bookies": [],
            "scrapeConfig": str(root / SCRAPE_FILE),
            "scrapeInterval": "5s",
            "prometheus": None,
        }
    state["format"] = 2
    changes = list(settings)
    if autorecovery is not None:
        changes.insert(0, f"autoRecoveryDaemonEnabled={'true' if autorecovery else 'false'}")
    merged = merged_settings(state["settings"], changes)
    _check_settings(state["metadata"], merged)
    state["settings"] = merged
    if scrape_interval is not None:
        state["scrapeInterval"] = scrape_interval
    target = bookies if bookies is not None else (len(state["bookies"]) or 3)
    for n in range(len(state["bookies"]) + 1, target + 1):
        state["bookies"].append(_new_record(root, n))
    return state


# -- starting --------------------------------------------------------------------------------


def read_cookie(bookie_root: Path) -> Cookie | None:
    """The cookie of a cluster bookie's directories (journal first), if it has one."""
    for sub in ("journal", "ledgers"):
        cookie = read_dir_cookie(bookie_root / sub / "current")
        if cookie is not None:
            return cookie
    return None


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
        return True


def _bookie_args(state: dict[str, Any], record: dict[str, Any]) -> list[str]:
    """The ``--set`` values that start ``record`` as itself: ``bookiePort=0`` once it has a
    cookie (it binds the port the cookie names), else the port chosen for it (a new one when
    that is taken: nothing names a bookie that never stamped a cookie)."""
    root = Path(record["dir"])
    args = bookie_settings(root, f"metadataServiceUri={state['metadata']}", *state["settings"])
    cookie = read_cookie(root)
    if cookie is None:
        port = record["bookiePort"]
        if not port or not _port_free(port):
            port = stable_port(HOST)
        record["bookiePort"], record["bookieId"] = port, f"{HOST}:{port}"
        return [*args, f"bookiePort={port}"]
    if cookie.bookie_id == f"{HOST}:0" and record["bookiePort"]:
        # Stamped by bookiesim before it resolved port 0: name the id it registered with.
        cfg = _config([*args, f"bookiePort={record['bookiePort']}"])
        trio.run(_restamp, cfg)
    return [*args, "bookiePort=0"]


async def _restamp(cfg: BookieConfig) -> None:
    assert cfg.metadata_service_uri
    async with open_store(cfg.metadata_service_uri) as store:
        instance = await ensure_cluster(store)
        await stamp_cookies(
            cfg, store=store, ledgers_root=ledgers_root_of(store), instance_id=instance
        )


def _start(root: Path, state: dict[str, Any], records: list[dict[str, Any]]) -> list[LocalBookie]:
    """Start ``records``' bookies, wait until each serves and every running bookie of the
    cluster is registered, recording each step in ``cluster.json``. On a failure the bookies
    started here are stopped again; on Ctrl-C they are left running (they are on their way)
    and :class:`ClusterInterruptedError` says so."""
    started: list[tuple[dict[str, Any], LocalBookie]] = []
    dead = {r["bookieId"]: r["pid"] for r in records if r["bookieId"] and r["pid"] is not None}
    try:
        if dead:
            with contextlib.suppress(MetadataError, OSError):  # then the bookie waits for them
                trio.run(clear_stale_registrations, state["metadata"], dead)
        for record in records:
            with _interrupt_deferred():  # a child spawned but not recorded would be lost
                args = _bookie_args(state, record)
                bookie = spawn_bookie(record["name"], Path(record["dir"]), args, new_root=False)
                record.update(pid=bookie.proc.pid, expected="running", httpServerPort=None)
                started.append((record, bookie))
                write_state(root, state)
        wait_ready([b for _, b in started], START_TIMEOUT)
        for record, bookie in started:
            record["bookiePort"] = bookie.bookie_port
            record["bookieId"] = f"{HOST}:{bookie.bookie_port}"
            record["httpServerPort"] = bookie.http_port
        write_state(root, state)
        running = {b["bookieId"] for b in state["bookies"] if pid_alive(b["pid"])}
        live = trio.run(wait_registered, state["metadata"], running, REGISTRATION_TIMEOUT)
    except KeyboardInterrupt:
        detach([b for _, b in started])
        write_state(root, state)
        raise ClusterInterruptedError(_interrupted_line(root, state)) from None
    except BaseException:
        stop_bookies([b for _, b in started], STOP_TIMEOUT)
        for record, _ in started:
            record["expected"] = "stopped"
        write_state(root, state)
        raise
    for record in state["bookies"]:
        info = live.get(record["bookieId"])
        if info is not None and pid_alive(record["pid"]):
            record["httpServerPort"] = info.http_port  # known for bookies started earlier too
    write_state(root, state)
    _reload_prometheus(state)
    return [b for _, b in started]


@contextlib.contextmanager
def _interrupt_deferred() -> Iterator[None]:
    """Hold a Ctrl-C back until the block is done, then raise it (in the main thread; a
    Python-level handler, so the bookies spawned meanwhile do not inherit it)."""
    caught: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    except ValueError:  # not the main thread: no Ctrl-C reaches this code
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def _interrupted_line(root: Path, state: dict[str, Any]) -> str:
    running = [b["name"] for b in state["bookies"] if pid_alive(b["pid"])]
    rest = [b["name"] for b in state["bookies"] if b["name"] not in running]
    done = f"{', '.join(running)} running or starting" if running else "no bookie running"
    left = f", {', '.join(rest)} not started" if rest else ""
    return (
        f"interrupted: {done}{left}; `bookiesim cluster up --dir {root}` goes on, "
        f"`bookiesim cluster down --dir {root}` stops them"
    )


def _reload_prometheus(state: dict[str, Any]) -> None:
    """A bookie that came back has another admin port: Prometheus re-reads its scrape
    config on SIGHUP."""
    server = state.get("prometheus")
    if server and pid_alive(server["pid"]):
        with contextlib.suppress(ProcessLookupError):
            os.kill(server["pid"], signal.SIGHUP)


def detach(bookies: list[LocalBookie]) -> None:
    """Leave the bookies running past this process: ``cluster down`` stops them by pid."""
    for bookie in bookies:
        if bookie.proc.stdout is not None:
            bookie.proc.stdout.close()  # the ready line was the only thing it prints there
        # Popen would otherwise warn that its child is still running when it goes away.
        bookie.proc.returncode = 0


def start_cluster(
    root: Path,
    bookies: int | None,
    metadata: str | None,
    settings: list[str],
    scrape_interval: str | None = None,
    *,
    autorecovery: bool | None = None,
) -> tuple[list[LocalBookie], dict[str, Any]]:
    """Bring up the cluster of ``root`` (see :func:`_plan`: a new one, or the recorded one
    with ``bookies`` more at most and ``settings`` merged in) and start every bookie that
    does not run; returns those started (still children of the caller, see :func:`detach`)
    and the state written to ``cluster.json``. ``autorecovery`` (default: on for a new
    cluster, unchanged for a recorded one) runs auto-recovery in every bookie; ``settings``
    may still say otherwise, they come last."""
    with cluster_lock(root, "up"):
        state = _plan(root, bookies, metadata, settings, scrape_interval, autorecovery)
        write_state(root, state)
        adopt_unrecorded(state)
        waiting = [b for b in state["bookies"] if not pid_alive(b["pid"])]
        started = _start(root, state, waiting)
    return started, state


def add_bookie(root: Path, state: dict[str, Any]) -> LocalBookie:
    """Start one more bookie in the cluster of ``state`` (as ``bookie-N+1``, with the
    cluster's settings), wait until it serves and is registered, and add it to
    ``cluster.json`` and the scrape config (``state`` is updated too)."""
    with cluster_lock(root, "up"):
        record = _new_record(root, len(state["bookies"]) + 1)
        state["bookies"].append(record)
        write_state(root, state)
        (bookie,) = _start(root, state, [record])
    return bookie


def cluster_up(
    root: Path,
    bookies: int | None,
    metadata: str | None,
    settings: list[str],
    *,
    prometheus: bool = False,
    scrape_interval: str | None = None,
    autorecovery: bool | None = None,
) -> dict[str, Any]:
    """Start the bookies (see :func:`start_cluster`) and, with ``prometheus`` or when the
    cluster had one, a Prometheus scraping them; ``state["prometheusError"]`` says why none
    runs when one was asked for. The result's ``started`` names the bookies started now."""
    started, state = start_cluster(
        root, bookies, metadata, settings, scrape_interval, autorecovery=autorecovery
    )
    detach(started)
    server = state.get("prometheus")
    if prometheus or server:
        if server and pid_alive(server["pid"]):
            _reload_prometheus(state)
        else:
            try:
                state["prometheus"] = start_prometheus(root, root / SCRAPE_FILE).to_json()
            except PrometheusError as exc:
                state["prometheusError"] = str(exc)
            write_state(root, {k: v for k, v in state.items() if k != "prometheusError"})
    return dict(state, started=[b.name for b in started])


# -- one bookie ------------------------------------------------------------------------------


def _wait_until(done: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    """Poll ``done`` (a process's state: signals are delivered asynchronously) until it
    holds or ``timeout`` passes; whether it holds."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(step)
    return done()


def _wait_gone(pid: int, timeout: float) -> bool:
    return _wait_until(lambda: not pid_alive(pid), timeout)


def _record_after(root: Path, state: dict[str, Any], done: str) -> None:
    """Write the state after a signal already did its work: a disk with no room for it is
    one line that still says what was done (exit 1), not only that a file failed."""
    try:
        write_state(root, state)
    except ClusterError as exc:
        raise ClusterError(f"{done}, but {exc}") from exc


def _terminate(pid: int) -> None:
    """SIGTERM, then SIGCONT as systemd sends it: a paused bookie (``cluster pause``, or
    SIGSTOP from elsewhere) only acts on the SIGTERM, its final checkpoint, once it runs."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGCONT)


def _stop_pid(pid: int, timeout: float) -> str:
    _terminate(pid)
    if _wait_gone(pid, timeout):
        return "stopped"
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _wait_gone(pid, 5)
    return f"killed (SIGKILL after {timeout:g} s)"


def stop_bookie(root: Path, which: str, timeout: float = STOP_TIMEOUT) -> tuple[str, bool]:
    """SIGTERM one bookie (final checkpoint), SIGKILL after ``timeout``; the line to print
    and whether it changed anything."""
    with cluster_lock(root, "stop"):
        state = read_state(root)
        record = find_bookie(state, which)
        adopt_unrecorded(state)
        if not pid_alive(record["pid"]):
            return f"{record['name']}: not running ({down_state(record)})", False
        line = f"{record['name']} ({record['bookieId']}): {_stop_pid(record['pid'], timeout)}"
        record["expected"] = "stopped"
        _record_after(root, state, line)
    return line, True


def kill_bookie(root: Path, which: str) -> tuple[str, bool]:
    """SIGKILL one bookie (a crash: no final checkpoint); the line to print and whether it
    changed anything."""
    with cluster_lock(root, "kill"):
        state = read_state(root)
        record = find_bookie(state, which)
        adopt_unrecorded(state)
        if not pid_alive(record["pid"]):
            return f"{record['name']}: not running ({down_state(record)})", False
        with contextlib.suppress(ProcessLookupError):
            os.kill(record["pid"], signal.SIGKILL)
        _wait_gone(record["pid"], 5)
        line = f"{record['name']} ({record['bookieId']}): killed (SIGKILL)"
        record["expected"] = "killed"
        _record_after(root, state, line)
    return line, True


def pause_bookie(root: Path, which: str) -> tuple[str, bool]:
    """SIGSTOP one bookie: its process stays, its sockets stay open and its ZooKeeper
    session expires after zkTimeout (a long GC pause, a VM stall); the line to print and
    whether it changed anything. ``status`` shows it ``paused``; ``resume`` ends it."""
    return _pause_or_resume(root, which, pause=True)


def resume_bookie(root: Path, which: str) -> tuple[str, bool]:
    """SIGCONT one paused bookie; the line to print and whether it changed anything."""
    return _pause_or_resume(root, which, pause=False)


def _pause_or_resume(root: Path, which: str, *, pause: bool) -> tuple[str, bool]:
    verb, sig = ("pause", signal.SIGSTOP) if pause else ("resume", signal.SIGCONT)
    with cluster_lock(root, verb):
        state = read_state(root)
        record = find_bookie(state, which)
        adopt_unrecorded(state)
        write_state(root, state)
        pid = record["pid"]
        name = f"{record['name']} ({record['bookieId']})"
        if not pid_alive(pid):
            return f"{record['name']}: not running ({down_state(record)})", False
        if pid_paused(pid) == pause:
            return f"{name}: already {'paused' if pause else 'running'}", False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        _wait_until(lambda: pid_paused(pid) == pause, 5, step=0.01)
    return f"{name}: {'paused (SIGSTOP)' if pause else 'resumed (SIGCONT)'}", True


def start_bookie(root: Path, which: str) -> tuple[str, bool]:
    """Start one bookie of the cluster as itself (its id, directories and the cluster's
    settings); the line to print and whether it changed anything."""
    with cluster_lock(root, "start"):
        state = read_state(root)
        record = find_bookie(state, which)
        adopt_unrecorded(state)
        if pid_alive(record["pid"]):
            write_state(root, state)
            if pid_paused(record["pid"]):
                return (
                    f"{record['name']} ({record['bookieId']}): paused, not stopped "
                    f"(bookiesim cluster resume {record['name']} --dir {root})"
                ), False
            return f"{record['name']} ({record['bookieId']}): already running", False
        detach(_start(root, state, [record]))
    return (
        f"{record['name']} ({record['bookieId']}): running, pid {record['pid']}, "
        f"metrics http://{HOST}:{record['httpServerPort']}/metrics"
    ), True


# -- down ------------------------------------------------------------------------------------


def cluster_down(root: Path, timeout: float = STOP_TIMEOUT) -> list[tuple[str, str, bool]]:
    """Stop every bookie that runs (SIGTERM at once, SIGKILL after ``timeout``) and the
    cluster's Prometheus; per bookie the outcome and whether it was a clean stop."""
    with cluster_lock(root, "down"):
        state = read_state(root)
        adopt_unrecorded(state)
        outcomes: list[tuple[str, str, bool]] = []
        alive = [b for b in state["bookies"] if pid_alive(b["pid"])]
        for record in alive:
            _terminate(record["pid"])
        deadline = time.monotonic() + timeout
        for record in state["bookies"]:
            if record not in alive:
                outcomes.append((record["name"], f"not running ({down_state(record)})", True))
                continue
            if _wait_gone(record["pid"], max(0.0, deadline - time.monotonic())):
                outcomes.append((record["name"], "stopped", True))
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(record["pid"], signal.SIGKILL)
                _wait_gone(record["pid"], 5)
                outcomes.append((record["name"], f"killed (SIGKILL after {timeout:g} s)", False))
            record["expected"] = "stopped"
        server = state.get("prometheus")
        if server:
            outcome = stop_prometheus(server["pid"], timeout)
            outcomes.append(("prometheus", outcome, not outcome.startswith("killed")))
        try:
            write_state(root, state)
        except ClusterError as exc:
            # The bookies are stopped all the same; the next command finds them not running
            # whatever cluster.json still expects of them.
            outcomes.append((STATE_FILE, f"not updated: {exc}", False))
    return outcomes
