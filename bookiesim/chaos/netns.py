"""The driver of a :class:`~bookiesim.chaos.network.TestNetwork`: builds it with ``ip``,
starts processes in its nodes, starts and heals network faults with ``nft`` and ``tc``, and
tears everything down on every way out.

Privilege. Namespaces and nft need ``CAP_SYS_ADMIN`` and ``CAP_NET_ADMIN``: root (CI runs as
root), or root inside an unprivileged user namespace where the kernel allows one
(:func:`userns_argv` wraps a command so). :func:`missing_privilege` says in one line what is
missing when neither is at hand.

Exits. :class:`LiveNetwork` (sync) and :func:`open_network` (trio, teardown shielded from
cancellation) kill the processes started in the nodes, then delete the namespaces, which takes
the veths, the bridge and the nft tables with them. A harness killed with SIGKILL cannot do
that: :func:`cleanup` (``bookiesim chaos cleanup``) removes every namespace, link and table
whose name starts with ``bks-``, killing what still runs inside.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.chaos.netfaults import (
    NetworkFault,
    Step,
    apply_steps,
    fault_to_json,
    heal_steps,
)
from bookiesim.chaos.network import TestNetwork, owned_by_run

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable, Sequence

__all__ = [
    "FaultRecord",
    "LiveNetwork",
    "NetworkError",
    "cleanup",
    "leftovers",
    "missing_privilege",
    "open_network",
    "userns_argv",
]

_CAP_NET_ADMIN = 12
_CAP_SYS_ADMIN = 21
_TOOLS = {"ip": "iproute2", "nft": "nftables", "tc": "iproute2"}


class NetworkError(RuntimeError):
    """A command of the network driver failed; the message is one line."""


def _effective_caps() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def userns_available() -> bool:
    """Whether this user may create a user namespace with a network namespace."""
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(
        ["unshare", "--map-root-user", "--net", "true"], capture_output=True, check=False
    )
    return done.returncode == 0


def missing_privilege() -> str | None:
    """None when this process can build networks; otherwise one line saying what is missing
    (a tool, or the privilege, and how to get it)."""
    for tool, package in _TOOLS.items():
        if shutil.which(tool) is None:
            return f"{tool} not found: apt-get install {package}"
    caps = _effective_caps()
    if caps >> _CAP_NET_ADMIN & 1 and caps >> _CAP_SYS_ADMIN & 1:
        return None
    if userns_available():
        return (
            "not root (CAP_NET_ADMIN and CAP_SYS_ADMIN needed): run as root, or inside an"
            " unprivileged user namespace (unshare -rnm, see docs/chaos.md)"
        )
    return (
        "not root (CAP_NET_ADMIN and CAP_SYS_ADMIN needed) and this kernel refuses"
        " unprivileged user namespaces: run as root"
    )


def userns_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` as root of a fresh user, network, mount and PID namespace, with a private
    ``/run`` so ``ip netns`` can keep its files there. Without root. When ``argv`` ends,
    however it ends (SIGKILL included), the kernel kills everything left in its PID
    namespace and the namespaces go with the last process: nothing outlives the run."""
    return [
        "unshare", "--map-root-user", "--net", "--mount", "--pid", "--fork",
        "--mount-proc", "--kill-child", "--",
        "sh", "-c", 'mount -t tmpfs bks-run /run && exec "$@"', "sh", *argv,
    ]  # fmt: skip


def _run(step: Step | Sequence[str], check: bool = True, timeout: float = 30) -> str:
    argv, stdin = (step.argv, step.stdin) if isinstance(step, Step) else (tuple(step), None)
    try:
        done = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, check=False, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        raise NetworkError(f"{' '.join(argv)}: no end after {timeout:g} s") from exc
    if check and done.returncode != 0:
        why = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[0]
        raise NetworkError(f"{' '.join(argv)}: {why}")
    return done.stdout


@dataclass
class FaultRecord:
    """One network fault: when it started and, once healed, when it ended (``clock``)."""

    id: int
    kind: str
    description: str
    fault: NetworkFault
    start: float
    end: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "description": self.description,
            "fault": fault_to_json(self.fault),
            "start": self.start,
            "end": self.end,
        }


def _namespaces() -> list[str]:
    # Lines read "NAME" or "NAME (id: N)".
    return [line.split()[0] for line in _run(["ip", "netns", "list"]).splitlines() if line]


def _namespace_pids(namespace: str) -> list[int]:
    out = _run(["ip", "netns", "pids", namespace], check=False)
    return [int(p) for p in out.split() if p.isdigit()]


def _kill_namespace(namespace: str, wait: float = 5.0) -> list[int]:
    """SIGKILL every process in ``namespace`` and wait until none is left: a namespace
    deleted under a living process would outlive its name (and escape cleanup)."""
    killed = _namespace_pids(namespace)
    for pid in killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait
    while _namespace_pids(namespace) and time.monotonic() < deadline:
        time.sleep(0.02)
    return killed


def _kill_file_system_processes(mountpoint: str) -> list[int]:
    """SIGKILL the lazy file system processes (``python -m bookiesim.chaos.lazyfs``) serving
    ``mountpoint``; their pids."""
    killed = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if b"bookiesim.chaos.lazyfs" in args and os.fsencode(mountpoint) in args:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry), signal.SIGKILL)
                killed.append(int(entry))
    return killed


def _delete_namespace(namespace: str) -> None:
    _kill_namespace(namespace)
    _run(["ip", "netns", "delete", namespace], check=False)


@dataclass
class LiveNetwork:
    """A :class:`TestNetwork` built in the kernel, with its faults and processes.

    A context manager: entering builds the network (or removes what it built and raises
    :class:`NetworkError`), leaving kills the processes started in it and deletes it.
    """

    net: TestNetwork
    clock: Callable[[], float] = time.monotonic
    records: list[FaultRecord] = field(default_factory=list)
    _active: dict[int, FaultRecord] = field(default_factory=dict)
    _processes: list[subprocess.Popen[Any]] = field(default_factory=list)
    _created: list[str] = field(default_factory=list)
    """The namespaces this object added: the only ones its teardown deletes (a run id
    that clashes with a live run's must not take that run down)."""

    def __enter__(self) -> LiveNetwork:
        self.setup()
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def setup(self) -> None:
        missing = missing_privilege()
        if missing is not None:
            raise NetworkError(missing)
        try:
            for argv in self.net.setup_commands():
                _run(argv)
                if argv[:3] == ["ip", "netns", "add"]:
                    self._created.append(argv[3])
        except BaseException:
            self.teardown()
            raise

    def teardown(self) -> None:
        """Kill our processes, then delete every namespace of the run (idempotent)."""
        for process in self._processes:
            if process.poll() is None:
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
            for stream in (process.stdin, process.stdout, process.stderr):
                if stream is not None:
                    stream.close()
        self._processes.clear()
        for namespace in reversed(self._created):
            _delete_namespace(namespace)
        self._created.clear()
        now = self.clock()
        for record in self._active.values():
            record.end = now
        self._active.clear()

    def spawn(self, node: str, argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside ``node``'s namespace; it is killed at teardown."""
        process: subprocess.Popen[Any] = subprocess.Popen(self.net.exec_argv(node, argv), **popen)
        self._processes.append(process)
        return process

    def run(self, node: str, argv: Sequence[str], timeout: float = 30) -> str:
        """Run ``argv`` to its end inside ``node``'s namespace; its output, or
        :class:`NetworkError` naming the command."""
        return _run(self.net.exec_argv(node, argv), timeout=timeout)

    def run_process(
        self, node: str, argv: Sequence[str], timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` to its end inside ``node``'s namespace, whatever its exit code."""
        return subprocess.run(
            self.net.exec_argv(node, argv),
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )

    def start(self, fault: NetworkFault) -> FaultRecord:
        """Start ``fault`` now; on a refused command what was added is removed again."""
        fault_id = len(self.records) + 1
        done: list[Step] = []
        heal = heal_steps(self.net, fault_id, fault)
        try:
            for step in apply_steps(self.net, fault_id, fault):
                _run(step)
                done.append(step)
        except NetworkError:
            for undo in heal[: len(done)]:
                _run(undo, check=False)
            raise
        record = FaultRecord(fault_id, fault.kind, fault.describe(), fault, self.clock())
        self.records.append(record)
        self._active[fault_id] = record
        return record

    def heal(self, record: FaultRecord) -> None:
        """Remove exactly what ``record``'s fault added; its end is now."""
        if self._active.pop(record.id, None) is None:
            return
        for step in heal_steps(self.net, record.id, record.fault):
            _run(step)
        record.end = self.clock()

    def heal_all(self) -> None:
        for record in list(self._active.values()):
            self.heal(record)

    @property
    def active(self) -> list[FaultRecord]:
        return list(self._active.values())


@contextlib.asynccontextmanager
async def open_network(
    names: Iterable[str], run_id: str | None = None, subnet: str | None = None
) -> AsyncIterator[LiveNetwork]:
    """A :class:`LiveNetwork` for trio code: built in a worker thread, torn down even when
    the surrounding scope is cancelled (the teardown is shielded)."""
    plan = (
        TestNetwork.plan(names, run_id)
        if subnet is None
        else TestNetwork.plan(names, run_id, subnet)
    )
    live = LiveNetwork(plan)
    try:
        await trio.to_thread.run_sync(live.setup)
        yield live
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(live.teardown)


def leftovers(run_id: str | None = None) -> list[tuple[str, str]]:
    """Everything of ours (of run ``run_id``, if given) this machine still holds:
    ``(kind, name)`` with kind one of ``namespace``, ``link`` (root namespace), ``table``
    (root namespace's nft) or ``mount`` (a file system whose source is named ``bks-*``, such
    as a run's small ledger disks; the name is where it is mounted)."""
    found = [("namespace", ns) for ns in _namespaces() if owned_by_run(ns, run_id)]
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            source, where = line.split()[:2]
            if owned_by_run(source, run_id):
                # /proc/mounts escapes blanks in paths as octal (\040).
                found.append(("mount", where.encode().decode("unicode_escape")))
    for line in _run(["ip", "-o", "link", "show"]).splitlines():
        # "3: NAME@peer: <...>" or "3: NAME: <...>"
        name = line.split(":")[1].strip().split("@")[0]
        if owned_by_run(name, run_id):
            found.append(("link", name))
    if shutil.which("nft") is not None:
        for line in _run(["nft", "list", "tables"], check=False).splitlines():
            words = line.split()  # "table inet NAME"
            if len(words) == 3 and owned_by_run(words[2], run_id):
                found.append(("table", f"{words[1]} {words[2]}"))
    return found


def cleanup(run_id: str | None = None) -> list[str]:
    """Remove every namespace, link and nft table named ``bks-*`` (``bks-<run_id>*`` if
    given), killing the processes inside first; one line per thing removed. Idempotent."""
    removed: list[str] = []
    for kind, name in leftovers(run_id):
        if kind == "namespace":
            killed = _kill_namespace(name)
            _run(["ip", "netns", "delete", name])
            suffix = f" (killed {len(killed)} process{'es' if len(killed) != 1 else ''})"
            removed.append(f"namespace {name}{suffix if killed else ''}")
        elif kind == "link":
            _run(["ip", "link", "delete", name], check=False)
            removed.append(f"link {name}")
        elif kind == "mount":
            # A lazy file system's process first (it would serve the mount on, detached),
            # then the mount, lazily: whatever still has a file open there lets go later.
            served = _kill_file_system_processes(name)
            _run(["umount", "-l", name], check=False)
            removed.append(
                f"mount {name}" + (f" (killed its file system, pid {served[0]})" if served else "")
            )
        else:
            family, table = name.split()
            _run(["nft", "delete", "table", family, table], check=False)
            removed.append(f"nft table {name}")
    return removed
