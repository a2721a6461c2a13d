"""Fixtures for client tests: a local cluster of real in-process bookies and a client on it.

``cluster`` starts four bookies (so an E=3 ensemble has a spare for ensemble changes) with a
SQLite metadata store under the test's ``tmp_path``; ``bk`` is a client on that store with
a fixed seed (reproducible ensembles) and a short request timeout (a dropped frame fails in
seconds, not the default ten).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bookiesim.client import BookKeeper, ClientConfig
from bookiesim.client.testing import LocalCluster, running_cluster

TEST_CONFIG = ClientConfig(seed=7, request_timeout=3.0, connect_timeout=2.0)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    async with running_cluster(tmp_path / "cluster", 4) as c:
        yield c


@pytest.fixture
async def bk(cluster: LocalCluster) -> AsyncIterator[BookKeeper]:
    async with BookKeeper(cluster.store, config=TEST_CONFIG) as client:
        yield client
