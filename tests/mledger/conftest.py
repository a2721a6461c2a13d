"""Fixtures for managed-ledger tests: two in-process bookies with a SQLite store, a client,
and a clock the tests move by hand (rollover rules and TTLs are about time)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from bookiesim.client import BookKeeper, ClientConfig
from bookiesim.cluster.in_process import LocalCluster, running_cluster

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

TEST_CONFIG = ClientConfig(seed=11, request_timeout=5.0, connect_timeout=2.0)


class FakeClock:
    """Wall-clock milliseconds that move only when a test says so."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    async with running_cluster(tmp_path / "cluster", 2) as c:
        yield c


@pytest.fixture
async def bk(cluster: LocalCluster) -> AsyncIterator[BookKeeper]:
    async with BookKeeper(cluster.store, config=TEST_CONFIG) as client:
        yield client


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
