"""``/proc`` of a bookie and its descendants, for ``bench compare``: the CPU, resident set and
descriptors of a process tree sampled through a run (:class:`Sampler`), what a process used
over its life and what the ones this process reaped used, and the files a run left."""

from __future__ import annotations

import os
import resource
import threading
from pathlib import Path

from bookiesim.bench.bookie import process_cpu_seconds

__all__ = [
    "Sampler",
    "count_files",
    "lifetime_cpu_seconds",
    "process_tree",
    "reaped_children_cpu",
]


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process descended from it (a bookie may run helpers)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, ()))
    return tree


def _cpu_seconds(pid: int) -> float:
    try:
        return process_cpu_seconds(pid)
    except OSError:  # gone between listing and reading
        return 0.0


def tree_cpu_seconds(pids: list[int]) -> dict[int, float]:
    return {pid: _cpu_seconds(pid) for pid in pids}


def _status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class Sampler:
    """Peaks of the resident set and open descriptors of a process tree, every 0.2 s, and
    the CPU each of its processes used (a helper that exits mid-run keeps what it used)."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.pid = pid
        self.interval = interval
        self.rss_kib = 0
        self.fds = 0
        self._cpu_start = tree_cpu_seconds(process_tree(pid))
        self._cpu_last = dict(self._cpu_start)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="compare-sampler", daemon=True)

    def _sample(self) -> None:
        pids = process_tree(self.pid)
        rss = sum(_status_kib(p, "VmRSS") for p in pids)
        fds = sum(_fd_count(p) for p in pids)
        cpu = tree_cpu_seconds(pids)
        with self._lock:  # the sampling thread and cpu_so_far both fold samples in
            self.rss_kib = max(self.rss_kib, rss)
            self.fds = max(self.fds, fds)
            for pid, seconds in cpu.items():
                self._cpu_last[pid] = max(seconds, self._cpu_last.get(pid, 0.0))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def cpu_so_far(self) -> float:
        """CPU the tree used since the sampler started, sampled now; the main process's own
        peak resident set (``VmHWM``) is taken in too, while it still runs."""
        self._sample()
        with self._lock:
            self.rss_kib = max(self.rss_kib, _status_kib(self.pid, "VmHWM"))
        return sum(t - self._cpu_start.get(pid, 0.0) for pid, t in self._cpu_last.items())


def count_files(directory: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(directory))


def lifetime_cpu_seconds(pid: int) -> float:
    """CPU of a process since it started, with the children it has reaped (``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def reaped_children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
