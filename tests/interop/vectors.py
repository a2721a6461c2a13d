"""Where upstream's recorded vectors are, for every conformance test.

The vectors (``upstream-4.17.4/``: bytes upstream BookKeeper 4.17.4 wrote and sent, with a
README saying how each was produced and what to assert) are carried by the repository, in
``tests/interop/vectors/``, so a clone passes its tests wherever it is put. ``BOOKIESIM_VECTORS``
may name another directory holding ``upstream-4.17.4/`` (a newer recording, say). A test that
needs them and cannot find them fails with the path it looked at: a conformance suite that
skips silently proves nothing.

Add a function here per kind of vector rather than spelling paths in tests.
"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

__all__ = [
    "REPO_ROOT",
    "disk_dir",
    "extract_bookie_data",
    "upstream_dir",
    "wire_dir",
    "wire_frames",
    "wire_session_frames",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSION = "upstream-4.17.4"
ENV = "BOOKIESIM_VECTORS"
"""Overrides the vectors' directory (the one holding ``upstream-4.17.4/``)."""
DEFAULT_BASE = Path(__file__).resolve().parent / "vectors"
"""The repository's own copy."""


def upstream_dir() -> Path:
    """``<vectors>/upstream-4.17.4``; fails the calling test (never skips) when missing."""
    base = Path(os.environ[ENV]) if os.environ.get(ENV) else DEFAULT_BASE
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


def wire_dir() -> Path:
    """``wire/``: frames between upstream's client and an upstream bookie, v3 and v2."""
    return upstream_dir() / "wire"


def tls_exchanges(protocol: str) -> list[dict[str, str]]:
    """``tls/start-tls-<protocol>.jsonl`` (``v3`` or ``v2``): per connection, the START_TLS
    request and answer upstream's client and bookie exchanged (hex, no length prefix)."""
    path = upstream_dir() / "tls" / f"start-tls-{protocol}.jsonl"
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def wire_frames() -> list[dict[str, object]]:
    """Every line of ``wire/frames.jsonl`` in capture order: ``{"event": "open", "conn",
    "session"}`` for a new connection, else ``{"conn", "session", "dir", "len", "hex"}``
    (``dir`` is ``c2b`` or ``b2c``; ``hex`` is the frame without its length prefix)."""
    path = wire_dir() / "frames.jsonl"
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def wire_session_frames(conn: int, direction: str) -> list[bytes]:
    """The frame bodies of one recorded connection in one direction (``c2b``/``b2c``), in
    the order they were sent."""
    return [
        bytes.fromhex(str(line["hex"]))
        for line in wire_frames()
        if line.get("conn") == conn and line.get("dir") == direction
    ]
