"""A real small file system for tests that fill a disk: a tmpfs mounted for the block.

Mounting needs root: elsewhere such tests skip, saying so, and under CI=true they fail (as
tests/conftest.py does for ZooKeeper).
"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = ["mounted_tmpfs"]


def _cannot_mount(reason: str) -> None:
    # As tests/conftest.py does for ZooKeeper: under CI a missing privilege is a failure.
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and a real full disk cannot be tested: {reason}")
    pytest.skip(f"a real full disk is not tested: {reason}")


@contextmanager
def mounted_tmpfs(where: Path, size: int, *, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes mounted at ``where`` for the block, always unmounted."""
    if os.geteuid() != 0:
        _cannot_mount("mounting a small file system needs root")
    where.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        _cannot_mount(f"mount -t tmpfs failed: {done.stderr.strip()}")
    try:
        yield where
    finally:
        # Lazy: a bookie killed a moment ago may still hold a file open.
        subprocess.run(["umount", "-l", str(where)], check=False)
