"""Shared by the metadata tests and their conftest: how a test reaches one backend."""

from __future__ import annotations

import sys
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from bookiesim.metadata import MetadataStore, open_store
from bookiesim.metadata.memory_store import MemoryStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from contextlib import AbstractAsyncContextManager

    import pytest

    from bookiesim.metadata.testing import ZooKeeperServer

REPO_ROOT = Path(__file__).resolve().parents[2]
"""Working directory of worker processes, so that ``python -m tests.metadata.worker`` works."""


@dataclass
class Backend:
    """How a test reaches one backend: the URI to share, and how to open clients on it."""

    name: str
    uri: str
    session_timeout: float
    chroot: str = ""
    """ZooKeeper: the test's own subtree of the shared server (every path, the URI's ledgers
    root ``/ledgers`` included, lives below it), so tests never see each other's nodes."""

    def open(self) -> AbstractAsyncContextManager[MetadataStore]:
        """Another client (session) on the same tree."""
        return open_store(
            self.uri,
            session_timeout=self.session_timeout,
            poll_interval=0.02,
            connect_timeout=10,
            chroot=self.chroot,
        )

    def worker(self, *args: str) -> list[str]:
        """Command line of a worker process (tests/metadata/worker.py) on this backend."""
        return [
            sys.executable,
            "-m",
            "tests.metadata.worker",
            args[0],
            self.uri,
            str(self.session_timeout),
            self.chroot,
            *args[1:],
        ]

    async def run_worker(self, *args: str) -> str:
        """Run a worker to completion; its stdout, or a failure that shows both streams."""
        proc = await trio.run_process(
            self.worker(*args), cwd=REPO_ROOT, capture_stdout=True, capture_stderr=True, check=False
        )
        out, err = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
        assert proc.returncode == 0, f"worker {args} exited {proc.returncode}:\n{out}\n{err}"
        return out


def backend_for(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, *, session_timeout: float = 2.0
) -> Backend | None:
    """The backend ``kind`` names: ``sqlite`` (a file under ``tmp_path``), ``zk`` (the shared
    server, a chroot of the test's own) or ``memory`` (None: one in-process store, opened by
    :func:`opened`)."""
    if kind == "memory":
        return None
    if kind == "sqlite":
        return Backend("sqlite", f"sqlite://{tmp_path / 'meta.db'}", session_timeout)
    server: ZooKeeperServer = request.getfixturevalue("zookeeper_server")
    # The server allows 0.5 s to 5 s sessions (2 to 20 ticks of 250 ms).
    chroot = f"/test-{uuid.uuid4().hex[:12]}"
    return Backend("zk", server.uri("/ledgers"), session_timeout, chroot=chroot)


@asynccontextmanager
async def opened(backend: Backend | None) -> AsyncIterator[MetadataStore]:
    """A client on ``backend``; for None, a fresh memory store, closed at the end."""
    if backend is None:
        memory = MemoryStore()
        try:
            yield memory
        finally:
            await memory.close()
    else:
        async with backend.open() as store:
            yield store
