"""The local-cluster journey (``chaos run --journeys ...,cluster``), as a new user types it.

Once per run, in the client node: ``bookiesim cluster up --dir D --bookies 3`` (the cluster's
own bookies, on the node's loopback: this journey tests the command line, not the network),
then each bookie's cookies must name the ``host:port`` it registered as, then ``ledger create``,
``write`` and ``close`` (each a process of its own), ``cluster down``, ``cluster up`` on the same
directory, and the ledger must read back whole; a last ``cluster down``. Every step is a
``journey`` op with ``local: true`` (it needs only its own node), so the checker owes it success
whatever the nemesis does to the run's bookies; a failed step ends the journey.

It costs a few seconds of CPU (two starts of three bookies), so it is asked for by name. Its
bookies are killed when it ends however it ends (their command lines name ``D``); the
cluster's files stay in ``OUT/cluster-journey/`` for a look afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.metadata.cookies import VERSION_FILE, Cookie, CookieFormatError
from bookiesim.metadata.factory import open_store
from bookiesim.metadata.registration import registered_bookies

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from bookiesim.chaos.history import OpHandle, Recorder

__all__ = ["ClusterJourney", "cookie_problems", "leftover_bookies", "read_cookies"]

STEP_TIMEOUT = 90.0
"""Seconds a command of the journey may take (a ``cluster up`` waits for three bookies)."""
ENTRIES = 5
LOCAL = {"local": True, "workload": "cluster journey"}


def cookie_problems(cookies: dict[Path, str], registered: set[str]) -> str | None:
    """What is wrong with a cluster's cookies (``bookieHost`` by cookie file), in one line,
    or None: each must name an id registered in the metadata store, and every registered id
    must be named by a cookie."""
    wrong = {path: host for path, host in sorted(cookies.items()) if host not in registered}
    unnamed = sorted(registered - set(cookies.values()))
    if not cookies:
        return "no cookie found"
    if not wrong and not unnamed:
        return None
    listed = ", ".join(sorted(registered)) or "none"
    if wrong:
        path, host = next(iter(wrong.items()))
        where = "/".join(path.parts[-4:])
        return (
            f"{len(wrong)} of {len(cookies)} cookies name no registered bookie "
            f"(registered: {listed}): {where} names {host}"
        )
    return f"no cookie names the registered {', '.join(unnamed)}"


def read_cookies(directory: Path) -> dict[Path, str]:
    """The ``bookieHost`` of every cookie in a cluster's bookie directories, by file."""
    return {
        path: Cookie.decode(path.read_bytes(), str(path)).bookie_id
        for path in sorted(directory.glob(f"*/*/current/{VERSION_FILE}"))
    }


def leftover_bookies(directory: Path) -> list[int]:
    """Processes whose command line names ``directory`` (a cluster's bookies left running)."""
    mark = str(directory).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if mark in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


@dataclass
class ClusterJourney:
    rec: Recorder
    node: str
    exec_argv: Callable[[Sequence[str]], list[str]]
    """``argv`` run in the client node."""
    bookiesim: list[str]
    """The argv prefix of a ``bookiesim`` command (:meth:`.target.Target.bookiesim`)."""
    workdir: Path
    """A new directory; the cluster lives in ``workdir/cluster``."""

    def __post_init__(self) -> None:
        self.workdir = self.workdir.absolute()

    async def _command(self, step: str, *args: str) -> dict[str, Any] | None:
        """One command as a journey step; its JSON output (the last line that is JSON), or
        None once recorded failed."""
        h = self.rec.invoke("journey", process="cluster-journey", node=self.node,
                            args={"step": step, **LOCAL})  # fmt: skip
        try:
            with trio.fail_after(STEP_TIMEOUT):
                done = await trio.run_process(
                    self.exec_argv([*self.bookiesim, *args]), capture_stdout=True,
                    capture_stderr=True, check=False,
                )  # fmt: skip
        except trio.TooSlowError:
            self.rec.unknown(h, f"no answer within {STEP_TIMEOUT:.0f} s")
            return None
        if done.returncode != 0:
            error = (done.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
            self.rec.fail(h, f"exit {done.returncode}: {error[:300]}")
            return None
        lines = [json.loads(s) for s in done.stdout.decode().splitlines() if s.startswith("{")]
        out: dict[str, Any] = lines[-1] if lines else {}
        if step.endswith("read"):
            return self._check_read(h, lines)
        self.rec.ok(h, **{k: v for k, v in out.items() if k in ("ledgerId", "lastEntryId")})
        return out

    def _check_read(self, h: OpHandle, lines: list[dict[str, Any]]) -> dict[str, Any] | None:
        ids = sorted(line["entryId"] for line in lines if "entryId" in line)
        if ids != list(range(ENTRIES)):
            self.rec.fail(h, f"read entries {ids}, written 0..{ENTRIES - 1}")
            return None
        self.rec.ok(h, lastEntryId=ids[-1])
        return {"entries": len(ids)}

    async def _cookies(self, directory: Path) -> None:
        h = self.rec.invoke("journey", process="cluster-journey", node=self.node,
                            args={"step": "cluster cookies", **LOCAL})  # fmt: skip
        try:
            cookies = await trio.to_thread.run_sync(read_cookies, directory)
            async with open_store(f"sqlite:///{directory}/metadata.db") as store:
                registered = await registered_bookies(store)
        except (OSError, CookieFormatError) as exc:
            self.rec.fail(h, str(exc).splitlines()[0])
            return
        problem = cookie_problems(cookies, registered)
        if problem is not None:
            self.rec.fail(h, problem)
            return
        self.rec.ok(h, cookies=len(cookies))

    async def run(self) -> None:
        directory = self.workdir / "cluster"
        self.workdir.mkdir(parents=True, exist_ok=False)
        d, c = ["--dir", str(directory)], ["--cluster", str(directory)]
        try:
            up = ["cluster", "up", *d, "--bookies", "3", "--json"]
            if await self._command("cluster up", *up) is None:
                return
            # An observation, not a prerequisite: the journey goes on whatever the cookies say.
            await self._cookies(directory)
            created = await self._command(
                "cluster create", "ledger", "create", *c, "-e", "3", "-w", "2", "-a", "2", "--json"
            )
            if created is None or "ledgerId" not in created:
                return
            lid = str(created["ledgerId"])
            for step, args in (
                ("cluster write", ["ledger", "write", *c, lid, "--count", str(ENTRIES), "--json"]),
                ("cluster close", ["ledger", "close", *c, lid, "--json"]),
                ("cluster down", ["cluster", "down", *d]),
                ("cluster up again", up),
                ("cluster read", ["ledger", "read", *c, lid, "--json"]),
                ("cluster down again", ["cluster", "down", *d]),
            ):
                if await self._command(step, *args) is None:
                    return
        finally:
            for pid in leftover_bookies(directory):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
