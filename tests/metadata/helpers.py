"""Shared by the metadata tests and their conftest: how a test reaches one backend."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from bookiesim.metadata import MetadataStore, open_store

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

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
