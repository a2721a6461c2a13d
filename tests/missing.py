"""The one way a test says a server or tool it needs is not installed.

Outside CI such a test skips with one line naming what to install ("ZooKeeper not installed:
apt-get install zookeeper"), and ``make test`` ends with how many tests each missing thing
skipped (:func:`summary`, printed by ``tests/conftest.py``), so a short run is never mistaken
for a full one. Under ``CI=true`` the same call fails the test: CI installs every one of
these (``.ci/run``) and must prove what they test. The one exception is upstream
BookKeeper's installation (``BOOKKEEPER_HOME``), which CI does not have: its live tests skip
everywhere, counted like the others.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

import pytest

from bookiesim.chaos.lazyfs.mount import missing as lazyfs_missing
from bookiesim.metadata.testing import ZooKeeperInstall, find_zookeeper
from bookiesim.upstream.installation import installation

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "FUSE",
    "JAVA",
    "NFTABLES",
    "PROMETHEUS",
    "UPSTREAM",
    "ZOOKEEPER",
    "Missing",
    "need_fuse",
    "need_java",
    "need_privilege",
    "need_tool",
    "need_zookeeper",
    "skip_missing",
    "summary",
    "upstream_skip",
]


@dataclass(frozen=True)
class Missing:
    """Something a test needs that this machine lacks, and how to get it."""

    name: str
    """What is missing, as a user calls it."""
    install: str
    """The command (or setting) that provides it."""
    skips_in_ci: bool = False
    """True only where CI cannot have it either."""

    @property
    def reason(self) -> str:
        """The one line a skipped test shows."""
        return f"{self.name} not installed: {self.install}"


ZOOKEEPER = Missing("ZooKeeper", "apt-get install zookeeper")
JAVA = Missing("java", "apt-get install openjdk-17-jre-headless")
PROMETHEUS = Missing("Prometheus", "apt-get install prometheus")
"""Debian's ``prometheus`` package brings ``promtool`` too."""
NFTABLES = Missing("nftables", "apt-get install nftables")
"""``nft``, for the network faults of ``bookiesim.chaos`` (tests/chaos)."""
UPSTREAM = Missing(
    "upstream BookKeeper 4.17.4",
    "set BOOKKEEPER_HOME to an installation: lib/*.jar, Java 17 on PATH",
    skips_in_ci=True,
)
FUSE = Missing(
    "FUSE",
    "apt-get install fuse3 libfuse3-dev pkg-config, then rebuild .venv (pyfuse3); root",
)
"""The lazy file system (bookiesim.chaos.lazyfs): pyfuse3, which the Makefile installs only
where libfuse3's pkg-config file is, fusermount3 and /dev/fuse."""
KNOWN = (ZOOKEEPER, JAVA, PROMETHEUS, NFTABLES, FUSE, UPSTREAM)


def _in_ci() -> bool:
    return os.environ.get("CI") == "true"


def skip_missing(missing: Missing, detail: str = "") -> NoReturn:
    """Skip the calling test (fail it under ``CI=true``) for want of ``missing``; ``detail``
    says what was looked at, for the CI failure."""
    if _in_ci() and not missing.skips_in_ci:
        why = f" ({detail})" if detail else ""
        pytest.fail(f"CI=true and {missing.name} is missing{why}: {missing.install}")
    pytest.skip(missing.reason)


def need_java() -> str:
    """The ``java`` to run (``$JAVA`` or on ``PATH``), or skip for want of it."""
    java = os.environ.get("JAVA") or shutil.which("java")
    if not java:
        skip_missing(JAVA, "no java on PATH")
    return java


def need_fuse() -> None:
    """Return when a lazy file system can be mounted here, else skip naming what is missing."""
    why = lazyfs_missing()
    if why is None and os.geteuid() != 0:
        why = "not root (mounting with allow_other needs it)"
    if why is not None:
        skip_missing(FUSE, why)


def need_tool(binary: str, missing: Missing) -> str:
    """The path of ``binary`` on ``PATH``, or skip for want of ``missing`` (its package)."""
    path = shutil.which(binary)
    if path is None:
        skip_missing(missing, f"no {binary} on PATH")
    return path


def need_privilege(missing: str | None) -> None:
    """Skip the calling test (fail it under ``CI=true``, which runs as root) when
    ``missing`` names a privilege this process lacks (one line, e.g.
    :func:`bookiesim.chaos.netns.missing_privilege`'s); nothing when it is None."""
    if missing is None:
        return
    if _in_ci():
        pytest.fail(f"CI=true and {missing}")
    pytest.skip(missing)


def need_zookeeper() -> ZooKeeperInstall:
    """The Java and class path to run ZooKeeper with, or skip naming the one missing."""
    install = find_zookeeper()
    if isinstance(install, str):
        skip_missing(JAVA if install.startswith(("no java", "java ")) else ZOOKEEPER, install)
    return install


def _reason(longrepr: object) -> str:
    # A skipped report's longrepr is (path, lineno, "Skipped: REASON").
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return ""


def summary(skipped_reports: Iterable[object]) -> str | None:
    """``N tests skipped for missing servers: zookeeper (apt-get install zookeeper) x12,
    ...``, or None when nothing was skipped for a missing server."""
    by_reason = {m.reason: m for m in KNOWN}
    counts: Counter[Missing] = Counter()
    for report in skipped_reports:
        found = by_reason.get(_reason(getattr(report, "longrepr", None)))
        if found is not None:
            counts[found] += 1
    if not counts:
        return None
    parts = ", ".join(f"{m.name} ({m.install}) x{n}" for m, n in counts.most_common())
    total = sum(counts.values())
    return f"{total} test{'s' if total != 1 else ''} skipped for missing servers: {parts}"


def upstream_skip() -> pytest.MarkDecorator:
    """A ``skipif`` mark for the tests that run upstream's jars: they skip unless
    ``BOOKKEEPER_HOME`` names a usable installation (an installation given but unusable says
    what is wrong with it)."""
    found = installation()
    if not isinstance(found, str):
        return pytest.mark.skipif(False, reason="")
    if "BOOKKEEPER_HOME is not set" in found:
        reason = UPSTREAM.reason
    elif found.startswith("no java"):
        reason = JAVA.reason
    else:
        reason = found
    return pytest.mark.skipif(True, reason=reason)
