"""Bookie processes: start them, wait for their ready lines, stop them. The one process
spawner of the project.

Each bookie is a ``bookiesim bookie`` child in its own session (a Ctrl-C at the terminal reaches
only the parent, which then stops its bookies, or — for ``cluster up`` — leaves them running on
purpose), with its stderr in ``<root>/bookie.log``. It announces itself with one JSON line on
stdout (``bookiePort``, ``httpServerPort``, ...). Every wait has a timeout and every failure is
one :class:`ClusterError` whose message says which bookie, what happened and where its log is.

Users: ``bookiesim cluster``/``demo`` (:func:`spawn_bookie`, :func:`wait_ready`,
:func:`stop_bookies`) and tests and benchmarks (:func:`bookie_process`, one bookie for the
length of a block; ``program`` also runs the transport floor, a stand-in bookie that
announces itself the same way).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from bookiesim.bookie import exit_codes

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

HOST = "127.0.0.1"
BOOKIE_PROGRAM = (sys.executable, "-m", "bookiesim", "bookie")
"""The command that runs one bookie; it takes ``--set key=value`` settings."""
READY_TIMEOUT = 30.0


class ClusterError(Exception):
    """Something went wrong; the message says what, for the user."""


@dataclass
class LocalBookie:
    """One ``bookiesim bookie`` child process."""

    name: str
    root: Path
    proc: subprocess.Popen[bytes]
    bookie_port: int = 0
    http_port: int = 0
    exit_code: int | None = None
    """Popen's return code once stopped (negative: killed by that signal)."""
    killed: bool = False
    """True when it ignored SIGTERM for the whole stop timeout and got SIGKILL."""
    ready: dict[str, Any] = field(default_factory=dict)
    """Its ready line, parsed (empty until it is ready)."""
    _pending: bytes = field(default=b"", repr=False)

    @property
    def log_path(self) -> Path:
        return self.root / "bookie.log"

    @property
    def ledgers_dir(self) -> Path:
        return self.root / "ledgers"

    @property
    def journal_dir(self) -> Path:
        return self.root / "journal"

    @property
    def admin_url(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.admin_url}/metrics"

    @property
    def info_url(self) -> str:
        return f"{self.admin_url}/api/v1/bookie/info"

    @property
    def state_url(self) -> str:
        return f"{self.admin_url}/api/v1/bookie/state"

    def describe(self) -> str:
        """``pid N, running`` or ``pid N, exited with code C; log: PATH``."""
        code = self.proc.poll()
        if code is None:
            return f"pid {self.proc.pid}, running"
        return f"pid {self.proc.pid}, {exit_description(code)}; log: {self.log_path}"

    def kill9(self) -> None:
        """SIGKILL: no final checkpoint, no flushed buffers — a crash."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.exit_code = self.proc.wait()

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait; returns the exit code (0 for a clean stop)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.exit_code = self.proc.wait(timeout=timeout)
        return self.exit_code

    def log_tail(self, lines: int = 8) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


# -- processes -----------------------------------------------------------------------------


def pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` runs (None, a process never started: no). A paused process
    (SIGSTOP) is alive."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A killed child of ours that nobody reaped yet is a zombie: not alive for us.
    return _scheduler_state(pid) != "Z"


def pid_paused(pid: int | None) -> bool:
    """Whether process ``pid`` is stopped by a signal (SIGSTOP, SIGTSTP: ``cluster pause``
    or a user's ``kill -STOP``): alive, but it runs nothing until SIGCONT."""
    return pid is not None and _scheduler_state(pid) in ("T", "t")


def _scheduler_state(pid: int) -> str | None:
    """The state letter of ``/proc/PID/stat`` (``R``, ``S``, ``T``, ``Z``...); None when it
    cannot be read (gone, or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0]
    except (OSError, IndexError):
        return None


DIRECTORY_KEYS: Final = frozenset(
    {"journalDirectory", "journalDirectories", "ledgerDirectories", "indexDirectories"}
)
"""Keys whose relative paths :func:`bookie_settings` places in each bookie's directory."""


def _in_bookie_dir(root: Path, setting: str) -> str:
    """``setting`` with each relative path of a directory key made one under ``root``:
    ``--set journalDirectories=j0,j1`` for every bookie of a cluster means two journals in
    each bookie's directory, not two directories all of them would share (where the second
    bookie's start is refused by the first one's cookies)."""
    key, sep, value = setting.partition("=")
    if not sep or key.strip() not in DIRECTORY_KEYS:
        return setting
    paths = [p.strip() for p in value.split(",") if p.strip()]
    return f"{key}=" + ",".join(str(root / p) if not Path(p).is_absolute() else p for p in paths)


def bookie_settings(root: Path, *extra: str, flush_interval_ms: int = 10_000) -> list[str]:
    """``--set`` values for one local bookie under ``root`` (``extra`` ones win; relative
    directories in them are under ``root``)."""
    return [
        "bookiePort=0",
        "httpServerPort=0",
        f"bookieAddress={HOST}",
        f"httpServerHost={HOST}",
        f"journalDirectory={root / 'journal'}",
        f"ledgerDirectories={root / 'ledgers'}",
        "entryLogPerLedgerEnabled=true",
        f"flushInterval={flush_interval_ms}",
        "journalPreAllocSizeMB=1",
        *(_in_bookie_dir(root, setting) for setting in extra),
    ]


def spawn_bookie(
    name: str,
    root: Path,
    settings: Sequence[str],
    *,
    program: Sequence[str] = BOOKIE_PROGRAM,
    new_root: bool = True,
) -> LocalBookie:
    """Start ``bookiesim bookie`` in its own session (a Ctrl-C reaches only the demo, which
    then stops its bookies); stdout is a pipe for the ready line, stderr goes to a log file.
    ``root`` must not exist unless ``new_root`` is False (a bookie restarted on its data)."""
    root.mkdir(parents=True, exist_ok=not new_root)
    args = list(program)
    for setting in settings:
        args += ["--set", setting]
    # Appended to: a bookie restarted on its data keeps the log of its earlier runs.
    with (root / "bookie.log").open("ab") as log_file:
        try:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log_file,
                start_new_session=True,
            )
        except OSError as exc:
            raise ClusterError(f"{name}: could not start {args[0]}: {exc}") from exc
    return LocalBookie(name, root, proc)


def wait_ready(bookies: Sequence[LocalBookie], timeout: float) -> None:
    """Read every bookie's JSON ready line, all at once, within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    waiting: dict[int, LocalBookie] = {}
    with selectors.DefaultSelector() as selector:
        for bookie in bookies:
            assert bookie.proc.stdout is not None
            fd = bookie.proc.stdout.fileno()
            waiting[fd] = bookie
            selector.register(fd, selectors.EVENT_READ)
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                late = next(iter(waiting.values()))
                raise ClusterError(
                    f"{late.name} did not report ready within {timeout:.0f} s "
                    f"(log: {late.log_path}){_tail(late)}"
                )
            for key, _ in selector.select(remaining):
                fd = int(key.fd)
                bookie = waiting[fd]
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise ClusterError(_died_message(bookie))
                bookie._pending += chunk
                if b"\n" in bookie._pending:
                    line = bookie._pending.split(b"\n", 1)[0]
                    _parse_ready(bookie, line)
                    selector.unregister(fd)
                    del waiting[fd]


def _parse_ready(bookie: LocalBookie, line: bytes) -> None:
    try:
        ready = json.loads(line)
        # An auto-recovery daemon (``bookiesim autorecovery``) announces only the id it votes
        # with, ``address:port``.
        port = ready["bookiePort"] if "bookiePort" in ready else ready["bookieId"].rsplit(":", 1)[1]
        bookie.bookie_port = int(port)
        # No admin API (the transport floor) announces no httpServerPort.
        bookie.http_port = int(ready.get("httpServerPort", 0))
        bookie.ready = ready
    except (ValueError, KeyError, TypeError) as exc:
        raise ClusterError(
            f"{bookie.name}: unexpected ready line {line[:200]!r} ({exc}){_tail(bookie)}"
        ) from exc


def exit_description(code: int) -> str:
    """``exited with code 2 (bad configuration)`` or ``killed by SIGKILL`` for a Popen
    return code of a bookie."""
    if code >= 0:
        meaning = exit_codes.MEANINGS.get(code)
        return f"exited with code {code}" + (f" ({meaning})" if meaning else "")
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def _died_message(bookie: LocalBookie) -> str:
    try:
        how = exit_description(bookie.proc.wait(timeout=5))
    except subprocess.TimeoutExpired:
        how = "closed its stdout"
    return f"{bookie.name} {how} before it was ready; its log is {bookie.log_path}{_tail(bookie)}"


def _tail(bookie: LocalBookie) -> str:
    tail = bookie.log_tail()
    return f"\nlast lines of its log:\n{tail}" if tail else ""


def stop_bookies(bookies: Sequence[LocalBookie], timeout: float) -> None:
    """SIGTERM every running bookie, then wait for all of them; SIGKILL after ``timeout``."""
    for bookie in bookies:
        if bookie.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # exited in between
                bookie.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for bookie in bookies:
        try:
            bookie.exit_code = bookie.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            bookie.proc.kill()
            bookie.proc.wait()
            bookie.killed = True
        if bookie.proc.stdout is not None:
            bookie.proc.stdout.close()


@contextmanager
def bookie_process(
    root: Path,
    *settings: str,
    program: Sequence[str] = BOOKIE_PROGRAM,
    timeout: float = READY_TIMEOUT,
) -> Iterator[LocalBookie]:
    """Run one bookie child with its dirs under ``root`` (which may hold its data from an
    earlier run) for the length of the block, ready when the block starts; ``settings`` are
    extra ``key=value`` overrides. It is killed on leaving the block if it still runs."""
    base = (
        "bookiePort=0",
        "httpServerPort=0",
        f"journalDirectory={root / 'journal'}",
        f"ledgerDirectories={root / 'ledgers'}",
        "journalPreAllocSizeMB=1",
    )
    bookie = spawn_bookie(root.name, root, (*base, *settings), program=program, new_root=False)
    try:
        wait_ready([bookie], timeout)
        yield bookie
    finally:
        if bookie.proc.poll() is None:
            bookie.proc.kill()
            bookie.exit_code = bookie.proc.wait()
        if bookie.proc.stdout is not None:
            bookie.proc.stdout.close()
