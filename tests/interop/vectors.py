"""Where upstream's recorded vectors are, for every conformance test.

The vectors (``upstream-4.17.4/``: bytes upstream BookKeeper 4.17.4 wrote and sent, with a
README saying how each was produced and what to assert) live beside the repository, in
``../shared/vectors/``, not inside it. A test that needs them and cannot find them fails
with the path it looked at: a conformance suite that skips silently proves nothing.

Add a function here per kind of vector rather than spelling paths in tests.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

__all__ = ["REPO_ROOT", "disk_dir", "extract_bookie_data", "upstream_dir"]

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSION = "upstream-4.17.4"
ENV = "BOOKIESIM_VECTORS"
"""Overrides the vectors' directory (the one holding ``upstream-4.17.4/``)."""


def upstream_dir() -> Path:
    """``<vectors>/upstream-4.17.4``; fails the calling test (never skips) when missing."""
    base = Path(os.environ[ENV]) if ENV in os.environ else REPO_ROOT.parent / "shared" / "vectors"
    path = base / VERSION
    if not (path / "README.md").is_file():
        raise AssertionError(
            f"upstream vectors not found at {path} (set {ENV} to the directory holding "
            f"{VERSION}/): conformance tests need them"
        )
    return path


def disk_dir() -> Path:
    """``disk/``: one upstream bookie's journal and ledger dirs after a clean shutdown."""
    return upstream_dir() / "disk"


def extract_bookie_data(dest: Path) -> Path:
    """``disk/bookie-data.tar.gz`` unpacked into ``dest``; returns ``dest`` (which then
    holds ``journal/`` and ``ledgers/``)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(disk_dir() / "bookie-data.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    return dest
