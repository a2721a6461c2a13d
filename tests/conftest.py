"""Suite-wide settings: hypothesis profiles, and the one real ZooKeeper of a test session.

``HYPOTHESIS_PROFILE=ci`` (set by CI) runs more examples; the default profile keeps the
inner loop quick. Deadlines are off because file-system latency on shared machines varies.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from bookiesim.metadata.testing import ZooKeeperServer, find_zookeeper, running_zookeeper

if TYPE_CHECKING:
    from collections.abc import Iterator

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


def _zookeeper_unavailable(reason: str) -> None:
    # DESIGN.md: under CI a missing server is a failure, never a skip.
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the ZooKeeper backend cannot be tested: {reason}")
    pytest.skip(f"ZooKeeper backend not tested: {reason}")


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper on loopback for the whole session (each test takes its own chroot)."""
    install = find_zookeeper()
    if isinstance(install, str):
        _zookeeper_unavailable(install)
    try:
        with running_zookeeper(tmp_path_factory.mktemp("zookeeper")) as server:
            yield server
    except RuntimeError as exc:
        _zookeeper_unavailable(str(exc))
