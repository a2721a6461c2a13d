"""One run of ``bookiesim bench compare``: a fresh bookie of either kind, one load of either
kind against it, and what ``/proc`` saw of the bookie meanwhile (:mod:`.compare` has the
command, the workloads and the report).

The bookies: bookiesim's (``bookiesim bookie``) and upstream's (``server.Main`` from an
installation, :mod:`bookiesim.bench.upstream`), both with :data:`SETTINGS`. The loads: the
Python load client (:mod:`bookiesim.bench.load_client`), which talks to the bookie's port and
needs no metadata service, and upstream's own Java client (:mod:`bookiesim.bench.java_load`),
which finds the bookie and keeps its ledgers through ZooKeeper: for it bookiesim's bookie runs
with a ZooKeeper of its own and registers there, as upstream's bookie always does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import subprocess
import time
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from bookiesim.bench.bookie import run_client
from bookiesim.bench.java_load import java_load, load_argv
from bookiesim.bench.process_sampling import (
    Sampler,
    count_files,
    lifetime_cpu_seconds,
    reaped_children_cpu,
)
from bookiesim.bench.upstream import upstream_bookie, zookeeper_for
from bookiesim.cluster.processes import BOOKIE_PROGRAM, HOST, bookie_process

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

__all__ = ["KINDS", "LOADS", "SETTINGS", "Load", "limited", "run_one"]

STOP_TIMEOUT = 600.0
"""Seconds a bookie may take to stop (its last checkpoint after millions of adds)."""

SETTINGS: dict[str, object] = {
    "journalSyncData": "true",
    "journalMaxGroupWaitMSec": 2,
    "flushInterval": 10_000,
    "entryLogPerLedgerEnabled": "true",
    "maximumNumberOfActiveEntryLogs": 500,
    "ledgerStorageClass": "org.apache.bookkeeper.bookie.SortedLedgerStorage",
    "journalPreAllocSizeMB": 1,
}
"""The settings both bookies run with (upstream's keys and units)."""

KINDS = ("bookiesim", "upstream")
LOADS = {
    "bookiesim": "bookiesim's load client",
    "java": "upstream's Java client",
}
"""The loads: the pipelining Python client (:mod:`bookiesim.bench.load_client`) and upstream's
own client driven by a program of ours (:mod:`bookiesim.bench.java_load`)."""


@dataclasses.dataclass(frozen=True)
class Load:
    """Who sends one run's adds: ``name`` (a key of :data:`LOADS`) over ``channels``
    connections to the bookie; the Java load's ``classes`` compiled by
    :func:`~bookiesim.bench.java_load.compile_load`."""

    name: str = "bookiesim"
    channels: int = 1
    classes: Path | None = None


def _python_load(
    port: int, pid: int, *, ledgers: int, adds: int, size: int, rate: float | None, channels: int
) -> dict[str, Any]:
    """The Python load client's summary; a run the bookie failed (errors, a dropped
    connection) is kept with ``failed`` saying how."""
    try:
        result: dict[str, Any] = run_client(
            port, pid, ledgers=ledgers, adds=adds, size=size, rate=rate, channels=channels
        )
    except subprocess.CalledProcessError as exc:
        result = json.loads(exc.stdout) if exc.stdout.strip().startswith("{") else {}
        lines = (exc.stderr or "").strip().splitlines()
        result["failed"] = (
            f"{result['errors']} adds failed"
            if result.get("errors")
            else (lines[-1] if lines else f"load client exited with {exc.returncode}")
        )
    # run_client's CPU figures see the main process only; the tree's replace them below.
    for key in ("bookie_cpu_us_per_add", "bookie_cpu_share", "client_cpu_us_per_add"):
        result.pop(key, None)
    return result


@contextmanager
def _ready_load(
    load: Load, home: Path | None, port: int, pid: int, uri: str | None, *, ledgers: int,
    adds: int, size: int, rate: float | None,
) -> Iterator[Callable[[], dict[str, Any]]]:  # fmt: skip
    """The load, ready to start: yields the function that runs its timed adds and returns its
    summary, the same figures whichever load ran (``failed`` saying how when it did not
    complete). The Java load creates its ledgers and warms up before the block starts."""
    if load.name == "bookiesim":
        yield partial(
            _python_load, port, pid, ledgers=ledgers, adds=adds, size=size, rate=rate,
            channels=load.channels,
        )  # fmt: skip
        return
    assert home is not None
    assert load.classes is not None
    assert uri is not None
    argv = load_argv(
        home, load.classes, load.classes.parent, uri, ledgers=ledgers, adds=adds, size=size,
        rate=rate, channels=load.channels,
    )  # fmt: skip
    with java_load(argv, size) as go:
        yield go


@contextmanager
def _bookie(
    kind: str, root: Path, home: Path | None, open_files_limit: int | None,
    *, registered: bool = False,
) -> Iterator[tuple[int, int, Path, Any, str | None]]:  # fmt: skip
    """(port, pid, ledgers dir, stop, metadata service URI) of a fresh bookie of ``kind``
    under ``root``. ``registered``: bookiesim's bookie runs with a ZooKeeper of its own and
    registers there, as upstream's always does (upstream's client finds bookies there);
    otherwise it runs with no metadata service (URI None), as the Python load needs none."""
    # prlimit execs the bookie: the pid sampled is the bookie's.
    limit = () if open_files_limit is None else limited(open_files_limit)
    if kind == "bookiesim":
        with contextlib.ExitStack() as stack:
            settings = [f"{k}={v}" for k, v in SETTINGS.items()]
            uri = None
            if registered:
                assert home is not None
                uri = f"zk://{stack.enter_context(zookeeper_for(home, root))}/ledgers"
                settings += [f"metadataServiceUri={uri}", f"bookieAddress={HOST}"]
            ours = stack.enter_context(
                bookie_process(root, *settings, program=(*limit, *BOOKIE_PROGRAM))
            )
            yield ours.bookie_port, ours.proc.pid, ours.ledgers_dir, ours.stop, uri
    else:
        assert home is not None
        with upstream_bookie(home, root, SETTINGS, prefix=limit) as theirs:
            yield theirs.port, theirs.proc.pid, theirs.ledgers_dir, theirs.stop, theirs.metadata_uri


def run_one(
    kind: str,
    root: Path,
    home: Path | None,
    *,
    ledgers: int,
    adds: int,
    size: int,
    rate: float | None = None,
    open_files_limit: int | None = None,
    load: Load = Load(),  # frozen: one shared default is safe
) -> dict[str, Any]:
    """One bookie, one load, in a fresh ``root`` removed afterwards."""
    registered = load.name == "java"
    try:
        with (
            _bookie(kind, root, home, open_files_limit, registered=registered) as (
                port, pid, ledgers_dir, stop, uri,
            ),
            _ready_load(
                load, home, port, pid, uri, ledgers=ledgers, adds=adds, size=size, rate=rate
            ) as timed,
        ):  # fmt: skip
            # Sampled through the stop: its last checkpoint writes what the adds left in
            # memory (all of it, in a run shorter than flushInterval), and holds descriptors.
            with Sampler(pid) as sampler:
                result = timed()
                load_cpu = sampler.cpu_so_far()
                before_stop = lifetime_cpu_seconds(pid)
                reaped = reaped_children_cpu()
                stopping = time.perf_counter()
                stop(timeout=STOP_TIMEOUT)
                result["stop_seconds"] = round(time.perf_counter() - stopping, 2)
                # Once reaped its /proc is gone; what it used stopping is in our rusage.
                stop_cpu = max(0.0, reaped_children_cpu() - reaped - before_stop)
            result["files"] = count_files(ledgers_dir)
    finally:
        shutil.rmtree(root, ignore_errors=True)  # millions of adds: gigabytes per run
    done = max(1, int(result.get("adds", 0)))
    if "seconds" in result:
        result["bookie_cpu_share"] = round(load_cpu / result["seconds"], 3)
    result["stop_cpu_seconds"] = round(stop_cpu, 3)
    result["bookie_cpu_us_per_add"] = round((load_cpu + stop_cpu) / done * 1e6, 1)
    result["rss_peak_mib"] = round(sampler.rss_kib / 1024, 1)
    result["fds_peak"] = sampler.fds
    result["ledgers"] = ledgers
    result["load"], result["channels"] = load.name, load.channels
    if rate is not None:
        result["target_rate"] = round(rate, 1)
    return result


def limited(open_files: int) -> tuple[str, ...]:
    """A command prefix that runs the rest under ``ulimit -n open_files``, hard limit too:
    a bookie raises its soft limit to the hard one at start, as the JVM does."""
    return ("prlimit", f"--nofile={open_files}:{open_files}", "--")
