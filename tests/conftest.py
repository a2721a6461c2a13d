"""Suite-wide settings: hypothesis profiles, the one real ZooKeeper of a test session, and
the closing count of tests skipped for a missing server (:mod:`tests.missing`).

``HYPOTHESIS_PROFILE=ci`` (set by CI) runs more examples; the default profile keeps the
inner loop quick. Deadlines are off because file-system latency on shared machines varies.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from bookiesim.metadata.testing import ZooKeeperServer, running_zookeeper
from tests.missing import need_zookeeper, summary

if TYPE_CHECKING:
    from collections.abc import Iterator

    from _pytest.terminal import TerminalReporter

settings.register_profile(
    "default",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper on loopback for the whole session (each test takes its own chroot)."""
    need_zookeeper()
    try:
        with running_zookeeper(tmp_path_factory.mktemp("zookeeper")) as server:
            yield server
    except RuntimeError as exc:
        # Installed but would not start: a failure under CI (DESIGN.md: a missing server is
        # never a skip there), elsewhere one line and a skip.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "no output"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and ZooKeeper did not start: {exc}")
        pytest.skip(f"ZooKeeper did not start: {first}")


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    """The count of tests skipped for a missing server, and what to install."""
    line = summary(terminalreporter.stats.get("skipped", []))
    if line is not None:
        terminalreporter.write_line(line, yellow=True)
